"""The downstream experiment: every method's selection of the pool trains models on the same token
budget with several seeds, and the tables say which differences the run resolves.

  python -m reproduce.experiments.downstream --pool runs/pool --output runs/downstream --seeds 0 1 2

Every flag is checked before the first stage; a bad one is refused with nothing written
(docs/downstream.md, "Flags checked before any work").

Chain (each step skips what a previous run finished, so an interrupted run resumes; each stage is
a class below whose fields are what it reads, with its output and its done-test; arms.md, the
verdict and the table of runs are written by downstream_report.py):
  prepare   the pool's shards -> id, quality, embedding (incremental, reproduce/pipeline/prepare.py)
  select    each method over the prepared rows (reproduce/pipeline/select.py), in each arm: free,
            and stratified (`<method>@strat`: the budget split over the pool's domains in
            proportion, each domain's share chosen by the method within it); the calibration
            selections (reproduce/pool/calibration.py: the null `random-null`, `junk-<d>`,
            `dup-<d>`, built from random's selection) and, when asked for, the old positive
            control (reproduce/pool/control.py). Selection does not depend on the training seed:
            every seed of a method trains on the same selection (seed --select_seed)
  tokenize  one BPE tokenizer trained on the whole pool, then each selection (datatrove)
  train     one model per (method, seed), one token budget for all (reproduce/pipeline/train.py)
  evaluate  per-domain held-out bits per byte + the BBC tasks (eval/run.py), one file per run;
            with --outside, bits per byte on text from outside the pool too (a run scored
            before without it is scored again)
  tables    per arm, Table 2 with 95% CIs, paired differences with the arm's random, planted rows
            kept, each metric's SNR and the dose-response (eval/tables.py, eval/calibration.py;
            the stratified arm is calibrated by the free arm's rows); then arms.md: each
            method's outcome in both arms, and whether a difference is the domain mix or the
            choice within domains
  figures   forest.png and dose-response.png (figures/downstream.py)
  verdict   verdict.md, printed last: the verdict on one screen and where the full tables are
The calibration selections, token sets and training runs go `--jobs` at a time; the methods'
selections one at a time, on two torch threads each (a selection depends on the thread count).
Each stage runs in a long-lived worker of the thread that asks for it, one per torch thread count
(reproduce/experiments/stage_worker.py: torch, transformers and lm-eval imported once a worker, not
once a stage; what a stage writes there is what a fresh process writes). A run trains and is
scored with one torch thread (on the 2-core box two one-thread jobs train ~4x faster each than one
two-thread job beside other load; training does not depend on the thread count, see
docs/downstream.md "Determinism").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from datamask.data import check_ratio, write_json_atomic
from datamask.errors import UserError
from datamask.options import SEED_MAX
from datamask.paths import check_paths
from eval.calibration import NULL, dose_label
from eval.draws import draw_label
from eval.verdict import PRIMARY

from ..cli import chain_stages
from ..pipeline.common import METHODS, Progress, parse_sets
from .downstream_report import STRATIFIED, TABLES, arms_markdown, runs_table, verdict_summary
from .stage_worker import StageWorkers, child_environment

CONTROL = "control"
TASKS = ["bbc_cloze", "bbc_headline"]
STRATIFY_COLUMN = "domain"
ARMS = ("free", "stratified")
DOSES = (0.05, 0.1, 0.25, 0.5)  # proxy-plan.md, section 3


def parse_methods(items: list[str]) -> dict[str, str]:
    """`label` (a known one) or `label=spec`; a spec's selector and options are checked now,
    not by the select stage after prepare."""
    from ..pipeline.common import parse_method
    from ..pipeline.select import selector_params

    chosen = {}
    for item in items:
        label, eq, spec = item.partition("=")
        if not eq:
            if label != CONTROL and label not in METHODS:
                raise UserError(f"--methods {item}: not one of {', '.join([*METHODS, CONTROL])} "
                                f"(or give label=selector:key=value,...)")
            spec = METHODS.get(label, CONTROL)
        else:
            try:
                selector_params(*parse_method(spec))
            except UserError as err:
                raise UserError(f"--methods {item}: {err}") from None
        chosen[label] = spec
    return chosen


def parse_draws(items: list[str], methods: dict[str, str]) -> dict[str, int]:
    """`--draws METHOD=N ...`: the selections each named method makes (1 by default)."""
    draws = {}
    for item in items:
        label, _, count = item.partition("=")
        if label not in methods or not count.isdigit() or int(count) < 1:
            raise UserError(f"--draws {item}: expected METHOD=N with METHOD one of --methods "
                            f"({', '.join(methods)}) and N at least 1")
        draws[label] = int(count)
    return draws


def seeded(spec: str, seed: int) -> str:
    """`spec` with its selector's seed set: selector:key=value,...,seed=SEED."""
    return f"{spec}{',' if ':' in spec else ':'}seed={seed}"


def plan_runs(methods: dict[str, str], arms: list[str], null: bool, junk: list[float],
              dup: list[float], select_seed: int, draws: dict[str, int] | None = None
              ) -> dict[str, dict]:
    """Every selection the run trains, by label: {"spec": selector spec, "stratify": bool} for a
    method in each arm, {"series", "dose"} for a calibration selection, {"control": True} for the
    old positive control. The null and the doses need `random` (they are built from its draw).
    A method drawn N times (`draws`) also selects as `<method>~k` with seed select_seed + k, k
    from 1 to N - 1 (eval/draws.py); random's draws replace the null."""
    draws = draws or {}
    for label, count in draws.items():
        methods = {**methods, **{draw_label(label, k): seeded(methods[label], select_seed + k)
                                 for k in range(1, count)}}
    null = null and draws.get("random", 1) < 2
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        raise UserError(f"--arms {' '.join(arms)}: choose from {', '.join(ARMS)}")
    for flag, doses in (("--junk", junk), ("--dup", dup)):
        bad = [d for d in doses if not 0 < d < 1]
        if bad:
            raise UserError(f"{flag} {bad[0]}: a dose is a fraction of the selection, in (0, 1)")
    if (null or junk or dup) and "random" not in methods:
        raise UserError("the null and the dose series are built from random's selection: keep "
                        "`random` in --methods (or give --no_null and no --junk/--dup doses)")
    runs = {}
    if "free" in arms:
        runs.update({label: {"control": True} if label == CONTROL else
                     {"spec": spec, "stratify": False} for label, spec in methods.items()})
    if "stratified" in arms:
        runs.update({label + STRATIFIED: {"spec": spec, "stratify": True}
                     for label, spec in methods.items() if label != CONTROL})
    if null:
        runs[NULL] = {"spec": f"random:seed={select_seed + 1}", "stratify": False}
    for series, doses in (("junk", junk), ("dup", dup)):
        runs.update({dose_label(series, d): {"series": series, "dose": d} for d in doses})
    return runs


POOL_MAX_SEQ_LENGTH = 128  # the tokens of a pool document that its embedding reads


def prepare_pool(pool: Path, logs: Path) -> None:
    """`Prepare` in a process of its own (the proxy's probes share it before they run)."""
    stage = Prepare(pool=pool)
    python("reproduce", *stage.argv(), threads=stage.threads, log=logs / "prepare.log")


def epoch_steps(tokens: int, epochs: float, batch_size: int, seq_len: int) -> int:
    """Training steps that read `epochs` passes over `tokens` in windows of seq_len + 1."""
    return max(1, math.ceil(epochs * tokens / (batch_size * (seq_len + 1))))


def python(*args: str, threads: int = 1, log: Path | None = None) -> None:
    """Run `python -m ...` in a child process with `threads` torch threads; its output to `log`.
    The child dies with this process, kill -9 included (datamask.processes: `python -m
    reproduce` arms itself on start when DATAMASK_DIE_WITH_PARENT names its parent), so a killed
    run leaves nothing behind and a rerun resumes from the stages' finished files."""
    cmd = [sys.executable, "-m", *args]
    with open(log, "a") if log else open(os.devnull, "w") as out:
        done = subprocess.run(cmd, env=child_environment(threads), stdout=out,
                              stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise UserError(f"{' '.join(cmd)} failed (exit {done.returncode}); see {log}")


def in_parallel(tasks: list, jobs: int) -> None:
    """Call each task, `jobs` at a time (each waits on its own child process). A failure
    cancels the tasks not yet started and is raised when the running ones have ended."""
    with ThreadPoolExecutor(max_workers=jobs) as workers:
        futures = [workers.submit(task) for task in tasks]
        try:
            for future in futures:
                future.result()
        except BaseException:
            workers.shutdown(cancel_futures=True)
            raise


@dataclass(frozen=True)
class Settings:
    """The run's settings as check_flags passed them, which its stages are given. With `epochs`,
    every run trains for the steps that read that many passes over random's selection (the same
    token budget for all); `tasks`: the multiple-choice tasks scored beside bits per byte."""

    seeds: list[int]
    config: str
    ratio: float
    block_size: int
    vocab_size: int
    jobs: int
    heldout_docs: int | None
    select_seed: int
    sets: list[str]
    epochs: float | None
    primary: list[str]
    outside: Path | None
    tasks: list[str]

    @classmethod
    def of(cls, args: argparse.Namespace) -> Settings:
        return cls(seeds=args.seeds, config=args.config, ratio=args.select_ratio,
                   block_size=args.block_size, vocab_size=args.vocab_size, jobs=args.jobs,
                   heldout_docs=args.heldout_docs, select_seed=args.select_seed, sets=args.set,
                   epochs=args.epochs, primary=args.primary,
                   outside=Path(args.outside) if args.outside else None, tasks=args.tasks)


class Stage:
    """One stage of the chain on one item. Its fields are what it reads and `output` what it
    writes; `argv` is its `python -m reproduce` command line, `threads` the torch threads of the
    worker it runs in, and `finished` says whether an earlier run wrote `output` for these
    settings: the stage is then skipped, so a stopped run resumes where it stopped."""

    threads = 1
    output: Path

    def argv(self) -> list[str]:
        raise NotImplementedError

    def finished(self) -> bool:
        return (self.output / "summary.json").is_file()


@dataclass(frozen=True, kw_only=True)
class Prepare(Stage):
    """The pool's shards -> pool/prepared (id, quality, embedding), on two threads. Never
    finished here: prepare itself keeps what an earlier run prepared (it is incremental)."""

    pool: Path
    threads = 2

    @property
    def output(self) -> Path:
        return self.pool / "prepared"

    def argv(self) -> list[str]:
        return ["prepare", "--input", str(self.pool / "fineweb"), "--output", str(self.output),
                "--max_seq_length", str(POOL_MAX_SEQ_LENGTH), "--no_progress"]

    def finished(self) -> bool:
        return False


@dataclass(frozen=True, kw_only=True)
class PoolSelection(Stage):
    """A selection the pool's own code makes of its prepared rows (the control, a calibration
    dose), `ratio` of them, seeded."""

    pool: Path
    ratio: float
    seed: int
    output: Path

    def rows(self) -> list[str]:
        """The flags naming the pool, its prepared rows and the share selected."""
        return ["--pool", str(self.pool), "--prepared", str(self.pool / "prepared"),
                "--select_ratio", str(self.ratio)]


@dataclass(frozen=True, kw_only=True)
class Control(PoolSelection):
    """The old positive control (reproduce/pool/control.py) from the pool's prepared rows."""

    def argv(self) -> list[str]:
        return ["control", *self.rows(), "--output", str(self.output), "--seed", str(self.seed)]


@dataclass(frozen=True, kw_only=True)
class Calibrate(PoolSelection):
    """A dose of a calibration series (reproduce/pool/calibration.py), built from `base`, the
    selection of random."""

    series: str
    dose: float
    base: Path

    def argv(self) -> list[str]:
        return ["calibrate", *self.rows(), "--series", self.series, "--dose", str(self.dose),
                "--seed", str(self.seed), "--base", str(self.base), "--output", str(self.output)]


@dataclass(frozen=True, kw_only=True)
class Select(Stage):
    """A method's selection of the prepared rows (stratified: within the pool's domains), on two
    threads; finished where an earlier run selected with the same spec in the same arm."""

    pool: Path
    spec: str
    stratify: bool
    ratio: float
    block_size: int
    seed: int
    output: Path
    threads = 2

    def argv(self) -> list[str]:
        strata = (["--stratify", STRATIFY_COLUMN, "--strata_from", str(self.pool / "fineweb")]
                  if self.stratify else [])
        return ["select", "--input", str(self.pool / "prepared"), "--method", self.spec,
                "--output", str(self.output), "--select_ratio", str(self.ratio), "--block_size",
                str(self.block_size), "--seed", str(self.seed), *strata]

    def finished(self) -> bool:
        done = self.output / "summary.json"
        summary = json.loads(done.read_text()) if done.is_file() else {}
        return summary.get("method") == self.spec and ("strata" in summary) == self.stratify


@dataclass(frozen=True, kw_only=True)
class Tokenizer(Stage):
    """One BPE tokenizer trained on the whole pool (`output`: its tokenizer.json)."""

    pool: Path
    vocab_size: int
    output: Path

    def argv(self) -> list[str]:
        return ["tokenizer", "--input", str(self.pool / "fineweb"), "--output", str(self.output),
                "--vocab_size", str(self.vocab_size)]

    def finished(self) -> bool:
        return self.output.is_file()


@dataclass(frozen=True, kw_only=True)
class Tokenize(Stage):
    """A selection's documents as tokens (datatrove)."""

    pool: Path
    selection: Path
    tokenizer: Path
    output: Path

    def argv(self) -> list[str]:
        return ["tokenize", "--input", str(self.pool / "fineweb"), "--selection",
                str(self.selection), "--tokenizer", str(self.tokenizer), "--output",
                str(self.output)]


@dataclass(frozen=True, kw_only=True)
class Train(Stage):
    """One model on a token set, one torch thread, the config with `sets` on top."""

    tokens: Path
    tokenizer: Path
    config: str
    seed: int
    sets: list[str]
    output: Path

    def argv(self) -> list[str]:
        overrides = [a for s in [f"seed={self.seed}", "threads=1", *self.sets]
                     for a in ("--set", s)]
        return ["train", "--tokens", str(self.tokens), "--tokenizer", str(self.tokenizer),
                "--config", self.config, "--no_progress", "--output", str(self.output),
                *overrides]


@dataclass(frozen=True, kw_only=True)
class Evaluate(Stage):
    """A checkpoint's scores (`output`, one JSON file): held-out bits per byte, the tasks, and
    the target `outside` the pool where one is given (a file scored without it is scored
    again)."""

    checkpoint: Path
    pool: Path
    tasks: list[str]
    outside: Path | None
    heldout_docs: int | None
    output: Path

    def argv(self) -> list[str]:
        docs = ["--heldout_docs", str(self.heldout_docs)] if self.heldout_docs else []
        target = ["--outside", str(self.outside)] if self.outside is not None else []
        return ["evaluate", "--checkpoints", str(self.checkpoint), "--tasks", *self.tasks,
                "--data_dir", str(self.pool / "tasks"), "--heldout", str(self.pool / "heldout"),
                *target, *docs, "--output", str(self.output.parent)]

    def finished(self) -> bool:
        return self.output.is_file() and (self.outside is None
                                          or "outside" in json.loads(self.output.read_text()))


class Chain:
    """The stages of one run over its folders, phase by phase (module docstring): each phase
    builds its stages, runs in a stage worker those an earlier run did not finish, and is timed."""

    def __init__(self, pool: Path, output: Path, runs: dict[str, dict], settings: Settings):
        self.pool, self.output, self.runs, self.settings = pool, output, runs, settings
        self.logs = output / "logs"
        self.tokenizer = output / "tokenizer" / "tokenizer.json"
        self.workers, self.stamp = StageWorkers(), {}

    def do(self, stages: list[Stage], log: Path) -> bool:
        """Run the `stages` not finished, in turn, as one request to this thread's worker (with
        the first one's threads); whether there was any."""
        todo = [stage for stage in stages if not stage.finished()]
        if todo:
            self.workers.run(chain_stages([stage.argv() for stage in todo]), log,
                             todo[0].threads)
        return bool(todo)

    def timed(self, name: str, phase) -> None:
        started = time.time()
        try:
            phase()
        finally:
            self.workers.close()
        self.stamp[name] = round(time.time() - started, 1)
        print(f"downstream: {name} done in {self.stamp[name]} s", flush=True)

    def selection(self, label: str) -> Stage:
        """The stage that writes `label`'s selection: the control, a calibration dose (from
        random's selection) or a method's."""
        plan, out, s = self.runs[label], self.output / "select" / label, self.settings
        if "control" in plan:
            return Control(pool=self.pool, ratio=s.ratio, seed=s.select_seed, output=out)
        if "series" in plan:
            return Calibrate(pool=self.pool, ratio=s.ratio, series=plan["series"],
                             dose=plan["dose"], seed=s.select_seed, output=out,
                             base=self.output / "select" / "random" / "selection.parquet")
        return Select(pool=self.pool, spec=plan["spec"], stratify=plan["stratify"],
                      ratio=s.ratio, block_size=s.block_size, seed=s.select_seed, output=out)

    def select(self) -> None:
        """The methods one at a time, each on two torch threads (a selection depends on the
        thread count, so the count stays whatever --jobs is); then the calibration selections,
        built from random's, --jobs at a time."""
        progress = Progress("select", len(self.runs))

        def one(label: str) -> None:
            progress.tick(label, self.do([self.selection(label)],
                                         self.logs / f"select.{label}.log"))
        for label, plan in self.runs.items():
            if "series" not in plan:
                one(label)
        in_parallel([partial(one, label) for label, plan in self.runs.items()
                     if "series" in plan], self.settings.jobs)

    def tokenize(self) -> None:
        """The tokenizer, then every selection's token set, --jobs at a time."""
        self.do([Tokenizer(pool=self.pool, vocab_size=self.settings.vocab_size,
                           output=self.tokenizer)],
                self.logs / "tokenizer.log")
        progress = Progress("tokenize", len(self.runs))

        def one(label: str) -> None:
            stage = Tokenize(pool=self.pool, tokenizer=self.tokenizer,
                             selection=self.output / "select" / label / "selection.parquet",
                             output=self.output / "tokens" / label)
            progress.tick(label, self.do([stage], self.logs / f"tokenize.{label}.log"))
        in_parallel([partial(one, label) for label in self.runs], self.settings.jobs)

    def train(self) -> None:
        """Each (selection, seed): train, then score, in one process; --jobs at a time, seeds
        outermost, so a run stopped early still holds every method at the first seeds. With
        --epochs, first the steps of that many passes over random's selection, for all."""
        s = self.settings
        if s.epochs is not None:
            s = self.settings = replace(s, sets=[*s.sets, *epoch_settings(
                self.output, s.config, s.sets, s.epochs)])
        progress = Progress("train+evaluate", len(self.runs) * len(s.seeds))

        def one(label: str, seed: int) -> None:
            checkpoint = self.output / "train" / label / f"seed{seed}"
            stages = [Train(tokens=self.output / "tokens" / label, tokenizer=self.tokenizer,
                            config=s.config, seed=seed, sets=s.sets, output=checkpoint),
                      Evaluate(checkpoint=checkpoint, pool=self.pool, tasks=s.tasks,
                               outside=s.outside, heldout_docs=s.heldout_docs,
                               output=self.output / "eval" / f"{label}.seed{seed}.json")]
            progress.tick(f"{label} seed {seed}", self.do(stages,
                                                          self.logs / f"{label}.seed{seed}.log"))
        in_parallel([partial(one, label, seed) for seed in s.seeds for label in self.runs],
                    s.jobs)

    def tables(self) -> None:
        """Per arm, Table 2 from the scores (the stratified arm calibrated by the free arm's
        rows, trained in this run with the same proxy and seeds), then the figures."""
        from eval.tables import write_tables

        from ..pool.control import kept_fractions

        written = {}
        for arm, folder in TABLES.items():
            labels = [label for label in self.runs
                      if label.endswith(STRATIFIED) == (arm != "free")]
            if not labels:
                continue
            files = [self.output / "eval" / f"{label}.seed{seed}.json"
                     for label in labels for seed in self.settings.seeds]
            shared = ("the free arm", json.loads(written["free"].read_text())) \
                if "free" in written else None
            write_tables(files, self.output / folder, partial(kept_fractions, self.pool),
                         "random" + STRATIFIED * (arm != "free"), primary=self.settings.primary,
                         calibrated_by=shared)
            written[arm] = self.output / folder / "table2.json"
        python("figures.downstream", "--table", *map(str, written.values()), "--output",
               str(self.output / "figures"), log=self.logs / "tables.log")


def run(pool: Path, output: Path, runs: dict[str, dict], settings: Settings) -> dict:
    """Every stage of the chain for `runs` (as plan_runs gives them), then arms.md, the run's
    record (downstream.json) and the verdict, printed last."""
    started = time.time()
    chain = Chain(pool, output, runs, settings)
    chain.logs.mkdir(parents=True, exist_ok=True)
    print(f"downstream: {len(runs)} selections, {len(runs) * len(settings.seeds)} training runs "
          f"({len(settings.seeds)} seeds each), {settings.jobs} at a time", flush=True)
    chain.timed("prepare", lambda: prepare_pool(pool, chain.logs))
    for name, phase in (("select", chain.select), ("tokenize", chain.tokenize),
                        ("train+evaluate", chain.train), ("tables", chain.tables)):
        chain.timed(name, phase)
    arms_markdown(output)
    s = chain.settings
    record = {"pool": str(pool), "runs": runs, "seeds": s.seeds, "config": s.config,
              "set": s.sets, "epochs": s.epochs, "primary": s.primary, "select_ratio": s.ratio,
              "block_size": s.block_size, "vocab_size": s.vocab_size, "jobs": s.jobs,
              "heldout_docs": s.heldout_docs, "outside": str(s.outside) if s.outside else None,
              "select_seed": s.select_seed, "stage_wall_s": chain.stamp,
              "wall_s": round(time.time() - started, 1), "trained": runs_table(output)}
    write_json_atomic(record, output / "downstream.json")
    print(verdict_summary(output), end="")
    return record


def epoch_settings(output: Path, config: str, sets: list[str], epochs: float) -> list[str]:
    """The `--set` overrides that make every run read `epochs` passes over random's selection:
    max_steps, and average_every at 5% of the steps when checkpoints are averaged."""
    from ..pipeline.train import load_config

    model_cfg, train_cfg = load_config(config, parse_sets(sets))
    summary = output / "tokens" / "random" / "summary.json"
    if not summary.is_file():
        raise UserError("--epochs counts passes over random's selection: keep `random` in "
                        "--methods and the free arm")
    steps = epoch_steps(json.loads(summary.read_text())["tokens"], epochs,
                        train_cfg.batch_size * train_cfg.grad_accum, model_cfg.seq_len)
    return [f"max_steps={steps}"] + ([f"average_every={max(1, steps // 20)}"]
                                     if train_cfg.average_last else [])



def check_flags(args: argparse.Namespace) -> None:
    """Refuse a bad flag before any stage runs: a run takes hours, and a value its stages refuse
    (or a --primary its tables lack) would stop it late, or write into the pool. The flags that
    need nothing read first; then the folders, the config, the tasks and the primary."""
    from eval.bpb import read_heldout
    from eval.run import known_tasks
    from eval.tables import AVERAGED_BPB, lower_is_better_columns, task_metrics

    from ..pipeline.tokenize import check_vocab_size
    from ..pipeline.train import load_config

    for flag, value, ok, allowed in (
            ("--jobs", args.jobs, args.jobs >= 1, "at least 1"),
            ("--epochs", args.epochs, args.epochs is None or 0 < args.epochs < math.inf,
             "a number greater than 0"),
            ("--block_size", args.block_size, args.block_size >= 0, "at least 0 (0: one block)"),
            ("--select_seed", args.select_seed, 0 <= args.select_seed <= SEED_MAX,
             "from 0 to 2^63 - 1"),
            ("--seeds", " ".join(map(str, args.seeds)), len(set(args.seeds)) == len(args.seeds)
             and all(0 <= seed <= SEED_MAX for seed in args.seeds),
             "distinct, each from 0 to 2^63 - 1")):
        if not ok:
            raise UserError(f"{flag} {value}: must be {allowed}")
    check_ratio(args.select_ratio)
    check_vocab_size(args.vocab_size)
    pool, outside = Path(args.pool), Path(args.outside) if args.outside else None
    if not (pool / "pool.json").is_file():
        raise UserError(f"--pool {pool}: no pool.json (build it with `make pool`)")
    if outside is not None and not (outside / "outside.json").is_file():
        raise UserError(f"--outside {outside}: no outside.json (build it with `python -m "
                        f"reproduce outside --output {outside}`)")
    check_paths({"--pool": pool, "--outside": outside}, folders={"--output": args.output})
    _, train = load_config(args.config, parse_sets(args.set))
    metrics = task_metrics()
    unknown = [t for t in args.tasks if t not in metrics]
    if unknown:
        raise UserError(f"--tasks {' '.join(unknown)}: the tables have no column for it; choose "
                        f"from {', '.join(metrics)}")
    if args.tasks:
        known_tasks(str(pool / "tasks"), args.tasks)
    domains = list(read_heldout(pool / "heldout", args.heldout_docs))
    sources = list(read_heldout(outside, args.heldout_docs, "--outside")) if outside else None
    # the averaging checkpoints train keeps (average_last: last/ and averaged/; ema_decay: ema/)
    # as the result keys evaluate scores them under
    averaged = [AVERAGED_BPB["last mean"], AVERAGED_BPB["weight avg"]] * bool(train.average_last) \
        + [AVERAGED_BPB["EMA"]] * bool(train.ema_decay)
    allowed = lower_is_better_columns(args.tasks, domains, averaged, sources)
    for name in args.primary:
        if name not in allowed:
            raise UserError(f"--primary {name}: not a bits-per-byte column of this run's tables; "
                            f"choose from {', '.join(allowed)} (the averaged ones need the "
                            f"config's average_last or ema_decay, 'bpb outside' ones --outside)")


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    p = argparse.ArgumentParser(prog="python -m reproduce.experiments.downstream",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", required=True, help="pool folder (make pool)")
    p.add_argument("--output", required=True, help="run folder")
    p.add_argument("--methods", nargs="+", default=list(METHODS),
                   help="labels (default: all of %(default)s; `control`, the old positive control, "
                        "on request) or label=selector:key=value,...")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS,
                   help="free: each method picks its own domain mix; stratified: each picks "
                        "within the pool's domains in proportion (`<method>@strat`, against "
                        "random@strat) (default: both)")
    p.add_argument("--no_null", action="store_true",
                   help=f"leave out the null, {NULL}: a second random selection (selection seed "
                        "+ 1) whose difference with random must come out unresolved")
    p.add_argument("--draws", nargs="*", default=[], metavar="METHOD=N",
                   help="select METHOD N times, with selection seeds select_seed + 0..N-1, so "
                        "that intervals hold the spread between selections; random=N replaces "
                        "the null (docs/downstream.md)")
    p.add_argument("--junk", nargs="*", type=float, default=list(DOSES), metavar="D",
                   help="doses of the junk series, junk-D: random's selection with a fraction D "
                        "replaced by junk of the same domain and length (default: %(default)s; "
                        "none: give the flag alone)")
    p.add_argument("--dup", nargs="*", type=float, default=list(DOSES), metavar="D",
                   help="doses of the duplicate series, dup-D: the fraction D replaced by copies "
                        "of other selected documents (default: %(default)s)")
    p.add_argument("--primary", nargs="+", default=[PRIMARY],
                   help="the column(s) the verdicts read (proxy-plan.md: the variant its sweep "
                        "chooses, e.g. 'bpb macro (EMA)'; third-design-plan.md adds 'bpb outside "
                        "macro (EMA)' with --outside) (default: %(default)s)")
    p.add_argument("--epochs", type=float,
                   help="train every run for the steps that read this many passes over random's "
                        "selection (overrides the config's max_steps; default: the config's)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                   help="training seeds (default: %(default)s)")
    p.add_argument("--config", default="downstream", help="train config (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a train/model setting for every run")
    p.add_argument("--select_ratio", type=float, default=0.10,
                   help="(default: %(default)s, the paper's FineWeb-Mask ratio; point C of "
                   "reproduce/results/downstream/sweep-plan.md)")
    p.add_argument("--block_size", type=int, default=5000,
                   help="select's rows per block (default: %(default)s)")
    p.add_argument("--select_seed", type=int, default=0,
                   help="seed of every selection (block plan, seeded selectors, the control)")
    p.add_argument("--vocab_size", type=int, default=4096, help="(default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2,
                   help="calibration, tokenizing and training processes at once (default: "
                        "%(default)s)")
    p.add_argument("--heldout_docs", type=int,
                   help="score only each domain's first N held-out documents")
    p.add_argument("--tasks", nargs="*", default=TASKS,
                   help="multiple-choice tasks scored beside bits per byte; they decide nothing "
                        "(default: %(default)s; none: give the flag alone)")
    p.add_argument("--outside",
                   help="held-out text from outside the pool (`python -m reproduce outside`): "
                        "a second bits-per-byte target, scored on every run (docs/downstream.md)")

    def command(args):
        check_flags(args)
        methods = parse_methods(args.methods)
        runs = plan_runs(methods, args.arms, not args.no_null, args.junk, args.dup,
                         args.select_seed, parse_draws(args.draws, methods))
        run(Path(args.pool), Path(args.output), runs, Settings.of(args))

    p.set_defaults(func=command)
    return run_command(p, argv, "reproduce.experiments.downstream")


if __name__ == "__main__":
    sys.exit(main())

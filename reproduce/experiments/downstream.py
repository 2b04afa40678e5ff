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

from datamask.data import write_json_atomic
from datamask.errors import UserError
from datamask.options import (REQUIRED, SEED_MAX, Range, add_flags, fields_of, flag_arguments,
                              given, option, shown_default, validate)
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


@dataclass(kw_only=True)
class Settings:
    """The run's settings: the flags of `python -m reproduce.experiments.downstream`, their help
    and their range checks generated from these fields (datamask.options), so a settings object
    that breaks one is refused, naming the flag, when it is made; `check_inputs` then checks
    what needs files read. With `epochs`, every run trains for the steps that read that many
    passes over random's selection (the same token budget for all); `tasks`: the multiple-choice
    tasks scored beside bits per byte. The fields `flag=False` are the flags add_flags cannot
    make (`list_flags`)."""

    pool: Path = option(REQUIRED, "pool folder (make pool)")
    output: Path = option(REQUIRED, "run folder")
    methods: tuple[str, ...] = option(
        tuple(METHODS), "labels, or label=selector:key=value,...; `control`, the old positive "
                        "control, on request")
    arms: tuple[str, ...] = option(
        ARMS, "free: each method picks its own domain mix; stratified: each picks within the "
              "pool's domains in proportion (`<method>@strat`, against random@strat)",
        choices=ARMS)
    no_null: bool = option(False, f"leave out the null, {NULL}: a second random selection "
                                  "(selection seed + 1) whose difference with random must come "
                                  "out unresolved")
    draws: tuple[str, ...] = option(
        (), "select METHOD N times, with selection seeds select_seed + 0..N-1, so that intervals "
            "hold the spread between selections; random=N replaces the null "
            "(docs/downstream.md)", metavar="METHOD=N", flag=False)
    junk: tuple[float, ...] = option(
        DOSES, "doses of the junk series, junk-D: random's selection with a fraction D replaced "
               "by junk of the same domain and length; none: give the flag alone", metavar="D",
        flag=False)
    dup: tuple[float, ...] = option(
        DOSES, "doses of the duplicate series, dup-D: the fraction D replaced by copies of other "
               "selected documents", metavar="D", flag=False)
    primary: tuple[str, ...] = option(
        (PRIMARY,), "the column(s) the verdicts read (proxy-plan.md: the variant its sweep "
                    "chooses, e.g. 'bpb macro (EMA)'; third-design-plan.md adds 'bpb outside "
                    "macro (EMA)' with --outside)")
    epochs: float | None = option(
        None, "train every run for the steps that read this many passes over random's "
              "selection (overrides the config's max_steps)",
        within=Range(0.0, math.inf, open_low=True, open_high=True), default_text="the config's")
    seeds: tuple[int, ...] = option((0, 1, 2), "training seeds, distinct")
    config: str = option("downstream", "train config")
    set: tuple[str, ...] = option((), "override a train/model setting for every run",
                                  metavar="KEY=VALUE", flag=False)
    select_ratio: float = option(0.10, "the share of the pool each selection keeps: the paper's "
                                       "FineWeb-Mask ratio; point C of "
                                       "reproduce/results/downstream/sweep-plan.md",
                                 within=Range(0.0, 1.0, open_low=True, open_high=True))
    block_size: int = option(5000, "select's rows per block, 0 for one block", within=Range(0))
    select_seed: int = option(0, "seed of every selection (block plan, seeded selectors, the "
                                 "control)")
    vocab_size: int = option(4096, "entries of the BPE tokenizer trained on the pool")
    jobs: int = option(2, "calibration, tokenizing and training processes at once", within=Range(1))
    heldout_docs: int | None = option(None, "score only each domain's first N held-out "
                                            "documents", within=Range(1), default_text="all")
    tasks: tuple[str, ...] = option(
        tuple(TASKS), "multiple-choice tasks scored beside bits per byte; they decide nothing; "
                      "none: give the flag alone", flag=False)
    outside: Path | None = option(
        None, "held-out text from outside the pool (`python -m reproduce outside`): a second "
              "bits-per-byte target, scored on every run (docs/downstream.md)")

    def __post_init__(self):
        validate(self)

    def check_together(self) -> None:
        """The rules the fields' ranges do not state, all checked before any file is read."""
        from ..pipeline.tokenize import check_vocab_size

        for flag, value, ok, allowed in (
                ("--select_seed", self.select_seed, 0 <= self.select_seed <= SEED_MAX,
                 "from 0 to 2^63 - 1"),
                ("--seeds", " ".join(map(str, self.seeds)),
                 len(set(self.seeds)) == len(self.seeds)
                 and all(0 <= seed <= SEED_MAX for seed in self.seeds),
                 "distinct, each from 0 to 2^63 - 1")):
            if not ok:
                raise UserError(f"{flag} {value}: must be {allowed}")
        check_vocab_size(self.vocab_size)

    def check_inputs(self) -> None:
        """Refuse what the files say is bad before any stage runs: a run takes hours, and a value
        its stages refuse (or a --primary its tables lack) would stop it late, or write into the
        pool. The folders, the config, the tasks and the primary."""
        from eval.bpb import read_heldout
        from eval.run import known_tasks
        from eval.tables import AVERAGED_BPB, lower_is_better_columns, task_metrics

        from ..pipeline.train import load_config

        if not (self.pool / "pool.json").is_file():
            raise UserError(f"--pool {self.pool}: no pool.json (build it with `make pool`)")
        if self.outside is not None and not (self.outside / "outside.json").is_file():
            raise UserError(f"--outside {self.outside}: no outside.json (build it with `python -m "
                            f"reproduce outside --output {self.outside}`)")
        check_paths({"--pool": self.pool, "--outside": self.outside},
                    folders={"--output": self.output})
        _, train = load_config(self.config, parse_sets(self.set))
        metrics = task_metrics()
        unknown = [t for t in self.tasks if t not in metrics]
        if unknown:
            raise UserError(f"--tasks {' '.join(unknown)}: the tables have no column for it; "
                            f"choose from {', '.join(metrics)}")
        if self.tasks:
            known_tasks(str(self.pool / "tasks"), list(self.tasks))
        domains = list(read_heldout(self.pool / "heldout", self.heldout_docs))
        sources = (list(read_heldout(self.outside, self.heldout_docs, "--outside"))
                   if self.outside else None)
        # the averaging checkpoints train keeps (average_last: last/ and averaged/; ema_decay:
        # ema/) as the result keys evaluate scores them under
        averaged = [AVERAGED_BPB["last mean"], AVERAGED_BPB["weight avg"]] * bool(
            train.average_last) + [AVERAGED_BPB["EMA"]] * bool(train.ema_decay)
        allowed = lower_is_better_columns(list(self.tasks), domains, averaged, sources)
        for name in self.primary:
            if name not in allowed:
                raise UserError(f"--primary {name}: not a bits-per-byte column of this run's "
                                f"tables; choose from {', '.join(allowed)} (the averaged ones "
                                f"need the config's average_last or ema_decay, 'bpb outside' "
                                f"ones --outside)")


def list_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of Settings that add_flags cannot make, from their fields: --draws, --junk,
    --dup and --tasks take any number of values, none given by the flag alone; --set one value
    a flag, the flag repeated."""
    for field, kind in fields_of(Settings):
        if field.metadata["flag"]:
            continue
        form = {"action": "append", "nargs": None} if field.name == "set" else {"nargs": "*"}
        shown = shown_default(field)
        help_text = field.metadata["help"] + (f" (default: {shown})" if shown else "")
        parser.add_argument(f"--{field.name}", help=help_text.replace("%", "%%"),
                            **{**flag_arguments(field, kind), **form})


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

    def __init__(self, runs: dict[str, dict], settings: Settings):
        self.pool, self.output, self.runs, self.settings = (settings.pool, settings.output, runs,
                                                            settings)
        self.logs = self.output / "logs"
        self.tokenizer = self.output / "tokenizer" / "tokenizer.json"
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
            return Control(pool=self.pool, ratio=s.select_ratio, seed=s.select_seed, output=out)
        if "series" in plan:
            return Calibrate(pool=self.pool, ratio=s.select_ratio, series=plan["series"],
                             dose=plan["dose"], seed=s.select_seed, output=out,
                             base=self.output / "select" / "random" / "selection.parquet")
        return Select(pool=self.pool, spec=plan["spec"], stratify=plan["stratify"],
                      ratio=s.select_ratio, block_size=s.block_size, seed=s.select_seed, output=out)

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
            s = self.settings = replace(s, set=(*s.set, *epoch_settings(
                self.output, s.config, s.set, s.epochs)))
        progress = Progress("train+evaluate", len(self.runs) * len(s.seeds))

        def one(label: str, seed: int) -> None:
            checkpoint = self.output / "train" / label / f"seed{seed}"
            stages = [Train(tokens=self.output / "tokens" / label, tokenizer=self.tokenizer,
                            config=s.config, seed=seed, sets=s.set, output=checkpoint),
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


def run(runs: dict[str, dict], settings: Settings) -> dict:
    """Every stage of the chain for `runs` (as plan_runs gives them), then arms.md, the run's
    record (downstream.json) and the verdict, printed last."""
    started = time.time()
    pool, output = settings.pool, settings.output
    chain = Chain(runs, settings)
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
              "set": s.set, "epochs": s.epochs, "primary": s.primary,
              "select_ratio": s.select_ratio,
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



def settings_parser() -> argparse.ArgumentParser:
    """The command's parser: one flag per field of Settings."""
    p = argparse.ArgumentParser(prog="python -m reproduce.experiments.downstream",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, Settings)
    list_flags(p)
    return p


def command(args: argparse.Namespace) -> None:
    """Every flag checked (the settings, the files they name, the methods, the plan), then the
    run."""
    settings = Settings(**given(args, Settings))
    settings.check_inputs()
    methods = parse_methods(settings.methods)
    runs = plan_runs(methods, settings.arms, not settings.no_null, settings.junk, settings.dup,
                     settings.select_seed, parse_draws(settings.draws, methods))
    run(runs, settings)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    p = settings_parser()
    p.set_defaults(func=command)
    return run_command(p, argv, "reproduce.experiments.downstream")


if __name__ == "__main__":
    sys.exit(main())

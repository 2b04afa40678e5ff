"""The downstream experiment: every method's selection of the pool trains models on the same token
budget with several seeds, and the tables say which differences the run resolves.

  python -m reproduce.experiments.downstream --pool runs/pool --output runs/downstream --seeds 0 1 2

Every flag is checked before the first stage; a bad one is refused with nothing written
(docs/downstream.md, "Flags checked before any work").

Chain (each step skips what a previous run finished, so an interrupted run resumes):
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
import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from datamask.data import check_ratio, write_json_atomic, write_text_atomic
from datamask.errors import UserError
from datamask.options import SEED_MAX
from datamask.paths import check_paths
from eval.calibration import NULL, dose_label, mix_or_choice, parse_dose
from eval.draws import draw_label
from eval.verdict import BOUNDED, GREEDY_START, PRIMARY, bound_cell

from ..cli import chain_stages
from ..pipeline.common import METHODS, Progress, parse_sets
from .stage_worker import StageWorkers, child_environment

CONTROL = "control"
TASKS = ["bbc_cloze", "bbc_headline"]
STRATIFIED = "@strat"  # the label suffix of the stratified arm
STRATIFY_COLUMN = "domain"
ARMS = ("free", "stratified")
TABLES = {"free": "tables", "stratified": "tables-stratified"}  # each arm's tables folder
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
    """The pool's shards -> pool/prepared (id, quality, embedding); a finished one is kept."""
    python("reproduce", "prepare", "--input", str(pool / "fineweb"), "--output",
           str(pool / "prepared"), "--max_seq_length", str(POOL_MAX_SEQ_LENGTH), "--no_progress",
           threads=2, log=logs / "prepare.log")


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


def run(pool: Path, output: Path, runs: dict[str, dict], seeds: list[int], config: str,
        ratio: float, block_size: int, vocab_size: int, jobs: int, heldout_docs: int | None,
        select_seed: int, sets: list[str], epochs: float | None = None,
        primary: str | list[str] = PRIMARY, outside: Path | None = None,
        tasks: list[str] | None = None) -> dict:
    """`runs` as plan_runs gives them, the flags as check_flags passed them. With `epochs`, every
    run trains for the steps that read that many passes over random's selection (the same token
    budget for all). `tasks`: the multiple-choice tasks scored beside bits per byte (default
    TASKS; [] for none)."""
    tasks = TASKS if tasks is None else tasks
    started = time.time()
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prepared = pool / "prepared"
    stamp = {}

    workers = StageWorkers()

    def stage(*argv: str, log: Path, threads: int = 1) -> None:
        """A pipeline stage in this thread's worker (torch and the rest imported once)."""
        workers.run(list(argv), log, threads)

    def timed(name, fn):
        t0 = time.time()
        try:
            fn()
        finally:
            workers.close()
        stamp[name] = round(time.time() - t0, 1)
        print(f"downstream: {name} done in {stamp[name]} s", flush=True)

    print(f"downstream: {len(runs)} selections, {len(runs) * len(seeds)} training runs "
          f"({len(seeds)} seeds each), {jobs} at a time", flush=True)
    timed("prepare", lambda: prepare_pool(pool, logs))
    selecting = Progress("select", len(runs))

    def select_one(label: str, plan: dict) -> None:
        out = output / "select" / label
        done = out / "summary.json"
        log = logs / f"select.{label}.log"
        worked = not done.is_file()
        if "control" in plan:
            if worked:
                stage("control", "--pool", str(pool), "--prepared",
                       str(prepared), "--select_ratio", str(ratio), "--output", str(out),
                       "--seed", str(select_seed), log=log)
        elif "series" in plan:
            if worked:
                stage("calibrate", "--pool", str(pool), "--prepared",
                       str(prepared), "--select_ratio", str(ratio), "--series",
                       plan["series"], "--dose", str(plan["dose"]), "--seed",
                       str(select_seed), "--base",
                       str(output / "select" / "random" / "selection.parquet"),
                       "--output", str(out), log=log)
        else:
            strata = (["--stratify", STRATIFY_COLUMN, "--strata_from", str(pool / "fineweb")]
                      if plan["stratify"] else [])
            finished = json.loads(done.read_text()) if done.is_file() else {}
            # finished before: the same spec on the same prepared rows
            worked = finished.get("method") != plan["spec"] or \
                ("strata" in finished) != plan["stratify"]
            if worked:
                stage("select", "--input", str(prepared), "--method",
                       plan["spec"], "--output", str(out), "--select_ratio", str(ratio),
                       "--block_size", str(block_size), "--seed", str(select_seed), *strata,
                       threads=2, log=log)
        selecting.tick(label, worked)

    def select():
        # the methods one at a time, each on two torch threads (a selection depends on the
        # thread count, so the count stays whatever --jobs is); then the calibration
        # selections, built from random's, --jobs at a time
        for label, plan in runs.items():
            if "series" not in plan:
                select_one(label, plan)
        in_parallel([partial(select_one, label, plan) for label, plan in runs.items()
                     if "series" in plan], jobs)
    timed("select", select)

    tokenizer = output / "tokenizer" / "tokenizer.json"

    tokenizing = Progress("tokenize", len(runs))

    def tokenize_one(label: str) -> None:
        worked = not (output / "tokens" / label / "summary.json").is_file()
        if worked:
            stage("tokenize", "--input", str(pool / "fineweb"), "--selection",
                   str(output / "select" / label / "selection.parquet"), "--tokenizer",
                   str(tokenizer), "--output", str(output / "tokens" / label),
                   log=logs / f"tokenize.{label}.log")
        tokenizing.tick(label, worked)

    def tokenize():
        if not tokenizer.is_file():
            stage("tokenizer", "--input", str(pool / "fineweb"), "--output",
                   str(tokenizer), "--vocab_size", str(vocab_size), log=logs / "tokenizer.log")
        in_parallel([partial(tokenize_one, label) for label in runs], jobs)
    timed("tokenize", tokenize)
    if epochs is not None:
        sets = [*sets, *epoch_settings(output, config, sets, epochs)]

    training = Progress("train+evaluate", len(runs) * len(seeds))

    def train_and_evaluate(label: str, seed: int) -> None:
        ckpt = output / "train" / label / f"seed{seed}"
        log = logs / f"{label}.seed{seed}.log"
        stages = []
        if not (ckpt / "summary.json").is_file():
            overrides = [a for s in [f"seed={seed}", "threads=1", *sets] for a in ("--set", s)]
            stages.append(["train", "--tokens", str(output / "tokens" / label), "--tokenizer",
                           str(tokenizer), "--config", config, "--no_progress", "--output",
                           str(ckpt), *overrides])
        scored = output / "eval" / f"{label}.seed{seed}.json"
        if not scored.is_file() or \
                (outside is not None and "outside" not in json.loads(scored.read_text())):
            docs = ["--heldout_docs", str(heldout_docs)] if heldout_docs else []
            target = ["--outside", str(outside)] if outside is not None else []
            stages.append(["evaluate", "--checkpoints", str(ckpt), "--tasks", *tasks,
                           "--data_dir", str(pool / "tasks"), "--heldout", str(pool / "heldout"),
                           *target, *docs, "--output", str(output / "eval")])
        if stages:
            workers.run(chain_stages(stages), log)
        training.tick(f"{label} seed {seed}", bool(stages))

    def train_all():
        # seeds outermost: a run stopped early still holds every method at the first seeds
        in_parallel([partial(train_and_evaluate, label, seed)
                     for seed in seeds for label in runs], jobs)
    timed("train+evaluate", train_all)

    def tables_and_figures():
        from eval.tables import write_tables

        from ..pool.control import kept_fractions

        written = {}
        for arm, folder in TABLES.items():
            labels = [label for label in runs if label.endswith(STRATIFIED) == (arm != "free")]
            if not labels:
                continue
            files = [output / "eval" / f"{label}.seed{seed}.json"
                     for label in labels for seed in seeds]
            # the stratified arm has no calibration rows: the free arm's, trained in this run
            # with the same proxy and seeds, calibrate it
            shared = ("the free arm", json.loads(written["free"].read_text())) \
                if "free" in written else None
            write_tables(files, output / folder, partial(kept_fractions, pool),
                         "random" + STRATIFIED * (arm != "free"), primary=primary,
                         calibrated_by=shared)
            written[arm] = output / folder / "table2.json"
        python("figures.downstream", "--table", *map(str, written.values()), "--output",
               str(output / "figures"), log=logs / "tables.log")
    timed("tables", tables_and_figures)
    arms_markdown(output)

    record = {"pool": str(pool), "runs": runs, "seeds": seeds, "config": config,
              "set": sets, "epochs": epochs, "primary": primary, "select_ratio": ratio,
              "block_size": block_size, "vocab_size": vocab_size, "jobs": jobs,
              "heldout_docs": heldout_docs, "outside": str(outside) if outside else None,
              "select_seed": select_seed, "stage_wall_s": stamp,
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


def arm_tables(output: Path) -> dict[str, dict]:
    """{arm: its table2.json} for each arm the run folder has tables of."""
    return {arm: json.loads((output / folder / "table2.json").read_text())
            for arm, folder in TABLES.items() if (output / folder / "table2.json").is_file()}


def primaries_of(table: dict) -> list[str]:
    """The columns a table's verdict judged: several where the reference was drawn several
    times (eval/verdict.py's RULE_DRAWS), else its one primary."""
    return table["verdict"].get("primaries", [table["verdict"]["primary"]])


def outcomes(table: dict, primary: str) -> dict[str, str]:
    """{method: its outcome against random} on `primary`, as the table's verdict words it."""
    by_primary = table["verdict"].get("by_primary")
    return by_primary[primary]["vs_random"] if by_primary else table["verdict"]["vs_random"]


def difference(table: dict, label: str, primary: str) -> dict | None:
    """The difference the verdict judged `label` by on `primary` (over the draws where the
    reference was drawn several times, else paired over seeds); None where it has none."""
    by_primary = table["verdict"].get("by_primary")
    if by_primary:
        return by_primary.get(primary, {}).get("differences", {}).get(label)
    return table["vs_reference"].get(label, {}).get(primary)


def arms_markdown(output: Path) -> None:
    """Each method's outcome against random in the free and the stratified arm (the verdicts of
    both tables), and whether a free-arm difference is the domain mix or the choice within
    domains, per primary metric; written to arms.md."""
    tables = arm_tables(output)
    if "free" not in tables:
        return
    text = ("# Free and stratified arms\n\nEach method against random in the free arm (its own "
            "domain mix) and in the stratified arm (the pool's mix, against `random@strat`); a "
            "free-arm difference is the **choice within domains** when the stratified arm "
            "resolves the same, and the **mix** when it does not.\n")
    for primary in primaries_of(tables["free"]):
        free = outcomes(tables["free"], primary)
        stratified = outcomes(tables["stratified"], primary) if "stratified" in tables else {}
        rows = [f"| {method} | {outcome} | {stratified.get(method + STRATIFIED) or ''} | "
                f"{mix_or_choice(outcome, stratified.get(method + STRATIFIED))} |"
                for method, outcome in free.items() if method != NULL and not parse_dose(method)]
        text += (f"\nOn `{primary}`:\n\n| method | free arm | stratified arm | the difference "
                 f"is |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    write_text_atomic(text, output / "arms.md")


def verdict_summary(output: Path) -> str:
    """The run's verdict on one screen, the last thing it prints (and verdict.md): the
    calibration, each method against random in each arm and on each primary with arms.md's
    reading (mix or choice within domains), the paper's ordering or its claim as a bound, what
    the policy gradient adds, and where the full tables and figures are. Where random was drawn
    several times the calibration and the claim are tables, one row per primary, so that two
    primaries still fit one screen; the sentences are in the tables' own verdicts."""
    tables = arm_tables(output)
    if not tables:
        return ""
    first = next(iter(tables.values()))
    primaries = primaries_of(first)
    seeds = "/".join(str(n) for n in sorted({t["power"][primaries[0]]["n_seeds"]
                                             for t in tables.values()}))
    drawn = "by_primary" in first["verdict"]
    lines = [f"# Verdict on {' and '.join(primaries)}: method - random on the same {seeds} "
             "training seeds" + (", over every selection draw of each" if drawn else "")
             + ", mean ± 95% CI", ""]
    short = {p: f"P{i + 1}" for i, p in enumerate(primaries)} if len(primaries) > 1 else \
        {primaries[0]: ""}
    if len(primaries) > 1:
        lines += ["; ".join(f"{name}: {p}" for p, name in short.items()), ""]
    if drawn:
        lines += [*drawn_calibration_table(tables, primaries, short), ""]
    else:
        said = {}  # each power or calibration line once, with the first arm that states it
        for arm, table in tables.items():
            for line in table["verdict"]["lines"]:
                if line.startswith(("Power:", "Calibration:")):
                    said.setdefault(line, arm)
        lines += [bullet(line if arm == "free" else f"[{arm} arm] {line}")
                  for line, arm in said.items()] + [""]
    lines += methods_table(tables, primaries, short)
    if drawn:
        lines += ["", *claim_table(tables, primaries, short)]
    ordering = [bullet(f"The paper's ordering (a datamask variant better than every other "
                       f"selection), {arm} arm: " + ", ".join(
                           f"{v.removesuffix(STRATIFIED)} {o['outcome']}"
                           for v, o in table["verdict"]["ordering"].items()) + ".")
                for arm, table in tables.items() if table["verdict"]["ordering"]]
    lines += [""] + ordering if ordering else []
    where = {output / TABLES[arm] / "table2.md": f"the {arm} arm's full tables"
             + (" with the calibration rows" if arm == "free" else "") for arm in tables}
    where |= {output / "figures" / "forest.png": "each selection against random, per arm",
              output / "figures" / "dose-response.png": "the junk and dup doses",
              output / "arms.md": "each method in both arms",
              output / "downstream.json": "every run's settings, tokens and seconds"}
    lines += ["", "Every metric (bits per byte per domain, any multiple-choice task), SNR, planted "
              "rows kept, costs and the rule:"]
    lines += [f"- {path}: {what}" for path, what in where.items() if path.is_file()]
    text = "\n".join(lines) + "\n"
    write_text_atomic(text, output / "verdict.md")
    return text


def drawn_calibration_table(tables: dict[str, dict], primaries: list[str],
                            short: dict[str, str]) -> list[str]:
    """One row per primary: the null's false positives over random's pairs of draws in each
    arm, eligibility and the smallest resolved doses (the free arm's, which calibrate both),
    the SNR and the minimum detectable difference."""
    arms = " / ".join(tables)
    lines = [f"| primary | the null: pairs of random's draws resolved ({arms}) | eligible | "
             "smallest resolved dose | SNR | minimum detectable difference (80% power) |",
             "|---|---|---|---|---|---|"]
    for primary in primaries:
        mine = {arm: t["verdict"]["by_primary"].get(primary, {}).get("calibration")
                for arm, t in tables.items()}
        c = mine.get("free") or next(iter(mine.values()))
        if c is None:
            lines.append(f"| {short[primary] or primary} | not judged: no such column | - | - | - "
                         "| - |")
            continue
        pairs = " / ".join(f"{fp['resolved']} of {fp['pairs']}" for fp in (
            m.get("own_false_positives", m["false_positives"]) for m in mine.values() if m))
        doses = ", ".join(f"{series} {dose:g}" if dose is not None else f"{series} none"
                          for series, dose in c["smallest_resolved"].items())
        snr = f"{c['snr']:.2f}" if c["snr"] is not None else "-"
        mde = f"{c['minimum_detectable']:.4f}" if c["minimum_detectable"] is not None else "-"
        lines.append(f"| {short[primary] or primary} | {pairs} | "
                     f"{'yes' if c['eligible'] else '**no**: decides nothing'} | {doses or '-'} "
                     f"| {snr} | {mde} |")
    return lines


def methods_table(tables: dict[str, dict], primaries: list[str],
                  short: dict[str, str]) -> list[str]:
    """Each method against random in each arm and on each primary, with arms.md's reading."""
    from eval.tables import difference_cell

    free, stratified = tables.get("free"), tables.get("stratified")
    heads = [f"{arm} arm" + (f" {short[p]}" if short[p] else "") for p in primaries
             for arm in tables]
    lines = ["| method | " + " | ".join(heads) + " | the difference is |",
             "|---" * (len(heads) + 2) + "|"]
    for method in outcomes(free or stratified, primaries[0]):
        method = method.removesuffix(STRATIFIED)
        cells = []
        for primary in primaries:
            for arm, t in tables.items():
                d = difference(t, method + STRATIFIED * (arm != "free"), primary)
                cells.append(difference_cell(d, primary, False) if d else "")
        readings = []
        for primary in primaries if free and stratified else []:
            mine = outcomes(free, primary).get(method)
            reading = mix_or_choice(mine, outcomes(stratified, primary).get(method + STRATIFIED)) \
                if mine else ""
            if reading:
                readings.append(f"{short[primary]} {reading}".strip())
        lines.append(f"| {method} | {' | '.join(cells)} | {'; '.join(readings)} |")
    return lines


def claim_table(tables: dict[str, dict], primaries: list[str], short: dict[str, str]) -> list[str]:
    """The paper's claim as a bound (the free arm's gain over random, positive is better) and
    what the policy gradient adds (method - greedy-start in each arm), per primary."""
    from eval.tables import difference_cell

    lines = ["| primary | what | " + " | ".join(BOUNDED) + " |", "|---" * (len(BOUNDED) + 2) + "|"]
    for primary in primaries:
        name = short[primary] or primary
        free = tables["free"]["verdict"]["by_primary"].get(primary) if "free" in tables else None
        if free:
            eligible = free["calibration"]["eligible"]
            cells = [bound_cell(free["bounds"][m]) if m in free["bounds"] else
                     "not eligible" if not eligible else "not run" for m in BOUNDED]
            lines.append(f"| {name} | the paper's claim: gain over random, free arm | "
                         + " | ".join(cells) + " |")
        for arm, t in tables.items():
            judged = t["verdict"]["by_primary"].get(primary)
            gradient = judged["policy_gradient"] if judged else {}
            if gradient:
                cells = [difference_cell(gradient[m]["difference"], primary, False)
                         if m in gradient else "not run" for m in BOUNDED]
                lines.append(f"| {name} | what the policy gradient adds: method - "
                             f"{GREEDY_START}, {arm} arm | " + " | ".join(cells) + " |")
    return lines


def bullet(line: str) -> str:
    """`line` as a Markdown list item wrapped at 100 columns."""
    return textwrap.fill(line, 100, initial_indent="- ", subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)


def selection_hash(selection: Path) -> str:
    """SHA-256 of the sorted ids a selection.parquet selects: two labels with the same hash
    trained on the same documents."""
    import pyarrow.parquet as pq

    table = pq.read_table(selection, columns=["id", "selected"])
    ids = sorted(table.column("id").filter(table.column("selected")).to_pylist())
    return "sha256:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()


def runs_table(output: Path) -> list[dict]:
    """Per (method, seed): the selection's hash, tokens seen, unique tokens, epochs, wall times
    (train and eval)."""
    rows, hashes = [], {}
    for summary in sorted((output / "train").glob("*/seed*/summary.json")):
        s = json.loads(summary.read_text())
        label, seed = summary.parent.parent.name, s["seed"]
        ev = output / "eval" / f"{label}.seed{seed}.json"
        selection = output / "select" / label / "selection.parquet"
        if label not in hashes and selection.is_file():
            hashes[label] = selection_hash(selection)
        rows.append({"method": label, "seed": seed, "selection": hashes.get(label),
                     "tokens_in_selection": s["tokens_in_data"],
                     "tokens_seen": s["tokens_seen"], "unique_tokens_seen": s["unique_tokens_seen"],
                     "epochs": s["epochs"], "train_wall_s": s["train_wall_s"],
                     "eval_wall_s": json.loads(ev.read_text()).get("eval_wall_s")
                     if ev.is_file() else None})
    return rows


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
        run(Path(args.pool), Path(args.output), runs, args.seeds, args.config, args.select_ratio,
            args.block_size, args.vocab_size, args.jobs, args.heldout_docs, args.select_seed,
            args.set, args.epochs, args.primary, Path(args.outside) if args.outside else None,
            args.tasks)

    p.set_defaults(func=command)
    return run_command(p, argv, "reproduce.experiments.downstream")


if __name__ == "__main__":
    sys.exit(main())

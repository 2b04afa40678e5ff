"""What the experiments share: their command-line base, the learner's parameters, one learner run
with its curve, one greedy run (in process, or in a child process killed at a time budget), the
power-law fit, and writing the JSON + Markdown pair (both atomically)."""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import time
from typing import Callable, Iterable, TypeVar

import numpy as np
import torch

from datamask import processes
from datamask.data import (Dataset, block_count, neighbourhood_blocks, random_blocks,
                           write_json_atomic, write_text_atomic)
from datamask.learner import LR_SCHEDULES, LearnerConfig, MaskLearner
from datamask.objectives import DIVERSITY, FacilityLocation, GroundSet, diversity
from datamask.selectors import make_selector
from datamask.shared import resolve_device
from datamask.examples.synthetic import synthetic_dataset

from .records import CurvePoint, ExperimentResult, Fit

T = TypeVar("T")

LEARNER_INITS = LearnerConfig.__dataclass_fields__["init"].metadata["choices"]  # select's --init
STALL_ON = LearnerConfig.__dataclass_fields__["stall_on"]  # select's --stall_on
START_OPTIMIZER = LearnerConfig.__dataclass_fields__["start_optimizer"]  # select's flag
START_ONLY = LearnerConfig.__dataclass_fields__["start_only"]  # select's flag
CHILD_START_S = 600.0  # a child's import and data generation, before its budget starts


def lr_setting(config: LearnerConfig = LearnerConfig()) -> str:
    """A learner's rate as `schedule:max_lr:min_lr`; a constant rate ignores min_lr, so it is
    written as max_lr twice."""
    min_lr = config.max_lr if config.lr_schedule == "constant" else config.min_lr
    return f"{config.lr_schedule}:{config.max_lr:g}:{min_lr:g}"


def parse_lr(value: str) -> str:
    """argparse type for `schedule:max_lr:min_lr`; the string itself is the setting's name."""
    parts = value.split(":")
    try:
        ok = len(parts) == 3 and parts[0] in LR_SCHEDULES and [float(p) for p in parts[1:]]
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            f"expected schedule:max_lr:min_lr with schedule one of {', '.join(LR_SCHEDULES)}, "
            f"got {value!r}")
    return value


def lr_params(setting: str) -> dict:
    schedule, max_lr, min_lr = setting.split(":")
    return {"lr_schedule": schedule, "max_lr": float(max_lr), "min_lr": float(min_lr)}


def lr_of(config: dict) -> str:
    """The rate a results file's learner runs used (files older than --lr did not record it)."""
    return config.get("lr", "not recorded")


def experiment_parser(doc: str, steps: int) -> argparse.ArgumentParser:
    """The flags every experiment takes: which metrics, the synthetic rows' shape, the budget,
    and the learner's settings. --lr is recorded in every learner run's params: results then say
    which rate made them even after `datamask select`'s default changes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--metrics", nargs="+", default=list(DIVERSITY), choices=list(DIVERSITY))
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=64, help="clusters of the synthetic rows")
    parser.add_argument("--ratio", type=float, default=0.1, help="select_ratio")
    parser.add_argument("--steps", type=int, default=steps, help="learner n_epochs")
    parser.add_argument("--patience", type=int, default=0,
                        help="the learner's stopping rule window at --min_gain's default "
                             "(datamask select --patience); 0 = always run --steps, so that "
                             "experiments compare fixed step counts unless told otherwise")
    parser.add_argument("--stop_every", type=int, default=0,
                        help="datamask select's stopping rule, checked every this many steps "
                             "(select's default: 50); 0, the default here, always runs --steps, "
                             "so that experiments compare fixed step counts")
    parser.add_argument("--cover_sample", type=float, default=0.0,
                        help="Facility's learner only, with --partial 1 (datamask select "
                             "--cover_sample): coverage measured on this fraction of the rows")
    parser.add_argument("--probes", type=int, default=0,
                        help="DiSF's learner: each mask's score estimated with this many shared "
                             "random directions (select's DiSF default: 64); 0, the default "
                             "here, the exact score, so the committed commands keep their meaning")
    parser.add_argument("--init", default="auto", choices=LEARNER_INITS,
                        help="the learner's initial logits (datamask select --init; default "
                             "%(default)s, select's)")
    parser.add_argument("--stall_on", default=STALL_ON.default,
                        choices=STALL_ON.metadata["choices"],
                        help="what the stopping rule's stall is tested on, with --stop_every "
                             "(datamask select --stall_on; default %(default)s, select's)")
    parser.add_argument("--start_optimizer", default=START_OPTIMIZER.default,
                        choices=START_OPTIMIZER.metadata["choices"],
                        help="the greedy start's optimiser (datamask select --start_optimizer; "
                             "default %(default)s, select's)")
    parser.add_argument("--stop_share", type=float, default=0.0,
                        help="write a scored start without a step where its certificate holds "
                             "this share of the room above random (datamask select "
                             "--stop_share); 0, the default here, so that runs take their steps")
    parser.add_argument("--start_only", default="off", choices=START_ONLY.metadata["choices"],
                        help="write the greedy start with no step (datamask select "
                             "--start_only); off, the default here, so that runs take their steps")
    parser.add_argument("--n_rollout", type=int, default=128)
    parser.add_argument("--partial", type=float, default=0.1)
    parser.add_argument("--lr", type=parse_lr, default=lr_setting(),
                        help="the learner's rate as schedule:max_lr:min_lr (default: datamask "
                             "select's, %(default)s)")
    parser.add_argument("--output", default="runs/experiments")
    return parser


def add_seeded_rows(parser: argparse.ArgumentParser) -> None:
    """The flags of the experiments that run every method on one set of rows over seeds at one
    lamb (sweep, direct)."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n", type=int, default=2000, help="rows")
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--lamb", type=float, default=0.5)


def learner_params(args: argparse.Namespace, lamb: float, **overrides) -> dict:
    """LearnerConfig keywords from an experiment's flags, at `lamb`, on the CPU; `overrides`
    (algorithm, seed, a swept knob) win."""
    params = {"lamb": lamb, "n_rollout": args.n_rollout, "n_epochs": args.steps,
              "patience": args.patience, "stop_every": args.stop_every, "partial": args.partial,
              "cover_sample": args.cover_sample, "probes": args.probes, "init": args.init,
              "stall_on": args.stall_on, "start_optimizer": args.start_optimizer,
              "stop_share": args.stop_share, "start_only": args.start_only,
              "device": "cpu", **lr_params(args.lr)}
    return dict(params, **overrides)


def start_of_last_run(items: Iterable[T], holds: Callable[[T], bool]) -> T | None:
    """The earliest item from which `holds` is true of it and of every later item; None when it is
    false of the last (the smallest stable value of a sweep, the crossover N of the timing)."""
    start = None
    for item in reversed(list(items)):
        if not holds(item):
            break
        start = item
    return start


def metric_scorer(data: Dataset, metric: str, device: str = "cpu", cover_rows: int | None = None,
                  seed: int = 0) -> Callable[[np.ndarray], float]:
    """The diversity set function `metric` of a selection mask, on the whole input. (Report would
    also fit the joint's term scale on full-size random masks: too slow for a curve at large N.)
    Past `cover_rows` rows, Facility covers a seeded uniform sample of that many rows (an
    unbiased estimate: its exact cost grows with N times k)."""
    ground = GroundSet.from_arrays(data.features, data.quality, resolve_device(device))
    function = diversity(metric)
    if metric == "Facility" and cover_rows is not None and len(data) > cover_rows:
        generator = torch.Generator().manual_seed(seed)
        function = FacilityLocation(cover=torch.randperm(len(data), generator=generator)[
            :cover_rows].sort().values.to(ground.device))
    return lambda mask: function(ground, torch.as_tensor(np.flatnonzero(mask))).item()


def learner_run(data: Dataset, ratio: float, score: Callable[[np.ndarray], float],
                eval_points: int, **config) -> dict:
    """One DATAMASK run; its curve is `score` of the current read-off on the whole input at about
    `eval_points` steps (evaluation time excluded from `elapsed_s`, as the learner does)."""
    cfg = LearnerConfig(select_ratio=ratio, **config)
    every = max(1, cfg.n_epochs // max(1, eval_points))
    result = MaskLearner(cfg).fit(data, evaluate=lambda m: {"objective": score(m)},
                                  eval_every=every, progress=False)
    curve = [CurvePoint(r["step"], r["elapsed_s"], r["objective"])
             for r in result.history if "objective" in r]
    return {"wall_s": result.wall_time_s, "selected": result.selected, "curve": curve,
            "steps": [r["objective_mean"] for r in result.history], "best_step": result.best_step}


BLOCK_PLANS = {  # how a learner run in blocks cuts its rows: (data, blocks, seed) -> row indices
    "random": lambda data, n_blocks, seed: random_blocks(len(data), n_blocks, seed),
    "neighbourhood": lambda data, n_blocks, seed: neighbourhood_blocks(data.features, n_blocks)}


def blocks_learner_run(data: Dataset, ratio: float, block_rows: int, plan_seed: int,
                       plan: str = "random", **config) -> dict:
    """DATAMASK the way the paper scales it: blocks of at most `block_rows` rows, each learned
    alone at its own budget, one after the other here. `plan`, a key of BLOCK_PLANS: "random"
    (`random_blocks`, the pipeline's plan, seeded by `plan_seed`) or "neighbourhood"
    (`neighbourhood_blocks`). `wall_s`: the plan's seconds (`plan_s`) plus every block's
    (`block_s`; a cluster runs them side by side). No anytime curve: the blocks end apart.
    `best_step` is the step every block's selection was read at, where they agree. A block's
    certificate would bound its own optimum, not the union's, and cost Facility seconds a block
    (50 blocks of 20,000 rows: about 20 minutes), so the blocks skip it."""
    started = time.perf_counter()
    blocks = BLOCK_PLANS[plan](data, block_count(len(data), block_rows), plan_seed)
    plan_s = time.perf_counter() - started
    selected = np.zeros(len(data), dtype=bool)
    block_s, best_steps = [], set()
    for rows in blocks:
        rows = np.sort(rows)
        block = Dataset(data.ids[rows], data.quality[rows],
                        np.ascontiguousarray(data.features[rows]))
        result = MaskLearner(LearnerConfig(select_ratio=ratio, **{"certificate": "off",
                                                                  **config})).fit(
            block, progress=False)
        selected[rows[result.selected]] = True
        block_s.append(result.wall_time_s)
        best_steps.add(result.best_step)
    return {"wall_s": plan_s + sum(block_s), "selected": selected, "plan_s": plan_s,
            "block_s": block_s, "best_step": best_steps.pop() if len(best_steps) == 1 else None}


def warm_up_learner(dim: int, ratio: float, metrics, seed: int = 0, **config) -> None:
    """Each metric's learner for two steps on a few rows, off the clock: the first run in a
    process pays for torch's lazy initialisation (CUDA's too, with `device`) and would look
    several times slower."""
    data = synthetic_dataset(max(200, math.ceil(2 / ratio)), dim=dim, n_clusters=8, seed=seed)
    for metric in metrics:
        learner_run(data, ratio, lambda mask: 0.0, 1,
                    **{"device": "cpu", **config, "algorithm": metric, "n_epochs": 2})


def greedy_run(data: Dataset, ratio: float, name: str, **params) -> dict:
    """One greedy selection; `picks`: (row, seconds into its loop) of each step, for the greedies
    of `datamask.greedy` (whose records carry the clock), else empty."""
    selection = make_selector(name, **params).select(data, ratio)
    picks = [(r["row"], r["elapsed_s"]) for r in selection.history if "elapsed_s" in r]
    return {"wall_s": selection.wall_time_s, "selected": selection.selected, "picks": picks}


def greedy_curve(result: dict, score: Callable[[np.ndarray], float], n: int,
                 points: int) -> list[CurvePoint] | None:
    """A greedy's anytime curve: `score` of its first t picks (fewer than k rows: what stopping
    it there gives) at about `points` steps, against its wall time then (the time before its
    loop, a kernel's say, counted in). None without a per-step clock."""
    picks = result.get("picks")
    if not picks:
        return None
    rows = np.array([row for row, _ in picks])
    setup_s = result["wall_s"] - picks[-1][1]
    steps = sorted(set(np.linspace(0, len(picks) - 1, max(2, points)).round().astype(int)))
    curve = []
    for step in steps:
        mask = np.zeros(n, dtype=bool)
        mask[rows[:step + 1]] = True
        curve.append(CurvePoint(int(step), setup_s + picks[step][1], score(mask)))
    return curve


def _greedy_child(conn, data_args: dict, ratio: float, name: str, params: dict, repeats: int,
                  budget_s: float) -> None:
    data = synthetic_dataset(**data_args)
    # off the clock: the first call in a process pays for torch's lazy initialisation
    greedy_run(synthetic_dataset(**dict(data_args, n_rows=200)), ratio, name, **params)
    conn.send("ready")

    def once() -> dict:
        result = greedy_run(data, ratio, name, **params)
        conn.send(result)  # each repeat as it ends: a kill keeps what finished
        return result

    fastest(once, repeats, budget_s)
    conn.send(None)


def greedy_runs_killable(data_args: dict, ratio: float, name: str, repeats: int, budget_s: float,
                         kill: bool = True, **params) -> dict:
    """`fastest` of `greedy_run` on `synthetic_dataset(**data_args)`, in a fresh process that is
    killed (if `kill`) when `budget_s` has passed since its data was ready: an over-budget greedy
    costs its budget, not hours. Returns {"killed": True, "wall_s": budget_s} when no run ended
    in time. The child comes from the forkserver, which imports this module once (not fork: a
    forked child of a process that has used torch's thread pool can deadlock; not spawn: each
    child would import torch again, about 1.4 s of CPU on the 2-core box); like the forkserver,
    it dies with this process, kill -9 included."""
    processes.children_die_with_parent(preload=(__name__,))
    context = multiprocessing.get_context("forkserver")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_greedy_child, daemon=True,
                              args=(child, data_args, ratio, name, params, repeats, budget_s))
    process.start()
    child.close()
    results = []
    try:
        if not parent.poll(CHILD_START_S):
            raise RuntimeError(f"greedy child for {name} did not start within {CHILD_START_S} s")
        parent.recv()  # "ready"
        deadline = time.monotonic() + budget_s
        while parent.poll(max(0.0, deadline - time.monotonic()) if kill else None):
            result = parent.recv()
            if result is None:
                break
            results.append(result)
    except EOFError:
        raise RuntimeError(f"greedy child for {name} died (exit code {process.exitcode})") from None
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
    if not results:
        return {"killed": True, "wall_s": budget_s}
    return dict(min(results, key=lambda r: r["wall_s"]), runs=len(results))


def fastest(run: Callable[[], dict], repeats: int, budget_s: float) -> dict:
    """The fastest of up to `repeats` runs (seeded, so the same result each time), repeating only
    while the total stays within `budget_s`: on a shared CPU one slow outlier would otherwise
    skew a power-law fit, and with it every skip and extrapolation after it."""
    best, total, count = None, 0.0, 0
    while count < repeats and (best is None or total + best["wall_s"] <= budget_s):
        result = run()
        total, count = total + result["wall_s"], count + 1
        if best is None or result["wall_s"] < best["wall_s"]:
            best = result
    return dict(best, runs=count)


def power_law(sizes, seconds) -> Fit | None:
    """Least-squares fit of log t = log c + b log N; None below two sizes (nothing to fit)."""
    if len(sizes) < 2:
        return None
    b, log_c = np.polyfit(np.log(sizes), np.log(seconds), 1)
    return Fit(exponent=float(b), coef=float(np.exp(log_c)), sizes=[int(n) for n in sizes])


def write_outputs(out_dir: str, result: ExperimentResult, markdown: str) -> None:
    """<experiment>.json (the record) and <experiment>.md: the experiment's name is its Make
    target's (timing's target is reproduce-timing)."""
    os.makedirs(out_dir, exist_ok=True)
    name = result.experiment
    write_json_atomic(result.to_json(), os.path.join(out_dir, f"{name}.json"))
    write_text_atomic(markdown, os.path.join(out_dir, f"{name}.md"))


def experiment_main(parse: Callable, run: Callable, markdown: Callable[..., str]) -> Callable:
    """An experiment's command: its flags parsed, its run, its record and summary written under
    --output; the record is returned."""
    def main(argv: list[str] | None = None) -> ExperimentResult:
        args = parse(argv)
        result = run(args)
        write_outputs(args.output, result, markdown(result))
        return result
    return main

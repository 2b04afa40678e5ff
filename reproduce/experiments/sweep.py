"""`make ablation-<knob>` (KNOBS): the learner with one knob swept, written to ablation-<knob>.json.

    python -m reproduce.experiments.sweep --knob G [--values 32 64 128 256 512] [--seeds 0 1 2]
        [--metrics DiSF Facility Pair_simi] [--n 2000] [--steps 200] [--output runs/experiments]

Knobs of the paper: G (n_rollout; paper: 32..512, divergence below 128), lamb (1.0..0.1), partial
(100/10/5/1%), init ('same' | 'quality', each optionally '+prune': quality pruning of
--prune_ratio first; the paper reports selection time 18 h -> 10 h -> 7 h). Knobs it left open:
lr ('schedule:max_lr:min_lr', schedule linear | cosine | constant), steps (n_epochs), logprob
(simple | exact), scale_on (step | input: the mask shape the terms' spreads are fitted at).
Learner variants beyond the paper, each a LearnerConfig flag: credit (mask | row),
update ('ascent' at --lr, or 'adam:RATE', Adam at a constant RATE), cover_sample (Facility only: 0
is the paper's --partial; a fraction F draws masks over all candidates with coverage measured on
F of them), probes (DiSF only: 0 is the exact collapse score; P estimates it with P shared random
directions, cheaper at d = 384), patience (the stopping rule's window at --min_gain's default;
0 = off; the run's steps taken are recorded), stop (datamask select's stopping rule on the
read-off: checked every VALUE steps at its default window and tolerance, --steps the cap; 0 = the
fixed steps it is held against). Every run optimises the joint objective at its
lamb, on the same synthetic rows; its curve and final selection are scored by
`datamask.report.Report` on all N rows (on that scale a random selection scores ~0). The joint
greedy on the same objective (each metric, each lamb) is run once beside them as the yardstick.

--equal_time compares the values at equal wall time instead of equal steps (for knobs that
change a step's cost, partial and init's pruning): the first value runs --steps steps; each
value's step is timed first (EQUAL_TIME_PROBE steps) and every other value gets the steps that
fill EQUAL_TIME_MARGIN times the first's time, so each is seen over the first's whole span.
It needs a constant rate (a schedule would stretch with the steps). The curves' `elapsed_s` then
give the objective at equal time (`objective_at`) and the time to an objective (`time_to`).

`ablation-<knob>.json` schema (records.SweepResult):
- machine, config (the flags), knob, paper (what the paper reports for this knob)
- runs: one per (metric, value, seed): metric, value, seed, params (the learner config), wall_s,
  objective (final joint_<metric> at the run's lamb), final (Report: quality, each diversity
  metric, joint_<metric> for each), curve [{step, elapsed_s, objective}]
- summary: one per (metric, value): objective_mean, objective_std, wall_s_mean, start_mean (the
  whole-input objective after the first step, the curve's first point), quality_mean and each
  diversity metric's mean, stable
- greedy: one per (metric, lamb): metric, lamb, wall_s, objective (joint-greedy, same Report)
- best: {metric: the value with the highest objective_mean}
- smallest_stable: {metric: the smallest value from which every larger value is stable, or null}
  where stable = every seed ends above its first-step objective and the seeds' final objectives span
  at most a quarter of the mean gain (meaningful for G; computed for every knob alike)
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from datamask.objectives import DIVERSITY
from datamask.report import Report
from datamask.examples.synthetic import synthetic_dataset
from datamask.shared import machine

from .common import (add_seeded_rows, experiment_main, experiment_parser, greedy_run,
                     learner_params, learner_run, lr_of, lr_params, parse_lr, start_of_last_run,
                     warm_up_learner)
from .records import (GreedyLevel, Machine, Outcome, SweepResult, SweepRun, SweepSummary, best_of,
                      of_metric)

KNOBS = {  # knob -> (default values, paper's finding); `make ablation-<knob>` sweeps it
    "G": ([32, 64, 128, 256, 512], "G from 32 to 512; diverges below 128"),
    "lamb": ([1.0, 0.7, 0.5, 0.3, 0.1], "lamb from 1.0 to 0.1"),
    "partial": ([1.0, 0.1, 0.05, 0.01], "partial 100/10/5/1%"),
    "init": (["same", "quality", "same+prune", "quality+prune"],
             "pruning and quality init: selection time 18 h -> 10 h -> 7 h"),
    "lr": (["constant:1:1", "constant:10:10", "linear:1:0.1", "linear:3:0.3", "linear:10:1",
            "linear:30:3", "linear:100:10", "cosine:10:1", "cosine:30:3"],
           "not ablated (the original code decays linearly from max_lr to min_lr)"),
    "steps": ([100, 300, 600], "not ablated"),
    "logprob": (["simple", "exact"], "the simplified form only (sum of log-softmax)"),
    "scale_on": (["step", "input"], "not stated (how the two terms are put on one scale)"),
    "credit": (["mask", "row"], "not in the paper (each mask is credited as a whole)"),
    "update": (["ascent", "adam:0.3", "adam:1"], "not in the paper (plain logit ascent)"),
    "cover_sample": ([0.0, 0.01, 0.04], "not in the paper (partial samples the candidates, "
                                         "which also shrinks the covered set)"),
    "patience": ([0, 25, 50, 100], "not in the paper (a fixed number of steps)"),
    "probes": ([0, 16, 32, 64], "not in the paper (the exact collapse score)"),
    "stop": ([0, 50], "not in the paper (a fixed number of steps)"),
    "best_from": (["check", "start"], "not in the paper (a fixed number of steps, the last "
                                      "read-off written)"),
}
TEXT_KNOBS = ("init", "lr", "logprob", "scale_on", "credit", "update", "best_from")
VARIANT_KNOBS = ("credit", "update", "cover_sample", "patience", "probes",  # beyond the paper
                 "stop", "best_from")
ONE_METRIC = {"cover_sample": "Facility", "probes": "DiSF"}  # knobs that only one metric has
EQUAL_TIME_PROBE = 20  # steps each value is timed for before an --equal_time sweep
EQUAL_TIME_MARGIN = 1.3  # the other values run this much longer than the first value's --steps


def knob_params(knob: str, value, args) -> dict:
    """The learner's parameters with `knob` set to `value` (the run fills in the metric)."""
    if knob == "G":
        change = {"n_rollout": int(value)}
    elif knob == "steps":
        change = {"n_epochs": int(value)}
    elif knob == "init":
        init, _, prune = value.partition("+")
        change = {"init": init, "prune_ratio": args.prune_ratio if prune else 0.0}
    elif knob == "lr":
        change = lr_params(value)
    elif knob == "update":
        name, _, rate = value.partition(":")
        change = {"update": name, **(lr_params(f"constant:{rate}:{rate}") if rate else {})}
    elif knob == "cover_sample":
        change = {"cover_sample": float(value), **({"partial": 1.0} if float(value) else {})}
    elif knob in ("patience", "probes"):
        change = {knob: int(value)}
    elif knob == "stop":
        change = {"stop_every": int(value)}
    else:  # lamb, partial, logprob, scale_on, best_from: the learner's own name
        change = {knob: value if knob in TEXT_KNOBS else float(value)}
    return learner_params(args, **dict({"lamb": args.lamb}, **change))


def build_parser():
    parser = experiment_parser(__doc__, steps=200)
    add_seeded_rows(parser)
    parser.add_argument("--knob", required=True, choices=list(KNOBS))
    parser.add_argument("--values", nargs="+", help="default: the paper's range for the knob")
    parser.add_argument("--prune_ratio", type=float, default=0.5, help="for init '+prune'")
    parser.add_argument("--eval_points", type=int, default=20)
    parser.add_argument("--equal_time", action="store_true",
                        help="compare the values at equal wall time: the first value runs "
                             "--steps steps, the others as many as fill "
                             f"{EQUAL_TIME_MARGIN:g} times its time (each value's step timed "
                             "first); needs a constant --lr")
    parser.add_argument("--no_greedy", dest="greedy", action="store_false",
                        help="skip the joint greedy's yardstick (gain ratios then '-'): for DiSF "
                             "it is the naive greedy, k N d^2 work, hours at 20,000 x 384")
    return parser


def parse(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    default, _ = KNOBS[args.knob]
    kind = str if args.knob in TEXT_KNOBS else float
    args.values = [kind(v) for v in args.values] if args.values else default
    only = ONE_METRIC.get(args.knob)
    if only and args.metrics != [only]:
        parser.error(f"--knob {args.knob} applies to {only} only: give --metrics {only}")
    if args.equal_time and (args.knob in ("steps", "lr") or not args.lr.startswith("constant:")):
        parser.error(f"--equal_time sets each value's steps: it needs a constant --lr (got "
                     f"{args.lr}) and another --knob than steps or lr (got {args.knob})")
    if args.knob == "lr":
        for value in args.values:
            try:
                parse_lr(value)
            except argparse.ArgumentTypeError as err:
                parser.error(f"--values for --knob lr: {err}")
    return args


def run(args) -> SweepResult:
    data = synthetic_dataset(args.n, dim=args.dim, n_clusters=args.clusters, seed=args.data_seed)
    warm_up_learner(args.dim, args.ratio, args.metrics, args.data_seed,
                    n_rollout=min(8, args.n_rollout), partial=args.partial)
    reports: dict[float, Report] = {}  # one per lamb: its joint's scale is fitted once
    runs = []
    for metric in args.metrics:
        steps = equal_time_steps(data, args, metric) if args.equal_time else {}
        for value in args.values:
            params = dict(knob_params(args.knob, value, args), algorithm=metric,
                          **({"n_epochs": steps[value]} if steps else {}))
            lamb = params["lamb"]
            report = reports.setdefault(lamb, Report(data, args.ratio, lamb, seed=args.data_seed))
            key = f"joint_{metric}"
            for seed in args.seeds:
                result = learner_run(data, args.ratio, lambda m: report(m)[key], args.eval_points,
                                     seed=seed, **params)
                final = report(result["selected"])
                runs.append(SweepRun(metric=metric, value=value, seed=seed,
                                     params=dict(params, seed=seed), wall_s=result["wall_s"],
                                     objective=final[key], final=final, curve=result["curve"],
                                     steps_taken=len(result["steps"]),
                                     best_step=result["best_step"]))
                print(f"{metric} {args.knob}={value} seed {seed}: {final[key]:.3f} in "
                      f"{result['wall_s']:.2f} s (written: step {result['best_step']})",
                      flush=True)
    greedy = []
    for metric in args.metrics if args.greedy else []:
        for lamb, report in reports.items():
            result = greedy_run(data, args.ratio, "joint-greedy", algorithm=metric, lamb=lamb,
                                seed=args.data_seed, device="cpu")
            greedy.append(GreedyLevel(metric=metric, lamb=lamb, wall_s=result["wall_s"],
                                      objective=report(result["selected"])[f"joint_{metric}"]))
    summary = summarise(runs, args)
    return SweepResult(
        experiment=f"ablation-{args.knob}", knob=args.knob, machine=Machine(**machine("cpu")),
        config=vars(args), paper=KNOBS[args.knob][1], runs=runs, summary=summary, greedy=greedy,
        best={m: best_of(of_metric(summary, m)).value for m in args.metrics},
        smallest_stable=smallest_stable(summary, args.metrics))


def equal_time_steps(data, args, metric: str) -> dict:
    """Per value, its steps in an --equal_time sweep: --steps for the first, for the others
    those filling EQUAL_TIME_MARGIN times the first's time, from each value's step timed over
    EQUAL_TIME_PROBE steps (first seed, off the record)."""
    cost = {}
    for value in args.values:
        params = dict(knob_params(args.knob, value, args), algorithm=metric,
                      n_epochs=EQUAL_TIME_PROBE, seed=args.seeds[0])
        run = learner_run(data, args.ratio, lambda mask: 0.0, 1, **params)
        cost[value] = run["wall_s"] / EQUAL_TIME_PROBE
    first = args.values[0]
    span = EQUAL_TIME_MARGIN * args.steps * cost[first]
    return {value: args.steps if value == first else max(1, math.ceil(span / cost[value]))
            for value in args.values}


def curve_arrays(run: SweepRun) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([p.elapsed_s for p in run.curve]),
            np.array([p.objective for p in run.curve]))


def window_s(runs: list[SweepRun]) -> float:
    """The shortest span of `runs` (their curves' last times): all of them are seen over it."""
    return min(run.curve[-1].elapsed_s for run in runs)


def objective_at(run: SweepRun, seconds: float) -> float:
    """The run's objective at `seconds` of its clock: its last curve point by then (NaN before
    the first)."""
    times, objective = curve_arrays(run)
    last = np.searchsorted(times, seconds, side="right") - 1
    return float(objective[last]) if last >= 0 else math.nan


def time_to(run: SweepRun, target: float, window: float) -> float:
    """When the run's curve first reaches `target`, within `window` seconds; inf if it does not."""
    times, objective = curve_arrays(run)
    hit = (objective >= target) & (times <= window)
    return float(times[hit.argmax()]) if hit.any() else math.inf


def seed_spread(values: np.ndarray, form: str = ".3g") -> str:
    """Values over seeds as median [min, max]; one not finite (a level not reached) as "-"."""
    shown = (format(v, form) if np.isfinite(v) else "-"
             for v in (np.median(values), values.min(), values.max()))
    return "{} [{}, {}]".format(*shown)


def times_over(later, t_later: float, earlier, t_earlier: float) -> str:
    """Value `later`'s median time over `earlier`'s, where either may not have reached (inf)."""
    if np.isfinite(t_earlier):
        return f"{t_later / t_earlier:.2f}x" if np.isfinite(t_later) else f"{later} not reached"
    return f"only {later} reached" if np.isfinite(t_later) else "neither reached"


def summarise(runs: list[SweepRun], args) -> list[SweepSummary]:
    out = []
    for metric in args.metrics:
        for value in args.values:
            group = [r for r in of_metric(runs, metric) if r.value == value]
            final = np.array([r.objective for r in group])
            start = np.array([r.curve[0].objective for r in group])
            gain = float(np.mean(final - start))
            out.append(SweepSummary(
                metric=metric, value=value, start_mean=float(start.mean()),
                stable=bool(np.all(final > start) and np.ptp(final) <= 0.25 * gain),
                **Outcome.stats(group)))
    return out


def smallest_stable(summary: list[SweepSummary], metrics) -> dict:
    """Per metric, the smallest value (in the order given) from which every later one is stable."""
    result = {}
    for metric in metrics:
        start = start_of_last_run(of_metric(summary, metric), lambda s: s.stable)
        result[metric] = start.value if start else None
    return result


def markdown(results: SweepResult) -> str:
    cfg, knob = results.config, results.knob
    diversity_cols = list(DIVERSITY)
    lines = [f"# Ablation: {knob}", "", results.machine.line(), "",
             f"Paper: {results.paper}. Here: synthetic rows (N = {cfg['n']}, {cfg['dim']}-d, "
             f"{cfg['clusters']} clusters), select_ratio {cfg['ratio']:g}, {cfg['steps']} steps, "
             f"seeds {cfg['seeds']}, CPU; defaults otherwise lamb {cfg['lamb']:g}, G "
             f"{cfg['n_rollout']}, partial {cfg['partial']:g}, lr {lr_of(cfg)}. "
             "Objective: the joint objective at "
             "the run's lamb on all N rows (random ~ 0, higher is better); mean +- std over seeds. "
             "Gain ratio: the mean objective over the joint greedy's on the same objective (the "
             "scale puts random masks' mean at 0, so this is (learner - random) / (greedy - "
             "random)). Steps: mean steps taken.",
             "", f"| metric | {knob} | objective | gain ratio | first-step objective | wall s | "
             "steps | stable | quality | " + " | ".join(diversity_cols) + " |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|" + "---:|" * len(diversity_cols)]
    for s in results.summary:
        ratio, steps = ratio_and_steps(results, s)
        lines.append(f"| {s.metric} | {s.value} | {s.objective_mean:.3f} +- "
                     f"{s.objective_std:.3f} | {ratio} | {s.start_mean:.3f} | "
                     f"{s.wall_s_mean:.3g} | {steps} | "
                     f"{'yes' if s.stable else 'no'} | {s.means['quality']:.3f} | "
                     + " | ".join(f"{s.means[m]:.4g}" for m in diversity_cols) + " |")
    if cfg.get("equal_time"):
        lines += equal_time_lines(results)
    levels = "; ".join(f"{g.metric} (lamb {g.lamb:g}) {g.objective:.3f} in {g.wall_s:.3g} s"
                       for g in results.greedy)
    lines += ["", "Joint greedy on the same objective: " + (levels or "not run (--no_greedy)")
              + ".",
        "", "Best value (highest mean objective): "
        + "; ".join(f"{m}: {v}" for m, v in results.best.items()) + ".",
        "", "Smallest stable value (it and every later one): "
              + "; ".join(f"{m}: {v if v is not None else 'none'}"
                          for m, v in results.smallest_stable.items()) + ".", ""]
    return "\n".join(lines)


def equal_time_lines(results: SweepResult) -> list[str]:
    """An --equal_time sweep's values at equal wall time: per metric the window (the shortest
    run's span), and per value its steps and its objective at the window's end over the seeds."""
    lines = ["", f"At equal wall time (--equal_time: the first value {results.config['steps']} "
                 "steps, the others as many as fill "
                 f"{EQUAL_TIME_MARGIN:g} times its time). Objective at the window's end (the "
                 "shortest run's span): median [min, max] over seeds.", "",
             f"| metric | window s | {results.knob} | steps | objective at the window |",
             "|---|---:|---|---:|---:|"]
    for metric in results.metrics:
        runs = of_metric(results.runs, metric)
        window = window_s(runs)
        for value in results.config["values"]:
            group = [r for r in runs if r.value == value]
            at = np.array([objective_at(r, window) for r in group])
            lines.append(f"| {metric} | {window:.3g} | {value} | {group[0].params['n_epochs']} | "
                         f"{np.median(at):.3f} [{at.min():.3f}, {at.max():.3f}] |")
    return lines


def gain_ratio(results: SweepResult, summary: SweepSummary) -> float | None:
    """The summary's mean objective over the joint greedy's at its metric and lamb (None when
    the greedy was not run or scored 0)."""
    lamb = summary.value if results.knob == "lamb" else results.config["lamb"]
    level = next((g for g in of_metric(results.greedy, summary.metric)
                  if np.isclose(g.lamb, float(lamb))), None)
    return summary.objective_mean / level.objective if level and level.objective else None


def ratio_and_steps(results: SweepResult, summary: SweepSummary) -> tuple[str, str]:
    """A summary row's gain ratio and mean steps taken as table cells ('-' where unknown)."""
    ratio = gain_ratio(results, summary)
    steps = [r.steps_taken for r in of_metric(results.runs, summary.metric)
             if r.value == summary.value and r.steps_taken is not None]
    return ("-" if ratio is None else f"{ratio:.3f}",
            f"{np.mean(steps):.0f}" if steps else "-")


main = experiment_main(parse, run, markdown)


if __name__ == "__main__":
    main()

"""`make reproduce-timing`: selector wall time of the greedy baselines against DATAMASK.

    python -m reproduce.experiments.timing [--sizes 1000 2000 5000 20000 100000] [--budget_s 300]
        [--metrics DiSF Facility Pair_simi] [--steps 500] [--output runs/experiments]
        [--learner_max_n Facility=20000] [--learner_blocks Facility=20000]
        [--block_plan random|neighbourhood] [--score_rows 20000] [--greedy_points 10]
        [--device cpu|cuda]

The paper (DiSF objective, 100k rows, GPU): greedy 78 h, DATAMASK ~50 min, a time ratio of 1.07%.
Here, per diversity metric and per N, on the same synthetic rows in one process: the reference
greedy, the exact fast greedy (same objective, faster bookkeeping) and the learner optimising that
metric alone (lamb = 0), each scored by the same set function on all N rows. A greedy whose time,
predicted by a power law fitted over the sizes it finished (or already measured at a smaller N),
exceeds --budget_s is not run at that N: its time is the fit's extrapolation, marked as such.
Each greedy runs in a child process: one predicted under budget that overshoots it is killed at
the budget and its time extrapolated too (status 'killed'). The two smallest sizes always run to
the end, as a fit needs two. Each measured time is the fastest of up to --repeats runs that fit in
the budget together, against the noise of a shared CPU.

At the paper's scale (up to 1M x 384) the scalable greedies (role 'scalable') join: the stochastic
greedy (Mirzasoleiman et al. 2015) for Pair_simi, and for Facility the lazy and stochastic greedies
on a sparse kNN kernel (faiss IVF). Past --learner_max_n the learner is not run either: its time is
extrapolated from its own fit. Past --learner_blocks it runs the way the paper scales it, in
independent blocks of at most that many rows, one after the other: random ones (the pipeline's
plan) or, with --block_plan neighbourhood, regions of the space. Its time is their sum and the
plan's, and it has no anytime curve. Past --score_rows rows, Facility is scored on
a seeded uniform sample of that many covered rows (an unbiased estimate of the objective on all
rows; the exact one costs N k d per score). Every run with a per-step clock (the learner, the
greedies of datamask.greedy) also gets an anytime curve: the objective on all rows against wall
time, a greedy's being that of its first t picks (what stopping it then would give).

`timing.json` schema (records.TimingResult):
- machine: cpu, cores, torch_threads, torch, device, gpu, python; config: the flags; paper: the
  paper's timing figures
- runs: one per (metric, n, label): metric, n, label ('datamask' or the greedy's), selector,
  params, role ('learner' | 'reference' | 'fast' | 'scalable'), status ('measured' | 'extrapolated' |
  'killed'), wall_s (measured: the fastest of `repeats` runs; else the fit's prediction, or for a
  run killed with no fit the budget, a lower bound), objective (null unless measured),
  random_objective (a random selection's, same N); block_s, plan_s: each block's seconds and the
  block plan's (a learner run in blocks, else null);
  curve: [{step, elapsed_s, objective}] (the learner's; a greedy's of its first step + 1 picks),
  null without a per-step clock
- fits: {metric: {label: {exponent, coef, sizes} | null}}: t = coef * N^exponent, seconds (the
  learner's under 'datamask')
- comparisons: one per (metric, n, greedy label): time_ratio (learner / greedy), objective_ratio
  (learner / greedy, raw; <1 is worse for a positive objective, >1 worse for a negative one),
  gain_ratio ((learner - random) / (greedy - random): 1 = as good as the greedy), greedy_status,
  time_to_greedy_objective_s (first curve point at or above the greedy's objective, else null)
- crossover: {metric: smallest N from which the learner is faster than the fast greedy, or null}
"""

from __future__ import annotations

from datamask.errors import UserError
from datamask.examples.synthetic import synthetic_dataset
from datamask.shared import check_device, machine

from .common import (BLOCK_PLANS, START_OPTIMIZER, blocks_learner_run, experiment_main,
                     experiment_parser, fastest, greedy_curve, greedy_run, greedy_runs_killable,
                     learner_params, learner_run, lr_of, metric_scorer, power_law,
                     start_of_last_run, warm_up_learner)
from .records import Comparison, Fit, Machine, PaperTiming, TimingResult, TimingRun

# metric -> greedies optimising it: (label, selector, params, role)
GREEDIES = {
    "DiSF": [("disf-greedy", "disf-greedy", {}, "reference"),
             ("disf-greedy-fast", "disf-greedy-fast", {"mode": "batched"}, "fast")],
    "Facility": [("facility-greedy naive", "facility-greedy", {"optimizer": "naive"}, "reference"),
                 ("facility-greedy lazy", "facility-greedy", {"optimizer": "lazy"}, "fast")],
    "Pair_simi": [("pair-greedy", "pair-greedy", {}, "fast")],
}
# the greedies practitioners use at a million rows (docs/baselines.md)
SCALABLE = {
    "Facility": [("facility-knn-greedy lazy", "facility-knn-greedy", {"index": "ivf"}, "scalable"),
                 ("facility-knn-greedy stochastic", "facility-knn-greedy",
                  {"index": "ivf", "optimizer": "stochastic"}, "scalable")],
    "Pair_simi": [("pair-greedy stochastic", "pair-greedy", {"optimizer": "stochastic"},
                   "scalable")],
}
for _metric, _greedies in SCALABLE.items():
    GREEDIES[_metric] += _greedies
PAPER = PaperTiming(metric="DiSF", n=100_000, greedy_s=78 * 3600, datamask_s=50 * 60,
                    time_ratio=50 / (78 * 60), device="GPU")


def build_parser():
    parser = experiment_parser(__doc__, steps=500)
    parser.set_defaults(metrics=list(GREEDIES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 20000, 100000],
                        help="the two smallest always run: keep both at or above the reference "
                             "DiSF greedy's 1024-row batch, whose time is linear in N only "
                             "across batches (inside one it grows like N^3)")
    parser.add_argument("--budget_s", type=float, default=300.0, help="per greedy run")
    parser.add_argument("--repeats", type=int, default=2,
                        help="keep the fastest of this many runs, while they fit in the budget")
    parser.add_argument("--eval_points", type=int, default=20, help="points on the learner curve")
    parser.add_argument("--max_n", nargs="*", default=[], metavar="METRIC=N",
                        help="run METRIC only up to N rows (e.g. Facility=20000: its learner "
                             "takes ~8 s a step at 100k rows on 2 CPU cores)")
    parser.add_argument("--learner_max_n", nargs="*", default=[], metavar="METRIC=N",
                        help="run METRIC's learner only up to N rows, its time extrapolated past "
                             "it (e.g. Facility=20000), while the greedies go on")
    parser.add_argument("--learner_blocks", nargs="*", default=[], metavar="METRIC=N",
                        help="past N rows, run METRIC's learner the paper's way at scale: in "
                             "blocks of at most N rows (--block_plan), one after the other, its "
                             "time their sum; e.g. Facility=20000, where its greedy start ends")
    parser.add_argument("--block_plan", choices=tuple(BLOCK_PLANS), default="random",
                        help="how --learner_blocks cuts the rows: random (the pipeline's seeded "
                             "plan) or neighbourhood (balanced bisection along principal "
                             "directions, so each block covers its own region)")
    parser.add_argument("--score_rows", type=int, default=20000,
                        help="past this many rows, score Facility on a seeded sample of this "
                             "many covered rows")
    parser.add_argument("--greedy_points", type=int, default=10,
                        help="points on each greedy's anytime curve")
    parser.add_argument("--greedies", nargs="+", default=None, metavar="LABEL",
                        choices=[label for greedies in GREEDIES.values()
                                 for label, *_ in greedies],
                        help="time only these greedies, by their tables' labels (e.g. "
                             "'facility-knn-greedy stochastic'); default: every one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu",
                        help="where the learner, every greedy and the scoring run: cpu or cuda[:N] "
                             "(the paper timed DiSF on a GPU)")
    return parser


def parse(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag in ("max_n", "learner_max_n", "learner_blocks"):
        entries = getattr(args, flag)
        try:
            caps = {metric: int(n) for metric, n in (e.split("=") for e in entries)}
        except ValueError:
            parser.error(f"--{flag}: expected METRIC=N entries, got {entries}")
        if set(caps) - set(GREEDIES):
            parser.error(f"--{flag}: unknown metric in {sorted(caps)}; known: {list(GREEDIES)}")
        setattr(args, flag, caps)
    try:
        check_device(args.device)
    except UserError as error:
        parser.error(str(error))
    both = set(args.learner_max_n) & set(args.learner_blocks)
    if both:
        parser.error(f"--learner_max_n and --learner_blocks both name {sorted(both)}: a learner "
                     "past N is either extrapolated or run in blocks")
    if args.block_plan != "random" and not args.learner_blocks:
        parser.error(f"--block_plan {args.block_plan} cuts the blocks of --learner_blocks; give "
                     "--learner_blocks METRIC=N too")
    if any(n < 1 for n in args.learner_blocks.values()):
        parser.error(f"--learner_blocks: N must be at least 1, got {args.learner_blocks}")
    if args.score_rows < 1:
        parser.error(f"--score_rows must be at least 1, got {args.score_rows}")
    return args


def measured(runs: list[TimingRun], metric: str, label: str) -> list[TimingRun]:
    return [r for r in runs if (r.metric, r.label, r.status) == (metric, label, "measured")]


def fit_of(runs: list[TimingRun], metric: str, label: str) -> Fit | None:
    done = measured(runs, metric, label)
    return power_law([r.n for r in done], [r.wall_s for r in done])


def run(args) -> TimingResult:
    # each greedy warms up in its own child process
    warm_up_learner(args.dim, args.ratio, args.metrics, args.seed, lamb=0.0,
                    n_rollout=args.n_rollout, partial=args.partial, device=args.device)
    runs: list[TimingRun] = []
    for position, n in enumerate(sorted(args.sizes)):
        data_args = {"n_rows": n, "dim": args.dim, "n_clusters": args.clusters, "seed": args.seed}
        data = synthetic_dataset(**data_args)
        for metric in args.metrics:
            if n > args.max_n.get(metric, n):
                continue
            score = metric_scorer(data, metric, args.device, cover_rows=args.score_rows,
                                  seed=args.seed)
            random_value = score(greedy_run(data, args.ratio, "random", seed=args.seed)["selected"])
            for label, name, params, role in GREEDIES[metric]:
                if args.greedies and label not in args.greedies:
                    continue
                fit = fit_of(runs, metric, label)
                over = any(r.wall_s > args.budget_s for r in measured(runs, metric, label)) or any(
                    (r.metric, r.label, r.status) == (metric, label, "killed") for r in runs)

                def record(status: str, wall_s: float, **extra) -> None:
                    runs.append(TimingRun(metric=metric, n=n, label=label, selector=name,
                                          params=params, role=role, status=status, wall_s=wall_s,
                                          random_objective=random_value, **extra))

                if fit and (over or fit.predict(n) > args.budget_s):
                    record("extrapolated", fit.predict(n), objective=None)
                    continue
                result = greedy_runs_killable(data_args, args.ratio, name, args.repeats,
                                              args.budget_s, kill=position >= 2, device=args.device,
                                              seed=args.seed, **params)
                if result.get("killed"):
                    wall = max(fit.predict(n), args.budget_s) if fit else args.budget_s
                    record("killed", wall, objective=None)
                    print(f"N={n} {metric} {label}: killed at {args.budget_s:g} s", flush=True)
                    continue
                record("measured", result["wall_s"], repeats=result["runs"],
                       objective=score(result["selected"]),
                       curve=greedy_curve(result, score, n, args.greedy_points))
                print(f"N={n} {metric} {label}: {result['wall_s']:.2f} s", flush=True)
            config = learner_params(args, 0.0, algorithm=metric, seed=args.seed,
                                    device=args.device)
            if n > args.learner_max_n.get(metric, n):
                fit = fit_of(runs, metric, "datamask")
                if fit:
                    runs.append(TimingRun(metric=metric, n=n, label="datamask",
                                          selector="datamask", params=config, role="learner",
                                          status="extrapolated", wall_s=fit.predict(n),
                                          random_objective=random_value, objective=None))
                print(f"N={n} {metric} datamask: not run (--learner_max_n)", flush=True)
                continue
            if n > args.learner_blocks.get(metric, n):
                result = blocks_learner_run(data, args.ratio, args.learner_blocks[metric],
                                            args.seed, args.block_plan, **config)
                runs.append(TimingRun(metric=metric, n=n, label="datamask", selector="datamask",
                                      params=config, role="learner", status="measured",
                                      wall_s=result["wall_s"], random_objective=random_value,
                                      objective=score(result["selected"]),
                                      best_step=result["best_step"], block_s=result["block_s"],
                                      plan_s=result["plan_s"]))
                print(f"N={n} {metric} datamask: {result['wall_s']:.2f} s in "
                      f"{len(result['block_s'])} blocks", flush=True)
                continue
            result = fastest(lambda: learner_run(data, args.ratio, score, args.eval_points,
                                                 **config), args.repeats, args.budget_s)
            runs.append(TimingRun(metric=metric, n=n, label="datamask", selector="datamask",
                                  params=config, role="learner", status="measured",
                                  wall_s=result["wall_s"], random_objective=random_value,
                                  repeats=result["runs"], objective=score(result["selected"]),
                                  curve=result["curve"], best_step=result["best_step"]))
            print(f"N={n} {metric} datamask: {result['wall_s']:.2f} s", flush=True)
    # final fits, over every size each greedy (and the learner) finished
    fits = {m: {label: fit_of(runs, m, label) for label in [g[0] for g in GREEDIES[m]]
                + ["datamask"]} for m in args.metrics}
    comparisons = compare(runs)
    return TimingResult(experiment="timing", machine=Machine(**machine(args.device)),
                        config=vars(args), paper=PAPER, runs=runs, fits=fits,
                        comparisons=comparisons, crossover=crossover(comparisons, args.metrics))


def compare(runs: list[TimingRun]) -> list[Comparison]:
    """Learner against each greedy at the same (metric, N)."""
    out = []
    for learner in (r for r in runs if r.role == "learner"):
        for greedy in runs:
            if greedy.role == "learner" or (greedy.metric, greedy.n) != (learner.metric,
                                                                         learner.n):
                continue
            out.append(comparison(learner, greedy))
    return out


def comparison(learner: TimingRun, greedy: TimingRun) -> Comparison:
    """The learner against one greedy (ratios None where the greedy has no objective)."""
    g, l_, rnd = greedy.objective, learner.objective, learner.random_objective
    reached = [p.elapsed_s for p in learner.curve or [] if g is not None and p.objective >= g]
    unknown = g is None or l_ is None
    return Comparison(
        metric=learner.metric, n=learner.n, greedy=greedy.label, greedy_role=greedy.role,
        greedy_status=greedy.status, time_ratio=learner.wall_s / greedy.wall_s,
        objective_ratio=None if unknown or g == 0 else l_ / g,
        gain_ratio=None if unknown or g == rnd else (l_ - rnd) / (g - rnd),
        time_to_greedy_objective_s=reached[0] if reached else None)


def steps_taken(learner: TimingRun) -> int:
    """The steps a learner run took: its curve ends at the last step."""
    return learner.curve[-1].step + 1


def written_at(learner: TimingRun) -> str:
    """", written at step S" where the run recorded the step its selection came from."""
    return "" if learner.best_step is None else f", written at step {learner.best_step}"


def learner_steps(learner: TimingRun) -> str:
    """How a learner run went: its steps, or its blocks and the slowest, and where its selection
    was read."""
    if learner.block_s:
        return (f"{len(learner.block_s)} blocks, the slowest {max(learner.block_s):.3g} s"
                + (f", plan {learner.plan_s:.3g} s" if learner.plan_s is not None else "")
                + written_at(learner))
    return f"{steps_taken(learner)} steps{written_at(learner)}"


def crossover(comparisons: list[Comparison], metrics) -> dict:
    """Smallest N from which (at every larger N too) the learner takes less time than the fast
    greedy; null when it never does at the sizes run."""
    result = {}
    for metric in metrics:
        rows = sorted((c for c in comparisons if c.metric == metric and c.greedy_role == "fast"),
                      key=lambda c: c.n)
        start = start_of_last_run(rows, lambda c: c.time_ratio < 1)
        result[metric] = start.n if start else None
    return result


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def steps_text(cfg: dict) -> str:
    """The learner's step budget as the run had it: fixed, or cut short by a stopping rule
    (datamask select's on the read-off, --stop_every, or the older --patience); its wall time
    then includes the rule's checks."""
    rule = stopping_rule(cfg)
    if not rule:
        return f"{cfg['steps']} steps"
    return (f"at most {cfg['steps']} steps, stopped by the rule of {rule} (the learner's steps "
            f"are in brackets; its wall time counts the rule's checks)")


def stopping_rule(cfg: dict) -> str | None:
    """The flag of the stopping rule a timing run's learner ran under, or None (fixed steps)."""
    if cfg.get("stop_every"):
        return f"--stop_every {cfg['stop_every']}"
    return f"--patience {cfg['patience']}" if cfg.get("patience") else None


def markdown(results: TimingResult) -> str:
    cfg, paper = results.config, results.paper
    lines = [
        "# Timing: greedy baselines vs DATAMASK", "",
        results.machine.line(), "",
        f"Synthetic rows ({cfg['dim']}-d, {cfg['clusters']} clusters, seed {cfg['seed']}), "
        f"select_ratio {cfg['ratio']:g}; learner: lamb 0 (the diversity metric alone), "
        f"G {cfg['n_rollout']}, {steps_text(cfg)}, partial {cfg['partial']:g}"
        + (f", cover_sample {cfg['cover_sample']:g}" if cfg.get("cover_sample") else "")
        + (f", probes {cfg['probes']}" if cfg.get("probes") else "")
        + (f", init {cfg['init']}" if cfg.get("init", "auto") != "auto" else "")
        # runs from before the flag existed took the stochastic start
        + (f", start optimizer {cfg.get('start_optimizer', 'stochastic')}"
           if cfg.get("start_optimizer", "stochastic") != START_OPTIMIZER.default else "")
        + f", lr {lr_of(cfg)}; budget {cfg['budget_s']:g} s per greedy run" + "".join(
            f"; {m} run up to N = {n:,} only" for m, n in cfg["max_n"].items()) + "".join(
            f"; {m}'s learner run up to N = {n:,} only (extrapolated past it)"
            for m, n in cfg.get("learner_max_n", {}).items()) + "".join(
            f"; past N = {n:,}, {m}'s learner run in independent "
            f"{cfg.get('block_plan', 'random')} blocks of at most {n:,} rows, one after the "
            "other (its time their sum and the plan's)"
            for m, n in cfg.get("learner_blocks", {}).items())
        + (f"; past N = {cfg['score_rows']:,}, Facility scored on a seeded sample of "
           f"{cfg['score_rows']:,} covered rows (unbiased)" if "score_rows" in cfg else "")
        + ". Objective: the metric's set function on all N rows (higher is better). gain ratio = "
        "(learner - random) / (greedy - random).", "",
        f"Paper: DiSF, N = {paper.n:,}, {paper.device}: greedy 78 h, DATAMASK ~50 min, time "
        f"ratio {paper.time_ratio:.2%}. Differences here: "
        + ("a GPU, " if results.machine.gpu else "a CPU shared with other work, ")
        + "synthetic data, fewer learner steps, and smaller N where a greedy exceeds its budget "
        "(extrapolated).", ""]
    for metric in results.metrics:
        fits = results.fits[metric]
        lines += [f"## {metric}", "",
                  "| N | method | wall s | objective | learner / greedy time | objective ratio | "
                  "gain ratio | learner s to greedy's objective |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for run in (r for r in results.runs if r.metric == metric):
            wall, fit = f"{run.wall_s:.3g}", fits.get(run.label)
            if run.status == "extrapolated":
                wall = f"~{wall} (extrapolated, N^{fit.exponent:.2f})"
            elif run.status == "killed":
                wall = (f"~{wall} (killed at {cfg['budget_s']:g} s; extrapolated, "
                        f"N^{fit.exponent:.2f})" if fit else f"> {wall} (killed, no fit)")
            obj = "-" if run.objective is None else f"{run.objective:.5g}"
            comp = next((c for c in results.comparisons if c.metric == metric
                         and c.n == run.n and c.greedy == run.label), None)
            cells = ["", "", "", ""]
            if comp:
                cells = [f"{comp.time_ratio:.3g}", number(comp.objective_ratio),
                         number(comp.gain_ratio),
                         "not reached" if comp.time_to_greedy_objective_s is None
                         else f"{comp.time_to_greedy_objective_s:.3g}"]
            label = run.label
            if run.role == "learner" and (stopping_rule(cfg) and run.curve or run.block_s):
                label += f" ({learner_steps(run)})"
            lines.append(f"| {run.n} | {label} | {wall} | {obj} | " + " | ".join(cells)
                         + " |")
        fitted = [f"{label}: t ~ N^{fit.exponent:.2f} (sizes {fit.sizes})"
                  for label, fit in fits.items() if fit]
        cross = results.crossover[metric]
        lines += ["", "Fitted power laws: " + ("; ".join(fitted) or "none (fewer than 2 sizes)")
                  + ".", "", "Crossover (learner faster than the fast greedy from this N on): "
                  + (f"N = {cross}" if cross else "not within the sizes run") + ".", ""]
    return "\n".join(lines)


main = experiment_main(parse, run, markdown)


if __name__ == "__main__":
    main()

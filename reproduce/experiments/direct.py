"""`make ablation-direct`: is the policy gradient needed at all?

    python -m reproduce.experiments.direct [--metrics DiSF Facility Pair_simi] [--seeds 0 1 2]
        [--n 2000] [--dim 384] [--clusters 64] [--ratio 0.1] [--lamb 0.5] [--steps 200]
        [--output runs/experiments]

On the same synthetic rows, for each diversity metric: the DATAMASK learner optimising
joint_<metric> at lamb (one run per seed), the joint greedy on that same objective, and one-shot
selectors that set every row's score directly and take its top k, without optimising anything:
knn-density (quality z-score minus local-density z-score), cluster-quota (quality top-k inside
k-means clusters with size-proportional quotas), mmr (maximal marginal relevance of quality
against cosine redundancy), with quality-topk and random as anchors. Every selection is scored
by the SAME `datamask.report.Report(data, ratio, lamb)` on all N rows (on that scale a random
selection scores ~0, higher is better). The one-shot selectors do not depend on the metric: each
runs once (once per seed where it takes one: cluster-quota's k-means, random) and that one
selection is scored under every metric. Every method is run once on ~200 rows off the clock
first, so no timing pays for torch's or faiss's first-call start-up.

`ablation-direct.json` schema (records.DirectResult):
- experiment ("ablation-direct"), machine, config (the flags)
- methods: the method names, in table order (datamask, joint-greedy, then the one-shot ones)
- runs: one per (method, metric, seed): method, metric, seed (null for a method that takes
  none), params (the selector's or learner's options), wall_s (selection time only; a one-shot
  selection's wall_s is repeated under every metric it is scored for), objective (joint_<metric>
  at lamb), final (Report: quality, each diversity metric, joint_<metric> for each)
- summary: one per (metric, method): metric, method, runs, objective_mean, objective_std,
  wall_s_mean, wall_s_std, quality_mean and each diversity metric's mean (<name>_mean),
  gap_to_learner (objective_mean - the learner's objective_mean; negative = below the learner),
  share_of_learner (objective_mean / the learner's; null when the learner's is not above 0)
- best: {metric: the method with the highest objective_mean}
"""

from __future__ import annotations

import numpy as np

from datamask.objectives import DIVERSITY
from datamask.report import Report
from datamask.examples.synthetic import synthetic_dataset
from datamask.shared import machine

from .common import (add_seeded_rows, experiment_main, experiment_parser, greedy_run,
                     learner_params, learner_run, lr_of, warm_up_learner)
from .records import (DirectResult, DirectRun, DirectSummary, Machine, Outcome, best_of,
                      of_metric)

LEARNER, GREEDY = "datamask", "joint-greedy"
ONE_SHOT = ("knn-density", "cluster-quota", "mmr", "quality-topk", "random")
SEEDED = ("cluster-quota", "random")  # one-shot selectors whose result depends on a seed


def build_parser():
    parser = experiment_parser(__doc__, steps=200)
    add_seeded_rows(parser)
    parser.add_argument("--neighbors", type=int, default=10, help="knn-density")
    parser.add_argument("--penalty", type=float, default=1.0, help="knn-density")
    parser.add_argument("--quota_clusters", type=int, default=64,
                        help="cluster-quota: k-means clusters (capped at N)")
    parser.add_argument("--trade_off", type=float, default=0.5, help="mmr")
    return parser


def parse(argv):
    return build_parser().parse_args(argv)


def one_shot_params(name: str, args, seed: int | None) -> dict:
    params = {"knn-density": {"neighbors": args.neighbors, "penalty": args.penalty},
              "cluster-quota": {"n_clusters": args.quota_clusters, "seed": seed},
              "mmr": {"trade_off": args.trade_off, "device": "cpu"},
              "quality-topk": {}, "random": {"seed": seed}}
    return params[name]


def warm_up(warm, args) -> None:
    """Every method once on a few rows, off the clock: no timing pays for torch's or faiss's
    first-call start-up (the first learner run would otherwise look several times slower)."""
    warm_up_learner(args.dim, args.ratio, args.metrics[:1], args.data_seed, lamb=args.lamb,
                    n_rollout=min(8, args.n_rollout), partial=args.partial)
    for metric in args.metrics:
        greedy_run(warm, args.ratio, GREEDY, algorithm=metric, lamb=args.lamb, device="cpu")
    for name in ONE_SHOT:
        greedy_run(warm, args.ratio, name, **one_shot_params(name, args, args.data_seed))


def run(args) -> DirectResult:
    data = synthetic_dataset(args.n, dim=args.dim, n_clusters=args.clusters, seed=args.data_seed)
    report = Report(data, args.ratio, args.lamb, seed=args.data_seed)
    warm_rows = min(args.n, max(200, int(np.ceil(2 / args.ratio))))  # a budget of at least 2
    warm = synthetic_dataset(warm_rows, dim=args.dim, n_clusters=8, seed=args.data_seed)
    warm_up(warm, args)
    runs = []

    def record(method, metric, seed, params, wall_s, final):
        runs.append(DirectRun(method=method, metric=metric, seed=seed, params=params,
                              wall_s=wall_s, objective=final[f"joint_{metric}"], final=final))
        print(f"{metric} {method} seed {seed}: {final[f'joint_{metric}']:.3f} in {wall_s:.3g} s",
              flush=True)

    for metric in args.metrics:
        key = f"joint_{metric}"
        params = learner_params(args, args.lamb, algorithm=metric)
        for seed in args.seeds:
            # eval_points 1: the curve is not reported here, only the final selection
            result = learner_run(data, args.ratio, lambda m: report(m)[key], 1, seed=seed,
                                 **params)
            record(LEARNER, metric, seed, dict(params, seed=seed), result["wall_s"],
                   report(result["selected"]))
        # seed = data_seed: the greedy then fits the very term scale the Report fitted
        params = {"algorithm": metric, "lamb": args.lamb, "seed": args.data_seed, "device": "cpu"}
        result = greedy_run(data, args.ratio, GREEDY, **params)
        record(GREEDY, metric, args.data_seed, params, result["wall_s"],
               report(result["selected"]))

    for name in ONE_SHOT:
        for seed in (args.seeds if name in SEEDED else [None]):
            params = one_shot_params(name, args, seed)
            result = greedy_run(data, args.ratio, name, **params)
            final = report(result["selected"])
            for metric in args.metrics:
                record(name, metric, seed, params, result["wall_s"], final)

    methods = [LEARNER, GREEDY, *ONE_SHOT]
    summary = summarise(runs, args.metrics, methods)
    return DirectResult(experiment="ablation-direct", machine=Machine(**machine("cpu")),
                        config=vars(args), methods=methods, runs=runs, summary=summary,
                        best={m: best_of(of_metric(summary, m)).method for m in args.metrics})


def summarise(runs: list[DirectRun], metrics, methods) -> list[DirectSummary]:
    out = []
    for metric in metrics:
        groups = {method: [r for r in of_metric(runs, metric) if r.method == method]
                  for method in methods}
        stats = {method: Outcome.stats(group) for method, group in groups.items()}
        learner = stats[LEARNER]["objective_mean"]
        for method, group in groups.items():
            mine = stats[method]["objective_mean"]
            out.append(DirectSummary(
                metric=metric, method=method, runs=len(group),
                wall_s_std=float(np.std([r.wall_s for r in group])),
                gap_to_learner=mine - learner,
                share_of_learner=mine / learner if learner > 0 else None, **stats[method]))
    return out


def markdown(results: DirectResult) -> str:
    cfg = results.config
    diversity_cols = list(DIVERSITY)
    lines = ["# Ablation: direct per-row scores vs the policy gradient", "",
             results.machine.line(), "",
             f"Synthetic rows (N = {cfg['n']}, {cfg['dim']}-d, {cfg['clusters']} clusters), "
             f"select_ratio {cfg['ratio']:g}, lamb {cfg['lamb']:g}; learner: {cfg['steps']} steps, "
             f"G {cfg['n_rollout']}, partial {cfg['partial']:g}, lr {lr_of(cfg)}, seeds "
             f"{cfg['seeds']}; one-shot: "
             f"knn-density (neighbors {cfg['neighbors']}, penalty {cfg['penalty']:g}), "
             f"cluster-quota ({cfg['quota_clusters']} k-means clusters, seeds {cfg['seeds']}), "
             f"mmr (trade_off {cfg['trade_off']:g}), random (seeds {cfg['seeds']}). Objective: "
             "the joint objective at lamb on all N rows, same Report for every method (random "
             "~ 0, higher is better); mean +- std over runs. Gap: objective minus the learner's. "
             "The one-shot selections do not depend on the metric: the same selection is scored "
             "in every table.", ""]
    for metric in results.metrics:
        lines += [f"## joint_{metric}", "",
                  "| method | runs | wall s | objective | gap to learner | quality | "
                  + " | ".join(diversity_cols) + " |",
                  "|---|---:|---:|---:|---:|---:|" + "---:|" * len(diversity_cols)]
        for s in of_metric(results.summary, metric):
            gap = "-" if s.method == LEARNER else f"{s.gap_to_learner:+.3f}"
            lines.append(f"| {s.method} | {s.runs} | {s.wall_s_mean:.3g} | "
                         f"{s.objective_mean:.3f} +- {s.objective_std:.3f} | {gap} | "
                         f"{s.means['quality']:.3f} | "
                         + " | ".join(f"{s.means[m]:.4g}" for m in diversity_cols) + " |")
        lines.append("")
    lines += ["Best method (highest mean objective): "
              + "; ".join(f"{m}: {v}" for m, v in results.best.items()) + ".", ""]
    return "\n".join(lines)


main = experiment_main(parse, run, markdown)


if __name__ == "__main__":
    main()

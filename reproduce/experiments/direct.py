"""`make ablation-direct`: is the policy gradient needed at all? (issue #7)

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

`ablation-direct.json` schema:
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

import argparse

import numpy as np

from datamask.objectives import DIVERSITY
from datamask.report import Report
from datamask.synthetic import synthetic_dataset

from .common import (add_lr_argument, greedy_run, learner_run, lr_of, lr_params, machine,
                     machine_line, warm_up_learner, write_outputs)

LEARNER, GREEDY = "datamask", "joint-greedy"
ONE_SHOT = ("knn-density", "cluster-quota", "mmr", "quality-topk", "random")
SEEDED = ("cluster-quota", "random")  # one-shot selectors whose result depends on a seed


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--metrics", nargs="+", default=list(DIVERSITY), choices=list(DIVERSITY))
    parser.add_argument("--n", type=int, default=2000, help="rows")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=64, help="clusters of the synthetic rows")
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--ratio", type=float, default=0.1, help="select_ratio")
    parser.add_argument("--lamb", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=200, help="learner n_epochs")
    parser.add_argument("--n_rollout", type=int, default=128)
    parser.add_argument("--partial", type=float, default=0.1)
    parser.add_argument("--neighbors", type=int, default=10, help="knn-density")
    parser.add_argument("--penalty", type=float, default=1.0, help="knn-density")
    parser.add_argument("--quota_clusters", type=int, default=64,
                        help="cluster-quota: k-means clusters (capped at N)")
    parser.add_argument("--trade_off", type=float, default=0.5, help="mmr")
    add_lr_argument(parser)
    parser.add_argument("--output", default="runs/experiments")
    return parser.parse_args(argv)


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


def run(args) -> dict:
    data = synthetic_dataset(args.n, dim=args.dim, n_clusters=args.clusters, seed=args.data_seed)
    report = Report(data, args.ratio, args.lamb, seed=args.data_seed)
    warm_rows = min(args.n, max(200, int(np.ceil(2 / args.ratio))))  # a budget of at least 2
    warm = synthetic_dataset(warm_rows, dim=args.dim, n_clusters=8, seed=args.data_seed)
    warm_up(warm, args)
    runs = []

    def record(method, metric, seed, params, wall_s, final):
        runs.append({"method": method, "metric": metric, "seed": seed, "params": params,
                     "wall_s": wall_s, "objective": final[f"joint_{metric}"], "final": final})
        print(f"{metric} {method} seed {seed}: {final[f'joint_{metric}']:.3f} in {wall_s:.3g} s",
              flush=True)

    for metric in args.metrics:
        key = f"joint_{metric}"
        params = {"algorithm": metric, "lamb": args.lamb, "n_rollout": args.n_rollout,
                  "n_epochs": args.steps, "partial": args.partial, "device": "cpu",
                  **lr_params(args.lr)}
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
    best = {m: max((s for s in summary if s["metric"] == m),
                   key=lambda s: s["objective_mean"])["method"] for m in args.metrics}
    return {"experiment": "ablation-direct", "machine": machine("cpu"), "config": vars(args),
            "methods": methods, "runs": runs, "summary": summary, "best": best}


def summarise(runs: list[dict], metrics, methods) -> list[dict]:
    out = []
    for metric in metrics:
        rows = []
        for method in methods:
            group = [r for r in runs if r["metric"] == metric and r["method"] == method]
            objective = np.array([r["objective"] for r in group])
            wall = np.array([r["wall_s"] for r in group])
            row = {"metric": metric, "method": method, "runs": len(group),
                   "objective_mean": float(objective.mean()),
                   "objective_std": float(objective.std()),
                   "wall_s_mean": float(wall.mean()), "wall_s_std": float(wall.std())}
            for name in ["quality", *DIVERSITY]:
                row[f"{name}_mean"] = float(np.mean([r["final"][name] for r in group]))
            rows.append(row)
        learner = next(r for r in rows if r["method"] == LEARNER)["objective_mean"]
        for row in rows:
            row["gap_to_learner"] = row["objective_mean"] - learner
            row["share_of_learner"] = row["objective_mean"] / learner if learner > 0 else None
        out += rows
    return out


def markdown(results: dict) -> str:
    cfg = results["config"]
    diversity_cols = list(DIVERSITY)
    lines = ["# Ablation: direct per-row scores vs the policy gradient", "",
             machine_line(results["machine"]), "",
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
    for metric in cfg["metrics"]:
        lines += [f"## joint_{metric}", "",
                  "| method | runs | wall s | objective | gap to learner | quality | "
                  + " | ".join(diversity_cols) + " |",
                  "|---|---:|---:|---:|---:|---:|" + "---:|" * len(diversity_cols)]
        for s in results["summary"]:
            if s["metric"] != metric:
                continue
            gap = "-" if s["method"] == LEARNER else f"{s['gap_to_learner']:+.3f}"
            lines.append(f"| {s['method']} | {s['runs']} | {s['wall_s_mean']:.3g} | "
                         f"{s['objective_mean']:.3f} +- {s['objective_std']:.3f} | {gap} | "
                         f"{s['quality_mean']:.3f} | "
                         + " | ".join(f"{s[f'{m}_mean']:.4g}" for m in diversity_cols) + " |")
        lines.append("")
    lines += ["Best method (highest mean objective): "
              + "; ".join(f"{m}: {v}" for m, v in results["best"].items()) + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    results = run(args)
    write_outputs(args.output, "ablation-direct", results, markdown(results))
    return results


if __name__ == "__main__":
    main()

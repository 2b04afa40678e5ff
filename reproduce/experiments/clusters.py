"""`make clusters`: how many of the synthetic rows' clusters does `datamask select` cover?

    python -m reproduce.experiments.clusters [--metrics DiSF] [--lambs 0 0.5]
        [--seeds 0 1 ... 9] [--n 20000] [--dim 384] [--clusters 64] [--ratio 0.1]
        [--output reproduce/results/clusters]

A diversity score can rise while a selection covers less of the data: DiSF's (minus the squared
correlations between feature dimensions) is highest for rows that differ only by isotropic noise,
as the rows of one synthetic cluster do. The synthetic rows know their clusters, so here each
`datamask select` run at its defaults (one per metric, lamb and seed; the seed drives its greedy
start's samples and its policy's draws) is scored by the metric on all rows and by what it covers:
the clusters holding at least one selected row and the largest cluster's share of the selection.
Uniformly random selections, one per seed, are the yardstick.

`clusters.json` schema (records.ClustersResult): experiment ("clusters"), machine, config (the
flags), runs (one ClusterRun per metric, lamb and seed: wall_s, the steps run, the step whose
selection was written, the metric's value `diversity`, mean `quality`, `clusters`,
`largest_share`), random (the same columns for one uniformly random selection per seed, scored
by each metric; lamb 0, no steps)."""

from __future__ import annotations

import argparse

import numpy as np

from datamask.examples.synthetic import synthetic_clusters
from datamask.learner import LearnerConfig, MaskLearner
from datamask.objectives import DIVERSITY
from datamask.selectors import make_selector
from datamask.shared import machine

from .common import experiment_main, metric_scorer
from .records import ClusterRun, ClustersResult, Machine


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", nargs="+", default=["DiSF"], choices=list(DIVERSITY))
    parser.add_argument("--lambs", type=float, nargs="+", default=[0.0, 0.5],
                        help="select's --lamb, each in its own runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--n", type=int, default=20_000, help="rows")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=64, help="clusters of the synthetic rows")
    parser.add_argument("--ratio", type=float, default=0.1, help="select_ratio")
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--output", default="runs/experiments/clusters")
    return parser


def parse(argv):
    return build_parser().parse_args(argv)


def covered(cluster: np.ndarray, selected: np.ndarray, n_clusters: int) -> tuple[int, float]:
    """Clusters holding at least one selected row, and the largest one's share of the selection."""
    counts = np.bincount(cluster[selected], minlength=n_clusters)
    return int((counts > 0).sum()), float(counts.max() / counts.sum())


def run(args) -> ClustersResult:
    data, cluster = synthetic_clusters(args.n, dim=args.dim, n_clusters=args.clusters,
                                       seed=args.data_seed)
    scorers = {metric: metric_scorer(data, metric, "cpu") for metric in args.metrics}

    def measured(metric, lamb, seed, selected, wall_s=0.0, steps=0, written=None) -> ClusterRun:
        clusters, largest = covered(cluster, selected, args.clusters)
        return ClusterRun(metric=metric, lamb=lamb, seed=seed, wall_s=wall_s, steps=steps,
                          written_step=written, diversity=scorers[metric](selected),
                          quality=float(data.quality[selected].mean()), clusters=clusters,
                          largest_share=largest)

    random = []
    for seed in args.seeds:
        selected = make_selector("random", seed=seed).select(data, args.ratio).selected
        random += [measured(metric, 0.0, seed, selected) for metric in args.metrics]
    runs = []
    for metric in args.metrics:
        for lamb in args.lambs:
            for seed in args.seeds:
                config = LearnerConfig(select_ratio=args.ratio, algorithm=metric, lamb=lamb,
                                       seed=seed, device="cpu")
                result = MaskLearner(config).fit(data, progress=False)
                runs.append(measured(metric, lamb, seed, result.selected, result.wall_time_s,
                                     result.steps_taken, result.written_step))
                last = runs[-1]
                print(f"{metric} lamb {lamb:g} seed {seed}: {metric} {last.diversity:.5f}, "
                      f"{last.clusters} clusters, largest {last.largest_share:.3f}", flush=True)
    return ClustersResult(experiment="clusters", machine=Machine(**machine("cpu")),
                          config=vars(args), runs=runs, random=random)


def markdown(result: ClustersResult) -> str:
    c = result.config
    lines = [f"# Clusters a selection covers: `datamask select` at its defaults, {c['n']:,} "
             f"synthetic rows x {c['dim']}-d in {c['clusters']} clusters, select_ratio "
             f"{c['ratio']:g}", "",
             f"Machine: {result.machine.cpu}, torch {result.machine.torch}, cpu. "
             "`diversity`: the metric on all rows (higher is better); `clusters`: those holding "
             "a selected row; `largest`: the largest cluster's share of the selection.", "",
             "| metric | lamb | selections | diversity min / median / max | clusters min / median "
             "/ max | in one cluster | mean quality |", "|---|---:|---:|---|---|---:|---:|"]
    selects = [(m, f"{lamb:g}", [r for r in result.runs if (r.metric, r.lamb) == (m, lamb)])
               for m in c["metrics"] for lamb in c["lambs"]]
    randoms = [(f"random ({m})", "", [r for r in result.random if r.metric == m])
               for m in c["metrics"]]
    for label, lamb, runs in selects + randoms:
        if not runs:
            continue
        div = np.array([r.diversity for r in runs])
        clusters = np.array([r.clusters for r in runs])
        lines.append(f"| {label} | {lamb} | {len(runs)} | "
                     f"{div.min():.4g} / {np.median(div):.4g} / {div.max():.4g} | "
                     f"{clusters.min()} / {np.median(clusters):g} / {clusters.max()} | "
                     f"{int((clusters == 1).sum())} | "
                     f"{np.mean([r.quality for r in runs]):.3f} |")
    lines += ["", "## Each run", "", "| metric | lamb | seed | steps (written at) | diversity | "
              "clusters | largest | quality | wall s |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in result.runs:
        lines.append(f"| {r.metric} | {r.lamb:g} | {r.seed} | {r.steps} ({r.written_step}) | "
                     f"{r.diversity:.5f} | {r.clusters} | {r.largest_share:.3f} | "
                     f"{r.quality:.3f} | {r.wall_s:.1f} |")
    return "\n".join(lines) + "\n"


main = experiment_main(parse, run, markdown)

if __name__ == "__main__":
    main()

"""Benchmark of the greedy baselines: wall time, objective, facility greedy against apricot.

    python -m reproduce.bench.baselines [--sizes 2000 5000 20000] [--ratio 0.015625] [--slow_rows 5000]

For each N (synthetic clustered rows, 384-d) it runs every greedy baseline at the budget
round(ratio * N) (default 1/64, DiSF's reference rate: 16 of every 1024 rows) and prints its
selector wall time and the objective it optimises, as `datamask.report.Report` scores it on all N
rows, beside a random selection's. Joint-greedy times include fitting the term scale, as the
learner's do. The quadratic-per-step references (disf-greedy's from-scratch recompute, the naive
facility greedy) run only up to --slow_rows rows. A second table times the facility greedy against
apricot's lazy FacilityLocationSelection on the same precomputed clipped-cosine kernel (apricot's
numba compilation is done beforehand, off the clock; best of --repeats alternating runs each) and
compares their objectives; "same picks" compares the pick order, which differs only where gains
tie to rounding.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from datamask.objectives import GroundSet, clipped_cosine
from datamask.report import Report
from datamask.selectors import make_selector
from datamask.examples.synthetic import synthetic_dataset

from baselines.facility_greedy import facility_greedy, kernel_rows

# (selector, options, the Report metric it optimises, quadratic per step: only up to --slow_rows)
RUNS = [
    ("pair-greedy", {}, "Pair_simi", False),
    ("facility-greedy", {"optimizer": "lazy"}, "Facility", False),
    ("facility-greedy", {"optimizer": "naive"}, "Facility", True),
    ("disf-greedy", {}, "DiSF", True),
    ("disf-greedy-fast", {"mode": "batched"}, "DiSF", False),
    ("disf-greedy-fast", {"mode": "global"}, "DiSF", False),
    ("joint-greedy", {"algorithm": "Pair_simi"}, "joint_Pair_simi", False),
    ("joint-greedy", {"algorithm": "Facility"}, "joint_Facility", False),
    ("joint-greedy", {"algorithm": "DiSF"}, "joint_DiSF", False),
]


def coverage(kernel: torch.Tensor, picks) -> float:
    """Facility objective (sum over rows of the best similarity to a pick) on a given kernel."""
    return kernel[:, torch.as_tensor(np.asarray(picks))].amax(dim=1).double().sum().item()


def time_against_apricot(ground: GroundSet, k: int, repeats: int) -> dict:
    """Best of `repeats` alternating runs of each, so that both get the same warm machine."""
    from apricot import FacilityLocationSelection

    kernel = clipped_cosine(ground.unit, ground.unit)
    ours_s, theirs_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        ours, _ = facility_greedy(kernel_rows(kernel), len(ground), len(ground), k, "lazy")
        ours_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs = FacilityLocationSelection(k, metric="precomputed", optimizer="lazy").fit(
            kernel.numpy()).ranking
        theirs_s.append(time.perf_counter() - start)
    return {"ours_s": min(ours_s), "apricot_s": min(theirs_s), "ours": coverage(kernel, ours),
            "apricot": coverage(kernel, theirs), "same_picks": list(theirs) == ours}


def warm_apricot() -> None:
    """Compile apricot's numba kernels once, so that no timing below includes compilation."""
    from apricot import FacilityLocationSelection

    FacilityLocationSelection(2, metric="precomputed", optimizer="lazy").fit(np.eye(4))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 20000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--ratio", type=float, default=1 / 64)
    parser.add_argument("--lamb", type=float, default=0.5, help="joint-greedy's lamb")
    parser.add_argument("--slow_rows", type=int, default=5000,
                        help="largest N for disf-greedy and the naive facility greedy")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each facility greedy against apricot; the best is kept")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    warm_apricot()

    rows, versus = [], []
    for n in args.sizes:
        data = synthetic_dataset(n, dim=args.dim, seed=args.seed)
        report = Report(data, args.ratio, args.lamb, seed=args.seed)
        random_value = report(make_selector("random", seed=args.seed).select(data, args.ratio)
                              .selected)
        for name, options, metric, slow in RUNS:
            label = f"{name} {' '.join(f'{k}={v}' for k, v in options.items())}".strip()
            if slow and n > args.slow_rows:
                rows.append((n, label, metric, None, None, random_value[metric]))
                continue
            params = dict(options, device="cpu", seed=args.seed)
            if name == "joint-greedy":
                params["lamb"] = args.lamb
            selection = make_selector(name, **params).select(data, args.ratio)
            value = report(selection.selected)[metric]
            rows.append((n, label, metric, selection.wall_time_s, value, random_value[metric]))
            print(f"  N={n} {label}: {selection.wall_time_s:.2f} s", flush=True)
        ground = GroundSet.from_arrays(data.features, data.quality)
        versus.append((n, report.k, time_against_apricot(ground, report.k, args.repeats)))

    print(f"\n### Greedy baselines ({args.dim}-d synthetic rows, k = round({args.ratio:g} N), "
          f"lamb = {args.lamb:g}, {torch.get_num_threads()} threads)\n")
    print("| N | baseline | objective | wall s | value | random's value |")
    print("|---:|---|---|---:|---:|---:|")
    for n, label, metric, wall, value, random_v in rows:
        if wall is None:
            print(f"| {n} | {label} | {metric} | skipped (> --slow_rows) | | {random_v:.5g} |")
        else:
            print(f"| {n} | {label} | {metric} | {wall:.2f} | {value:.5g} | {random_v:.5g} |")
    print("\n### Lazy facility greedy vs apricot 0.6 lazy FacilityLocationSelection "
          f"(same precomputed kernel, greedy time only, best of {args.repeats})\n")
    print("| N | k | ours s | apricot s | speed-up | objective ours | objective apricot | "
          "same picks |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for n, k, v in versus:
        print(f"| {n} | {k} | {v['ours_s']:.2f} | {v['apricot_s']:.2f} | "
              f"{v['apricot_s'] / v['ours_s']:.1f}x | {v['ours']:.6g} | {v['apricot']:.6g} | "
              f"{v['same_picks']} |")


if __name__ == "__main__":
    main()

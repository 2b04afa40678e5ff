"""`make bench`: how close the objective evaluation runs to the machine's matrix-multiply speed.

Measured in one process, side by side: the fp32 GEMM rate of this machine, then for each metric
the learner's time per step and the useful GFLOP/s of one batched objective evaluation (G masks
on a partial subset). Useful FLOPs count only the matrix products the metric needs (DiSF: the
(G, d, d) scatter, 2 G k d^2; Facility: the similarities of every ground row to every selected
row, 2 G n k d, or to every ground row once, 2 n^2 d, when the masks hold more rows than that and
share them; Pair_simi: the G sums of k vectors, G k d). Times are medians of repeats; on a
shared machine read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from datamask.learner import LearnerConfig, MaskLearner
from datamask.objectives import DIVERSITY, GroundSet, diversity, random_masks
from datamask.shared import resolve_device
from datamask.examples.synthetic import synthetic_dataset


def _median_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up: allocator, kernels, caches
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gemm_gflops(device: torch.device, size: int = 2048, repeats: int = 5) -> float:
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, generator=gen, device=device)
    b = torch.randn(size, size, generator=gen, device=device)
    return 2 * size**3 / _median_seconds(lambda: a @ b, repeats, device) / 1e9


def useful_flops(metric: str, n_masks: int, n: int, k: int, d: int) -> float:
    return {"DiSF": 2 * n_masks * k * d * d, "Facility": 2 * min(n_masks * k, n) * n * d,
            "Pair_simi": n_masks * k * d}[metric]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--n_rollout", type=int, default=128)
    parser.add_argument("--subset", type=int, default=5000, help="rows per partial step")
    parser.add_argument("--select_ratio", type=float, default=0.1)
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 768])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="learner steps timed per metric")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    print(f"device {device} ({name or platform.machine()}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    gemm = gemm_gflops(device)
    print(f"fp32 GEMM (2048^3): {gemm:.1f} GFLOP/s\n")

    n, k, g = args.subset, round(args.select_ratio * args.subset), args.n_rollout
    print(f"G = {g} masks of k = {k} rows on a subset of n = {n} rows\n")
    print("| d | metric | eval ms | useful GFLOP/s | % of GEMM | learner step ms |")
    print("|---|---|---|---|---|---|")
    for d in args.dims:
        # A dataset 1/partial times the subset, so each learner step works on exactly n rows.
        data = synthetic_dataset(n * 10, dim=d, n_clusters=64, seed=0)
        ground = GroundSet.from_arrays(data.features[:n], data.quality[:n], device)
        gen = torch.Generator(device=device).manual_seed(0)
        idx = random_masks(n, k, g, gen, device)
        for metric in DIVERSITY:
            function = diversity(metric)
            seconds = _median_seconds(lambda: function.batch(ground, idx), args.repeats, device)
            rate = useful_flops(metric, g, n, k, d) / seconds / 1e9
            config = LearnerConfig(algorithm=metric, n_epochs=args.steps, partial=0.1,
                                   select_ratio=args.select_ratio, n_rollout=g, device=str(device))
            history = MaskLearner(config).fit(data, progress=False).history
            step_times = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(history, history[1:])]
            print(f"| {d} | {metric} | {seconds * 1e3:.1f} | {rate:.1f} | {100 * rate / gemm:.0f}% "
                  f"| {statistics.median(step_times) * 1e3:.1f} |")


if __name__ == "__main__":
    main()

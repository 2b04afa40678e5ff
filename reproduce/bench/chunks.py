"""`make bench-chunks`: each objective's batched evaluation at CPU chunk caps, side by side.

An evaluation scores its G masks chunk by chunk, and each chunk gathers or computes fresh tensors.
The chunk's size decides how large those allocations are: on CPU, glibc serves allocations over
its mmap threshold (at most 32 MiB) with fresh pages from the kernel, faulted in and zeroed on
every evaluation. This prints the time of one learner step's evaluation (G masks on a partial
step's rows, a tenth of them selected) and its page faults under each cap on a chunk
(`datamask.objectives.base.CPU_CHUNK_BYTES`; 256 MiB is the functions' whole memory budget, and
was their chunk before the cap) for DiSF (exact and with probes) and Facility, at the step shapes
of N rows with `partial` 0.1. (Pair_simi does not take the cap: with it, its one-GEMM chunks ran
0.80x as fast at N = 1M's step in the run that decided this; reproduce/results/bench.md has the table.)
Each measurement runs in a fresh process (the allocator's state would carry over), the caps
interleaved round by round; medians over rounds. On a shared machine read the ratios, not the
absolute times.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from datamask.objectives import DIVERSITY, GroundSet, base, random_masks, random_probes

STEP_ROWS = {"DiSF": [10_000, 100_000],  # a step's rows at N = 100k and 1M
             "Facility": [2_000, 10_000]}  # at N = 20k and 100k


def measure(metric: str, rows: int, dim: int, n_rollout: int, probes: int, cap: int,
            evaluations: int) -> dict:
    """Median seconds and mean minor page faults of one evaluation on CPU, after a warm-up."""
    base.CPU_CHUNK_BYTES = cap  # the cap under test, in this process only
    gen = torch.Generator().manual_seed(0)
    ground = GroundSet(torch.randn(rows, dim, generator=gen), torch.zeros(rows))
    idx = random_masks(rows, rows // 10, n_rollout, gen, torch.device("cpu"))
    function = DIVERSITY[metric]()
    if probes:
        function = function.probing(random_probes(dim, probes, gen, "cpu"))
    function.batch(ground, idx)
    faults, times = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
    for _ in range(evaluations):
        start = time.perf_counter()
        function.batch(ground, idx)
        times.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"seconds": statistics.median(times), "faults": faults / evaluations}


def in_fresh_process(args: argparse.Namespace, metric: str, rows: int, probes: int,
                     cap: int) -> dict:
    command = [sys.executable, "-m", "reproduce.bench.chunks", "--one", metric, str(rows),
               str(probes), str(cap), "--dim", str(args.dim),
               "--n_rollout", str(args.n_rollout), "--evaluations", str(args.evaluations)]
    return json.loads(subprocess.run(command, check=True, capture_output=True,
                                     text=True).stdout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", nargs="+", default=list(STEP_ROWS), choices=list(STEP_ROWS))
    parser.add_argument("--rows", type=int, nargs="+",
                        help="a step's rows, for every metric (default: " + "; ".join(
                            f"{m} {' '.join(map(str, r))}" for m, r in STEP_ROWS.items()) + ")")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--n_rollout", type=int, default=128)
    parser.add_argument("--probes", type=int, nargs="+", default=[0, 64],
                        help="DiSF's probe counts; 0 = the exact score")
    parser.add_argument("--caps_mib", type=float, nargs="+",
                        help=f"chunk caps (default: {base.CPU_CHUNK_BYTES / 2**20:g} and 256)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per cap")
    parser.add_argument("--evaluations", type=int, default=3, help="timed per process")
    parser.add_argument("--one", nargs=4, metavar=("METRIC", "ROWS", "PROBES", "CAP"),
                        help=argparse.SUPPRESS)  # one measurement, printed as JSON
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.one:
        metric, rows, probes, cap = args.one
        print(json.dumps(measure(metric, int(rows), args.dim, args.n_rollout, int(probes),
                                 int(cap), args.evaluations)))
        return

    caps = [round(mib * 2**20) for mib in args.caps_mib or [base.CPU_CHUNK_BYTES / 2**20, 256]]
    names = [f"{cap / 2**20:g} MiB" for cap in caps]
    print(f"CPU, {torch.get_num_threads()} threads (the cap is CPU-only); "
          f"{args.rounds} fresh processes a cap, medians\n")
    print("| metric | step rows | k | probes | "
          + " | ".join(f"{name}: ms (faults)" for name in names)
          + f" | {names[-1]} / {names[0]} |")
    print("|---|---|---|---|" + "---|" * (len(caps) + 1))
    for metric in args.metrics:
        for rows in args.rows or STEP_ROWS[metric]:
            for probes in args.probes if metric == "DiSF" else [0]:
                runs = {cap: [] for cap in caps}
                for _ in range(args.rounds):
                    for cap in caps:
                        runs[cap].append(in_fresh_process(args, metric, rows, probes, cap))
                seconds = [statistics.median(r["seconds"] for r in runs[c]) for c in caps]
                faults = [statistics.median(r["faults"] for r in runs[c]) for c in caps]
                cells = " | ".join(f"{s * 1e3:.0f} ({f:,.0f})" for s, f in zip(seconds, faults))
                label = "-" if metric != "DiSF" else probes or "exact"
                print(f"| {metric} | {rows} | {rows // 10} | {label} | {cells} | "
                      f"{seconds[-1] / seconds[0]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()

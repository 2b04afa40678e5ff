"""`make bench-chunks`: DiSF's batched evaluation at chunk budgets, side by side.

A DiSF evaluation gathers each mask's rows into fresh tensors and passes over them several times.
How many masks one chunk holds decides how large those allocations are: on CPU, glibc serves
allocations over its mmap threshold (at most 32 MiB) with fresh pages from the kernel, which are
faulted in and zeroed on every evaluation, and the chunk's passes may leave the cache. This prints
the time of one learner step's evaluation (G masks of a partial step, ratio 0.1) and its page
faults, at each budget, exact and with probes, at the step shapes of N = 100,000 and 1,000,000
rows (partial 0.1). Each measurement runs in a fresh process (the allocator's state would carry
from one to the next), the budgets interleaved round by round; medians over rounds. On a shared
machine read the ratios, not the absolute times.
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

from .objectives import DiSF, GroundSet, random_masks, random_probes
from .objectives.base import ACCELERATOR_CHUNK_BYTES, chunk_bytes
from .shared import resolve_device


def measure(rows: int, dim: int, n_rollout: int, probes: int, budget: int, device: str,
            evaluations: int) -> dict:
    """Median seconds and mean minor page faults of one evaluation, after a warm-up."""
    device = resolve_device(device)
    gen = torch.Generator(device=device).manual_seed(0)
    ground = GroundSet(torch.randn(rows, dim, generator=gen, device=device),
                       torch.zeros(rows, device=device))
    idx = random_masks(rows, rows // 10, n_rollout, gen, device)
    function = DiSF(budget, probes=random_probes(dim, probes, gen, device) if probes else None)
    function.batch(ground, idx)
    faults, times = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, []
    for _ in range(evaluations):
        start = time.perf_counter()
        function.batch(ground, idx)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"seconds": statistics.median(times), "faults": faults / evaluations}


def in_fresh_process(args: argparse.Namespace, rows: int, probes: int, budget: int) -> dict:
    command = [sys.executable, "-m", "datamask.bench_chunks", "--one", str(rows), str(probes),
               str(budget), "--device", args.device, "--dim", str(args.dim),
               "--n_rollout", str(args.n_rollout), "--evaluations", str(args.evaluations)]
    return json.loads(subprocess.run(command, check=True, capture_output=True,
                                     text=True).stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000],
                        help="rows of a partial step (those of N = 100k and 1M)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--n_rollout", type=int, default=128)
    parser.add_argument("--probes", type=int, nargs="+", default=[0, 64],
                        help="0 = the exact score")
    parser.add_argument("--budgets_mib", type=float, nargs="+",
                        help="chunk budgets (default: this device's default and 256 MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per budget")
    parser.add_argument("--evaluations", type=int, default=3, help="timed per process")
    parser.add_argument("--one", type=int, nargs=3, metavar=("ROWS", "PROBES", "BUDGET"),
                        help=argparse.SUPPRESS)  # one measurement, printed as JSON
    args = parser.parse_args(argv)
    if args.one:
        rows, probes, budget = args.one
        print(json.dumps(measure(rows, args.dim, args.n_rollout, probes, budget, args.device,
                                 args.evaluations)))
        return

    default = chunk_bytes(resolve_device(args.device))
    budgets = ([round(mib * 2**20) for mib in args.budgets_mib] if args.budgets_mib
               else [default, ACCELERATOR_CHUNK_BYTES])
    print(f"device {args.device}, {torch.get_num_threads()} threads; default chunk "
          f"{default / 2**20:g} MiB; {args.rounds} fresh processes a budget, medians\n")
    names = [f"{budget / 2**20:g} MiB" for budget in budgets]
    print("| step rows | k | probes | " + " | ".join(f"{name} ms (faults)" for name in names)
          + f" | {names[-1]} / {names[0]} |")
    print("|---|---|---|" + "---|" * (len(budgets) + 1))
    for rows in args.rows:
        for probes in args.probes:
            runs = {budget: [] for budget in budgets}
            for _ in range(args.rounds):
                for budget in budgets:
                    runs[budget].append(in_fresh_process(args, rows, probes, budget))
            seconds = [statistics.median(r["seconds"] for r in runs[b]) for b in budgets]
            faults = [statistics.median(r["faults"] for r in runs[b]) for b in budgets]
            cells = " | ".join(f"{s * 1e3:.0f} ({f:,.0f})" for s, f in zip(seconds, faults))
            print(f"| {rows} | {rows // 10} | {probes or 'exact'} | {cells} | "
                  f"{seconds[-1] / seconds[0]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()

"""`make bench-soak`: the learner through the real CLI on up to 1M rows x 384-d, 10% selected.

Each size runs `datamask select` in its own process on a Parquet shard written beforehand, and
reports that process's wall time, its optimisation time, and its peak resident memory beyond the
fixed cost of the interpreter and libraries, against the size of the feature matrix (goal: at
most 2x), plus time per row across sizes (linear in N means a
flat column). Not a test: it takes minutes, and its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_shard(path: Path, n_rows: int, dim: int, seed: int = 0, chunk: int = 100_000) -> None:
    """Clustered float32 rows written one row group at a time (never the whole matrix in float64)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((256, dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    level = rng.uniform(0, 5, 256).astype(np.float32)
    with pq.ParquetWriter(path, pa.schema([("chunk_id", pa.int64()), ("quality_score", pa.float32()),
                                           ("feature_arr", pa.list_(pa.float32(), dim))])) as out:
        for start in range(0, n_rows, chunk):
            n = min(chunk, n_rows - start)
            cluster = rng.integers(0, 256, n)
            feats = centers[cluster] + rng.standard_normal((n, dim), dtype=np.float32) * 0.05
            quality = level[cluster] + rng.standard_normal(n, dtype=np.float32) * 0.5
            flat = pa.array(feats.reshape(-1))
            out.write_table(pa.table({
                "chunk_id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                "quality_score": pa.array(quality),
                "feature_arr": pa.FixedSizeListArray.from_arrays(flat, dim)}))


def run_select(shard: Path, out: Path, args) -> dict:
    command = [sys.executable, "-m", "datamask", "select", "--input", str(shard),
               "--output", str(out), "--algorithm", args.algorithm, "--select_ratio", "0.1",
               "--n_epochs", str(args.steps), "--partial", str(args.partial), "--device", "cpu",
               "--checkpoint_every", "0", "--no_progress"]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"datamask select failed on {shard}")
    summary = json.loads(stdout)
    return {"wall_s": wall, "optimise_s": summary["wall_time_s"],
            "peak_rss_bytes": usage.ru_maxrss * 1024}  # ru_maxrss is in KiB on Linux


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--algorithm", default="Pair_simi")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--partial", type=float, default=0.1)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    print(f"datamask select --algorithm {args.algorithm} --partial {args.partial} "
          f"--n_epochs {args.steps}, 10% selected, d = {args.dim}, CPU threads: {os.cpu_count()}\n")
    with tempfile.TemporaryDirectory() as tmp:
        # The interpreter, torch and pyarrow take a fixed few hundred MB whatever the data:
        # measure it on a 1,000-row shard and report the growth beyond it against the features.
        write_shard(Path(tmp) / "fixed.parquet", 1000, args.dim)
        fixed = run_select(Path(tmp) / "fixed.parquet", Path(tmp) / "fixed_sel.parquet",
                           args)["peak_rss_bytes"]
        print(f"fixed cost (1,000 rows): {fixed / 2**30:.2f} GiB peak RSS\n")
        print("| rows | wall s | optimise s | ms / step | us / row / step | peak RSS GiB "
              "| (RSS - fixed) / features |")
        print("|---|---|---|---|---|---|---|")
        for n in args.sizes:
            shard = Path(tmp) / f"soak_{n}.parquet"
            write_shard(shard, n, args.dim)
            result = run_select(shard, Path(tmp) / f"sel_{n}.parquet", args)
            shard.unlink()
            feature_bytes = n * args.dim * 4
            step_ms = 1e3 * result["optimise_s"] / args.steps
            print(f"| {n:,} | {result['wall_s']:.1f} | {result['optimise_s']:.1f} | {step_ms:.0f} "
                  f"| {1e3 * step_ms / n:.2f} | {result['peak_rss_bytes'] / 2**30:.2f} "
                  f"| {(result['peak_rss_bytes'] - fixed) / feature_bytes:.2f} |", flush=True)


if __name__ == "__main__":
    main()

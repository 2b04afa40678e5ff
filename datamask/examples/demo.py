"""The main job on the embedded default: a synthetic clustered shard, DATAMASK on each diversity
metric, beside quality top-k and random, all scored by the same report on the whole shard."""

from __future__ import annotations

from pathlib import Path

from ..data import read_dataset, write_dataset, write_json_atomic
from ..objectives import DIVERSITY
from ..report import Report
from ..selectors import make_selector
from .synthetic import synthetic_dataset

SELECT_RATIO = 0.1
LAMB = 0.5


def run_demo(workdir: Path, device: str = "auto") -> list[dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    shard = workdir / "shard.parquet"
    generated = synthetic_dataset(n_rows=3000, dim=64, n_clusters=24, seed=0)
    write_dataset(shard, generated)
    data = read_dataset([shard])  # through the same reader as any user file
    print(f"demo shard: {shard} ({len(data)} rows x {data.dim}-d, 24 clusters); "
          f"selecting {SELECT_RATIO:.0%} with lamb={LAMB}")

    report = Report(data, SELECT_RATIO, LAMB)
    runs = [(f"datamask[{metric}]", "datamask",
             {"algorithm": metric, "lamb": LAMB, "device": device, "progress": True})
            for metric in DIVERSITY]
    runs += [("quality-topk", "quality-topk", {}), ("random", "random", {"seed": 0})]
    rows = []
    for label, name, params in runs:
        selection = make_selector(name, **params).select(data, SELECT_RATIO)
        selection.write(workdir / f"{label.replace('[', '_').rstrip(']')}.parquet", "chunk_id")
        rows.append({"method": label, "seconds": round(selection.wall_time_s, 2),
                     **report(selection.selected)})

    header = ["method", "seconds", "quality"] + [c for m in DIVERSITY for c in (m, f"joint_{m}")]
    print("\n" + " | ".join(f"{h:>20s}" for h in header))
    for row in rows:
        print(" | ".join(f"{row[h]:>20}" if isinstance(row[h], str) else f"{row[h]:>20.4f}"
                         for h in header))
    print("\njoint_<metric>: lamb * quality + (1 - lamb) * metric, each term in standard "
          "deviations of random selections above their mean (random ~ 0; higher is better).")
    write_json_atomic(rows, workdir / "results.json")
    print(f"selections and results.json in {workdir}")
    return rows

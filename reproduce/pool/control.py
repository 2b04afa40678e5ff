"""The positive control selection and the planted-kept report.

The control keeps the planted rows first (all of them when the budget allows, else a seeded subset)
and fills the rest of the budget with a seeded random draw of clean rows: a selection that should
train a worse model than random. `kept_fractions` says, for any selection written like
`reproduce select`'s, which fraction of each planted kind (and of clean rows) it kept, overall and
per domain.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datamask.data import ID_COLUMN, budget, check_ratio, write_json_atomic, write_table_atomic
from datamask.errors import UserError

from ..pipeline.common import parquet_files, selection_file
from .build import PLANTED_KINDS


LABELS = ("id", "domain", "planted")


def pool_labels(pool_dir: Path, columns: tuple[str, ...] = LABELS) -> pa.Table:
    """`columns` (by default id, domain, planted) of every pool row."""
    folder = Path(pool_dir) / "fineweb"
    if not folder.is_dir():
        raise UserError(f"--pool {pool_dir}: no fineweb/ folder; build it with "
                        "`datamask pipeline pool --output DIR`")
    files = parquet_files([str(folder)], "--pool")
    for path in files:
        missing = set(columns) - set(pq.read_schema(path).names)
        if missing:
            raise UserError(f"--pool {path}: no column {sorted(missing)}; not a pool shard")
    return pa.concat_tables([pq.read_table(p, columns=list(columns)) for p in files])


def control_selection(pool_dir: Path, prepared: list[str], select_ratio: float, output: Path,
                      seed: int = 0) -> dict:
    """Write output/selection.parquet (chunk_id, id, selected, score, block: select's columns,
    one block) and summary.json; returns the summary."""
    started = time.time()
    check_ratio(select_ratio)
    labels = pool_labels(pool_dir)
    files = parquet_files(prepared, "--prepared")
    rows = pa.concat_tables([pq.read_table(p, columns=[ID_COLUMN, "id"]) for p in files])
    ids = np.array(rows.column("id").to_pylist(), dtype=object)
    kind_of = dict(zip(labels.column("id").to_pylist(), labels.column("planted").to_pylist()))
    unknown = [i for i in ids if i not in kind_of]
    if unknown:
        raise UserError(f"--prepared: {len(unknown)} rows are not in the pool {pool_dir} "
                        f"(first id: {unknown[0]}); prepare the pool's own shards")
    k = budget(select_ratio, len(ids))
    planted = np.array([kind_of[i] != "none" for i in ids])
    rng = np.random.default_rng(seed)
    score = np.where(planted, 1.0 + rng.random(len(ids)), rng.random(len(ids)))
    chosen = np.argsort(-score, kind="stable")[:k]
    selected = np.zeros(len(ids), bool)
    selected[chosen] = True
    output.mkdir(parents=True, exist_ok=True)
    table = pa.table({ID_COLUMN: rows.column(ID_COLUMN), "id": rows.column("id"),
                      "selected": pa.array(selected), "score": pa.array(score.astype(np.float32)),
                      "block": pa.array(np.zeros(len(ids), np.int32))})
    write_table_atomic(table, output / "selection.parquet")
    summary = {"method": "control", "selector": "control", "select_ratio": select_ratio,
               "seed": seed, "rows": len(ids), "selected": int(k),
               "planted_rows": int(planted.sum()),
               "planted_selected": int((planted & selected).sum()),
               "stage_wall_s": round(time.time() - started, 3),
               "output": str(output / "selection.parquet")}
    write_json_atomic(summary, output / "summary.json")
    return summary


def kept_fractions(pool_dir: Path, selection: Path) -> dict:
    """{'all': {kind: {rows, kept, fraction}}, 'by_domain': {domain: {...}}, 'selected': n} for
    the pool rows the selection covers; kinds with no row are left out. A calibration selection's
    side rows (reproduce/pool/calibration.py) are not pool rows: 'side' counts the selected ones
    by planted kind."""
    from ..pipeline.tokenize import side_shard

    labels = pool_labels(pool_dir)
    path = selection_file(selection)
    chosen = pq.read_table(path, columns=["id", "selected"])
    picked = dict(zip(chosen.column("id").to_pylist(), chosen.column("selected").to_pylist()))
    side_kinds = {}
    if side_shard(path):
        rows = pq.read_table(side_shard(path), columns=["id", "planted"])
        side_kinds = dict(zip(rows.column("id").to_pylist(), rows.column("planted").to_pylist()))
    ids = labels.column("id").to_pylist()
    covered = np.array([i in picked for i in ids])
    extra = len(picked) - int(covered.sum()) - sum(i in side_kinds for i in picked)
    if extra:
        raise UserError(f"--selection {path}: {extra} ids are not in the pool {pool_dir}")
    added = [side_kinds[i] for i, on in picked.items() if on and i in side_kinds]
    kept = np.array([bool(picked.get(i, False)) for i in ids])
    domain = np.array(labels.column("domain").to_pylist(), dtype=object)
    kind = np.array(labels.column("planted").to_pylist(), dtype=object)

    def table(mask: np.ndarray) -> dict:
        out = {}
        for name in PLANTED_KINDS:
            rows = mask & covered & (kind == name)
            if rows.any():
                out[name] = {"rows": int(rows.sum()), "kept": int((rows & kept).sum()),
                             "fraction": round(float((rows & kept).sum() / rows.sum()), 4)}
        return out

    return {"selection": str(path), "rows": int(covered.sum()), "selected": int(kept.sum()),
            "side": {k: added.count(k) for k in PLANTED_KINDS if k in added},
            "all": table(np.ones(len(ids), bool)),
            "by_domain": {d: table(domain == d) for d in sorted(set(domain))}}

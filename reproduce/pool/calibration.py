"""Calibration selections: the random selection with a known dose of harm (section 3 of
reproduce/results/downstream/proxy-plan.md).

The downstream run compares each method's selection with random; these selections measure how
large a harm the run can see, trained and evaluated like any method. Each is the random selection
(or --base) with round(d * k) of its k documents replaced:
  junk-<d>  each replaced document swapped for junk (noise.junk_page: keyword spam, word salad,
            markup debris) made from a clean page of the same domain and cut to the replaced
            document's length in characters: the domain mix and the length distribution stay,
            only the text's quality changes
  dup-<d>   each replaced document swapped for a copy of another selected document of the same
            domain: the budget in documents and the domain mix stay, the distinct texts drop by
            the replaced count
The null needs nothing here: a second random selection is the spec `random:seed=1`.

Which documents are replaced: the first round(d * k) of a seeded order of the selected rows, taking
only rows whose text is unique in the selection (so the distinct texts drop by exactly the replaced
count) and keeping back one row per domain (so a copy always has a source in its domain). The order
depends on the seed alone: one seed's doses are nested, and its junk and dup series replace the
same documents. Output (the folder written whole, atomically):
  selection.parquet  select's columns (chunk_id, id, selected, score, block): every prepared row
                     once, the replaced ones unselected, then the side rows, selected
  side.parquet       the added rows: FineWeb's columns + domain + planted (junk, exact_dup); new
                     ids, never pool rows. The tokenize stage reads it beside the selection
  summary.json       d, k, the rows replaced, the seed, chars, distinct texts and per-domain counts
                     before and after
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import (ID_COLUMN, budget, check_ratio, read_dataset, write_json_atomic,
                           write_table_atomic)
from datamask.errors import UserError
from datamask.paths import check_paths
from datamask.selectors import make_selector
from eval.calibration import SERIES, dose_label

from ..pipeline.common import atomic_folder, parquet_files, selection_file
from ..pipeline.prepare import chunk_id
from ..pipeline.tokenize import SIDE_FILE
from . import noise
from .build import POOL_SCHEMA, fineweb_row
from .control import LABELS, pool_labels
from .sources import Document, fineweb_id

SIDE_KIND = {"junk": "junk", "dup": "exact_dup"}


def calibration_selection(pool_dir: Path, prepared: list[str], select_ratio: float, series: str,
                          dose: float, output: Path, seed: int = 0,
                          base: Path | None = None) -> dict:
    """Write output/selection.parquet, side.parquet and summary.json; returns the summary. The
    base is `random:seed=<seed>` over the prepared rows in one block (what `reproduce select
    --method random:seed=S --block_size 0` selects), or the selection file `base`."""
    started = time.time()
    if series not in SERIES:
        raise UserError(f"--series must be one of {', '.join(SERIES)}, got {series!r}")
    check_ratio(select_ratio)
    if not 0.0 < dose < 1.0:
        raise UserError(f"--dose must lie strictly between 0 and 1, got {dose}")
    files = parquet_files(prepared, "--prepared")
    base = selection_file(Path(base), "--base") if base is not None else None
    check_paths({"--pool": [Path(pool_dir) / "fineweb"],
                 "--prepared": [str(f) for f in files] + list(prepared), "--base": base},
                folders={"--output": output})
    pool = pool_labels(pool_dir, (*LABELS, "text"))
    rows = prepared_rows(files)
    at = pc.index_in(rows.column("id"), value_set=pool.column("id"))
    if at.null_count:
        first = rows.column("id").filter(pc.is_null(at))[0]
        raise UserError(f"--prepared: {at.null_count} rows are not in the pool {pool_dir} "
                        f"(first id: {first}); prepare the pool's own shards")
    at = at.to_numpy()
    if base is None:
        drawn = make_selector("random", seed=seed).select(read_dataset(files), select_ratio)
        selected, score = drawn.selected, drawn.score
        block = np.zeros(len(at), np.int32)
    else:
        selected, score, block = base_selection(base, rows, select_ratio)
    k = int(selected.sum())

    domain = pool.column("domain").to_numpy(zero_copy_only=False)[at]
    text = pool.column("text").take(pa.array(at)).combine_chunks()
    replaced = replaced_rows(selected, domain, text, dose, seed)
    if series == "junk":
        added = junk_texts(pool, domain[replaced], text.take(pa.array(replaced)), seed)
    else:
        added = copy_texts(selected, replaced, domain, text, seed)
    side = side_table(series, dose, seed, domain[replaced], added)

    after = selected.copy()
    after[replaced] = False
    side_ids = side.column("id")
    table = pa.concat_tables([
        pa.table({ID_COLUMN: rows.column(ID_COLUMN), "id": rows.column("id"),
                  "selected": pa.array(after), "score": pa.array(score.astype(np.float32)),
                  "block": pa.array(block.astype(np.int32))}),
        pa.table({ID_COLUMN: pa.array([chunk_id(i) for i in side_ids.to_pylist()], pa.int64()),
                  "id": side_ids, "selected": pa.array(np.ones(len(replaced), bool)),
                  "score": pa.array(score[replaced].astype(np.float32)),
                  "block": pa.array(block[replaced].astype(np.int32))}),
    ])
    kept_text = text.filter(pa.array(after))
    summary = {"method": dose_label(series, dose), "series": series, "dose": dose,
               "seed": seed, "select_ratio": select_ratio,
               "base": str(base) if base else f"random:seed={seed}", "rows": len(at), "k": k,
               "replaced": len(replaced), "selected": k, "side_rows": len(side),
               "before": text_stats(domain[selected], text.filter(pa.array(selected))),
               "after": text_stats(np.concatenate([domain[after], domain[replaced]]),
                                   pa.concat_arrays([kept_text, side.column("text")
                                                     .combine_chunks()]))}
    with atomic_folder(output) as tmp:
        write_table_atomic(table, tmp / "selection.parquet")
        write_table_atomic(side, tmp / SIDE_FILE)
        summary.update(stage_wall_s=round(time.time() - started, 3),
                       output=str(output / "selection.parquet"), side=str(output / SIDE_FILE))
        write_json_atomic(summary, tmp / "summary.json")
    return summary


def prepared_rows(files: list[Path]) -> pa.Table:
    """chunk_id and id of the prepared rows, in file then row order; an id twice is refused."""
    for path in files:
        missing = {ID_COLUMN, "id"} - set(pq.read_schema(path).names)
        if missing:
            raise UserError(f"--prepared {path}: no column {sorted(missing)}; run the prepare "
                            "stage on the pool's shards")
    rows = pa.concat_tables([pq.read_table(p, columns=[ID_COLUMN, "id"]) for p in files])
    if len(pc.unique(rows.column("id"))) != len(rows):
        raise UserError("--prepared: an id appears in two rows; prepare each pool shard once")
    return rows


def base_selection(path: Path, rows: pa.Table, select_ratio: float):
    """selected, score and block of a selection file, in the prepared rows' order; it must hold
    every prepared row once and select select_ratio of them, give or take one row per block (a
    selection `select` wrote before its blocks split one count, where each block rounded its own
    share: the committed downstream runs' random selects 866 of 8,651 rows in two blocks where
    budget(0.1, 8651) is 865). The doses are fractions of what it selects."""
    names = pq.read_schema(path).names
    table = pq.read_table(path, columns=[c for c in ("id", "selected", "score", "block")
                                         if c in names])
    at = pc.index_in(rows.column("id"), value_set=table.column("id"))
    if at.null_count or len(table) != len(rows):
        raise UserError(f"--base {path}: holds {len(table)} rows, {at.null_count} of the "
                        f"{len(rows)} prepared rows missing; give a selection of these prepared "
                        "rows")
    table = table.take(at)
    selected = table.column("selected").to_numpy(zero_copy_only=False).astype(bool)
    score = (table.column("score").to_numpy(zero_copy_only=False) if "score" in names
             else np.zeros(len(rows), np.float32))
    block = (table.column("block").to_numpy(zero_copy_only=False) if "block" in names
             else np.zeros(len(rows), np.int32))
    k, blocks = int(selected.sum()), len(np.unique(block))
    if abs(k - budget(select_ratio, len(rows))) > blocks:
        raise UserError(f"--base {path} selects {k} rows in {blocks} block(s); --select_ratio "
                        f"{select_ratio} of {len(rows)} rows is {budget(select_ratio, len(rows))}")
    return selected, score, block


def replaced_rows(selected: np.ndarray, domain: np.ndarray, text: pa.Array, dose: float,
                  seed: int) -> np.ndarray:
    """Positions of the rows to replace: the first round(dose * k) of a seeded order of the
    selected rows whose text is unique in the selection, one row per domain kept back."""
    chosen = np.flatnonzero(selected)
    order = chosen[np.random.default_rng([seed, 29]).permutation(len(chosen))]
    _, first_of_domain = np.unique(domain[order], return_index=True)
    eligible = np.ones(len(order), bool)
    eligible[first_of_domain] = False
    texts = text.take(pa.array(order))
    counts = pc.value_counts(texts)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    eligible &= ~pc.is_in(texts, value_set=repeated).to_numpy(zero_copy_only=False)
    count = int(np.floor(dose * len(chosen) + 0.5))
    if count < 1:
        raise UserError(f"--dose {dose}: round({dose} x {len(chosen)} selected) replaces no "
                        "document; raise --dose or --select_ratio")
    if count > eligible.sum():
        raise UserError(f"--dose {dose}: {count} documents to replace, but only "
                        f"{int(eligible.sum())} of the {len(chosen)} selected can be (unique text, "
                        "one per domain kept); lower --dose")
    return order[eligible][:count]


def junk_texts(pool: pa.Table, domains: np.ndarray, replaced: pa.Array, seed: int) -> list[str]:
    """For each replaced document, junk from a clean pool page of its domain (a seeded donor),
    exactly as long in characters; the j-th replaced row's generator is seeded by j alone, so a
    row replaced at two doses gets the same junk."""
    clean = pc.equal(pool.column("planted"), "none").to_numpy(zero_copy_only=False)
    pool_domain = pool.column("domain").to_numpy(zero_copy_only=False)
    donors = {d: np.flatnonzero(clean & (pool_domain == d)) for d in np.unique(domains)}
    empty = [d for d, rows in donors.items() if not len(rows)]
    if empty:
        raise UserError(f"--pool: domain {empty[0]} has no clean row to make junk from")
    lengths = pc.utf8_length(replaced).to_numpy(zero_copy_only=False)
    texts = []
    for j, (domain, length) in enumerate(zip(domains, lengths)):
        rng = np.random.default_rng([seed, 30, j])
        donor = pool.column("text")[int(donors[domain][rng.integers(len(donors[domain]))])]
        texts.append(noise.junk_page(donor.as_py(), rng, length=int(length)))
    return texts


def copy_texts(selected: np.ndarray, replaced: np.ndarray, domain: np.ndarray, text: pa.Array,
               seed: int) -> list[str]:
    """For each replaced document, the text of a seeded choice among the selected documents of
    its domain that stay."""
    stays = selected.copy()
    stays[replaced] = False
    rng = np.random.default_rng([seed, 31])
    source = np.empty(len(replaced), np.int64)
    for name in np.unique(domain[replaced]):
        here = domain[replaced] == name
        pool_of_domain = np.flatnonzero(stays & (domain == name))
        source[here] = pool_of_domain[rng.integers(len(pool_of_domain), size=int(here.sum()))]
    return text.take(pa.array(source)).to_pylist()


def side_table(series: str, dose: float, seed: int, domains: np.ndarray,
               texts: list[str]) -> pa.Table:
    """The added rows as pool rows (FineWeb's columns + domain + planted), each with a new
    FineWeb-style id: UUID5 of the seed, series, dose and index."""
    rows = []
    for j, (domain, text) in enumerate(zip(domains, texts)):
        key = f"datamask-calibration/seed={seed}/{series}/dose={dose:g}/{j}"
        row = fineweb_row(Document(str(domain), key, text, fineweb_id(key)), SIDE_KIND[series],
                          seed)
        rows.append({**row, "dump": f"datamask-calibration seed={seed}"})
    return pa.Table.from_pylist(rows, schema=POOL_SCHEMA)


def text_stats(domains: np.ndarray, texts: pa.Array) -> dict:
    """Documents, characters and distinct texts, overall and per domain."""
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False)
    names, inverse = np.unique(domains, return_inverse=True)
    chars = np.bincount(inverse, weights=lengths, minlength=len(names))
    docs = np.bincount(inverse, minlength=len(names))
    return {"documents": int(len(texts)), "chars": int(lengths.sum()),
            "distinct_texts": len(pc.unique(texts)),
            "domains": {str(n): {"documents": int(d), "chars": int(c)}
                        for n, d, c in zip(names, docs, chars)}}

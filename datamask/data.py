"""The data contract: Parquet rows with an id, a quality score and a feature vector.

Reading turns any number of Parquet files into one `Dataset` of contiguous numpy arrays without a
Python loop over rows; writing puts one row per input row, in input order, with `selected` and the
final score, and renames the file into place only once it is complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# The column names of the paper's original train_mask.py.
ID_COLUMN = "chunk_id"
QUALITY_COLUMN = "quality_score"
FEATURE_COLUMN = "feature_arr"


class DataError(ValueError):
    """Input that breaks the data contract; the message names the file, column or row."""


@dataclass
class Dataset:
    ids: np.ndarray  # (N,) int64, unique
    quality: np.ndarray  # (N,) float32, higher is better
    features: np.ndarray  # (N, d) float32, C-contiguous

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self.features.shape[1]


def budget(select_ratio: float, n_rows: int) -> int:
    """Rows to select: round half up of select_ratio * N, so 0.1 of 25 rows is 3 (not banker's 2)."""
    if not 0.0 < select_ratio < 1.0:
        raise DataError(f"--select_ratio must lie strictly between 0 and 1, got {select_ratio}")
    k = int(np.floor(select_ratio * n_rows + 0.5))
    if k < 1:
        raise DataError(
            f"--select_ratio {select_ratio} of {n_rows} rows selects zero rows; raise the ratio"
        )
    return k


def _feature_matrix(column: pa.ChunkedArray, path: str, name: str) -> np.ndarray:
    """A list / fixed-size-list column as one (N, d) float32 array, checking every row's length."""
    array = column.combine_chunks()
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
            or pa.types.is_fixed_size_list(array.type)):
        raise DataError(f"{path}: column '{name}' must be a list of floats, found {array.type}")
    n = len(array)
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{path}: column '{name}' is null at row {row}")
    if pa.types.is_fixed_size_list(array.type):
        dim = array.type.list_size
    else:
        lengths = pc.list_value_length(array).to_numpy()
        dim = int(lengths[0]) if n else 0
        bad = np.flatnonzero(lengths != dim)
        if len(bad):
            raise DataError(
                f"{path}: column '{name}' has vectors of inconsistent length: row 0 has {dim}, "
                f"row {int(bad[0])} has {int(lengths[bad[0]])}"
            )
    if n and dim == 0:
        raise DataError(f"{path}: column '{name}' holds empty vectors")
    values = pc.list_flatten(array) if not pa.types.is_fixed_size_list(array.type) else array.flatten()
    if values.null_count:
        raise DataError(f"{path}: column '{name}' contains null values inside a vector")
    matrix = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(n, dim)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DataError(f"{path}: column '{name}' has NaN or inf at row {row}")
    return matrix


def _read_one(path: str, id_column: str, quality_column: str, feature_column: str):
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(f"{path}: not a readable Parquet file ({err})") from None
    for flag, name in (("--id_column", id_column), ("--quality_column", quality_column),
                       ("--feature_column", feature_column)):
        if name not in schema.names:
            raise DataError(
                f"{path}: missing column '{name}' (set {flag}); the file has {schema.names}"
            )
    table = pq.read_table(path, columns=[id_column, quality_column, feature_column])
    if table.num_rows == 0:
        raise DataError(f"{path}: the file has no rows")
    ids_col = table.column(id_column)
    if not pa.types.is_integer(ids_col.type):
        raise DataError(f"{path}: id column '{id_column}' must be integer, found {ids_col.type}")
    if ids_col.null_count:
        raise DataError(f"{path}: id column '{id_column}' has null ids")
    ids = ids_col.to_numpy().astype(np.int64, copy=False)
    quality = table.column(quality_column).to_numpy().astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(quality))
    if len(bad):
        raise DataError(
            f"{path}: quality column '{quality_column}' is NaN, inf or null at row {int(bad[0])}"
        )
    features = _feature_matrix(table.column(feature_column), path, feature_column)
    return ids, quality, features


def read_dataset(paths: Sequence[str | os.PathLike], id_column: str = ID_COLUMN,
                 quality_column: str = QUALITY_COLUMN,
                 feature_column: str = FEATURE_COLUMN) -> Dataset:
    """Read one or more Parquet files as one dataset, in file order then row order."""
    if not paths:
        raise DataError("no input file given (--input)")
    parts = [_read_one(str(p), id_column, quality_column, feature_column) for p in paths]
    dims = {f.shape[1] for _, _, f in parts}
    if len(dims) > 1:
        detail = ", ".join(f"{p}: {f.shape[1]}" for p, (_, _, f) in zip(paths, parts))
        raise DataError(f"input files disagree on the feature length of '{feature_column}': {detail}")
    ids = np.concatenate([p[0] for p in parts])
    unique, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if len(unique) != len(ids):
        dup = int(unique[np.argmax(counts > 1)])
        sizes = np.cumsum([len(p[0]) for p in parts])
        where = [str(paths[int(np.searchsorted(sizes, r, side="right"))])
                 for r in np.flatnonzero(ids == dup)[:2]]
        raise DataError(f"duplicate id {dup} in column '{id_column}' (in {' and '.join(where)})")
    features = np.ascontiguousarray(np.concatenate([p[2] for p in parts]), dtype=np.float32)
    return Dataset(ids=ids, quality=np.concatenate([p[1] for p in parts]), features=features)


@contextmanager
def atomic_output(path: str | os.PathLike):
    """Yield a temporary path beside `path` to write to; rename it into place only on success,
    so a crash never leaves a half-written output under the real name."""
    path = Path(path)
    if not path.parent.is_dir():
        raise DataError(f"{path}: the output folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table_atomic(table: pa.Table, path: str | os.PathLike) -> None:
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp)


def write_json_atomic(obj, path: str | os.PathLike) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(obj, indent=2) + "\n")


def selection_table(ids: np.ndarray, selected: np.ndarray, score: np.ndarray,
                    id_column: str = ID_COLUMN) -> pa.Table:
    """The output schema: the id column, `selected` (bool) and `score` (the final logit)."""
    if len(np.unique(ids)) != len(ids) or not (len(ids) == len(selected) == len(score)):
        raise AssertionError("selection output must hold every input id exactly once")
    return pa.table({
        id_column: pa.array(ids, pa.int64()),
        "selected": pa.array(selected.astype(bool)),
        "score": pa.array(score.astype(np.float32)),
    })


def write_dataset(path: str | os.PathLike, ids: np.ndarray, quality: np.ndarray,
                  features: np.ndarray, extra: dict | None = None,
                  id_column: str = ID_COLUMN, quality_column: str = QUALITY_COLUMN,
                  feature_column: str = FEATURE_COLUMN) -> None:
    """Write arrays in the input contract (features as a fixed-size list of float32)."""
    n, dim = features.shape
    flat = pa.array(np.ascontiguousarray(features, dtype=np.float32).reshape(-1))
    columns = {
        id_column: pa.array(ids, pa.int64()),
        quality_column: pa.array(quality.astype(np.float32)),
        feature_column: pa.FixedSizeListArray.from_arrays(flat, dim),
    }
    columns.update(extra or {})
    write_table_atomic(pa.table(columns), path)

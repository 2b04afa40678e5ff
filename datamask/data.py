"""The data contract: Parquet rows with an id, a quality score and a feature vector.

Reading turns any number of Parquet files into one `Dataset` of contiguous numpy arrays without a
Python loop over rows; writing puts one row per input row, in input order, with `selected` and the
final score, and renames the file into place only once it is complete.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import UserError

# The column names of the paper's original train_mask.py.
ID_COLUMN = "chunk_id"
QUALITY_COLUMN = "quality_score"
FEATURE_COLUMN = "feature_arr"
BATCH_ROWS = 65536  # rows decoded at a time while reading


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
        raise UserError(f"--select_ratio must lie strictly between 0 and 1, got {select_ratio}")
    k = int(np.floor(select_ratio * n_rows + 0.5))
    if k < 1:
        raise UserError(
            f"--select_ratio {select_ratio} of {n_rows} rows selects zero rows; raise the ratio"
        )
    return k


def _vectors(chunk: pa.Array, path: str, name: str, first_row: int) -> np.ndarray:
    """One chunk of a list / fixed-size-list column as an (n, d) float32 view, every row checked:
    no nulls, one length, finite values. Row numbers in errors count from the file's first row."""
    if not (pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type)
            or pa.types.is_fixed_size_list(chunk.type)):
        raise UserError(f"{path}: column '{name}' must be a list of floats, found {chunk.type}")
    n = len(chunk)
    if chunk.null_count:
        row = first_row + int(np.flatnonzero(chunk.is_null().to_numpy(zero_copy_only=False))[0])
        raise UserError(f"{path}: column '{name}' is null at row {row}")
    if pa.types.is_fixed_size_list(chunk.type):
        dim, values = chunk.type.list_size, chunk.flatten()
    else:
        lengths = pc.list_value_length(chunk).to_numpy()
        dim = int(lengths[0])
        bad = np.flatnonzero(lengths != dim)
        if len(bad):
            raise UserError(
                f"{path}: column '{name}' has vectors of inconsistent length: row {first_row} has "
                f"{dim}, row {first_row + int(bad[0])} has {int(lengths[bad[0]])}"
            )
        values = pc.list_flatten(chunk)
    if dim == 0:
        raise UserError(f"{path}: column '{name}' holds empty vectors")
    if values.null_count:
        raise UserError(f"{path}: column '{name}' contains null values inside a vector")
    matrix = values.to_numpy(zero_copy_only=False).reshape(n, dim)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        row = first_row + int(np.flatnonzero(~finite)[0])
        raise UserError(f"{path}: column '{name}' has NaN or inf at row {row}")
    return matrix


def _check_file(path: str, columns: dict[str, str]) -> int:
    """Fail early, before any large read, on a missing, unreadable or empty file or a missing
    column; return the file's row count."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    try:
        metadata = pq.read_metadata(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise UserError(f"{path}: not a readable Parquet file ({err})") from None
    names = metadata.schema.to_arrow_schema().names
    for flag, name in columns.items():
        if name not in names:
            raise UserError(f"{path}: missing column '{name}' (set {flag}); the file has {names}")
    if metadata.num_rows == 0:
        raise UserError(f"{path}: the file has no rows")
    return metadata.num_rows


def read_dataset(paths: Sequence[str | os.PathLike], id_column: str = ID_COLUMN,
                 quality_column: str = QUALITY_COLUMN,
                 feature_column: str = FEATURE_COLUMN) -> Dataset:
    """Read one or more Parquet files as one dataset, in file order then row order.

    The arrays are allocated once and filled batch by batch, so reading peaks at the feature
    matrix plus one record batch, not at several copies of the whole input."""
    if not paths:
        raise UserError("no input file given (--input)")
    paths = [str(p) for p in paths]
    columns = {"--id_column": id_column, "--quality_column": quality_column,
               "--feature_column": feature_column}
    sizes = [_check_file(p, columns) for p in paths]
    total = sum(sizes)
    ids = np.empty(total, dtype=np.int64)
    quality = np.empty(total, dtype=np.float32)
    features = None
    offset = 0
    for path in paths:
        # Stream the file in record batches, without pre-buffering (which holds the whole file's
        # column chunks until the end): memory is the output plus about one batch.
        batches = pq.ParquetFile(path, pre_buffer=False).iter_batches(
            batch_size=BATCH_ROWS, columns=[id_column, quality_column, feature_column])
        row = 0  # within the file, for error messages
        for batch in batches:
            n = batch.num_rows
            ids_col = batch.column(id_column)
            if not pa.types.is_integer(ids_col.type):
                raise UserError(
                    f"{path}: id column '{id_column}' must be integer, found {ids_col.type}")
            if ids_col.null_count:
                raise UserError(f"{path}: id column '{id_column}' has null ids")
            qual = batch.column(quality_column).to_numpy(zero_copy_only=False)
            bad = np.flatnonzero(~np.isfinite(qual.astype(np.float64)))
            if len(bad):
                raise UserError(f"{path}: quality column '{quality_column}' is NaN, inf or null "
                                f"at row {row + int(bad[0])}")
            vectors = _vectors(batch.column(feature_column), path, feature_column, row)
            if features is None:
                features = np.empty((total, vectors.shape[1]), dtype=np.float32)
            if vectors.shape[1] != features.shape[1]:
                raise UserError(
                    f"{path}: column '{feature_column}' has {vectors.shape[1]}-d vectors at row "
                    f"{row}, but {paths[0]} starts with {features.shape[1]}-d ones"
                )
            ids[offset:offset + n] = ids_col.to_numpy()
            quality[offset:offset + n] = qual
            features[offset:offset + n] = vectors
            offset += n
            row += n
    check_unique_ids(ids, sizes, paths, id_column)
    return Dataset(ids=ids, quality=quality, features=features)


def check_unique_ids(ids: np.ndarray, sizes: Sequence[int], paths: Sequence[str],
                     id_column: str) -> None:
    """Refuse a repeated id, naming the files of its first two copies (`ids` holds the files'
    ids one after another, `sizes[i]` of them from `paths[i]`)."""
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        dup = int(unique[np.argmax(counts > 1)])
        ends = np.cumsum(sizes)
        where = [str(paths[int(np.searchsorted(ends, r, side="right"))])
                 for r in np.flatnonzero(ids == dup)[:2]]
        raise UserError(f"duplicate id {dup} in column '{id_column}' (in {' and '.join(where)})")


@contextmanager
def atomic_output(path: str | os.PathLike):
    """Yield a temporary path beside `path` to write to; rename it into place only on success,
    so a crash never leaves a half-written output under the real name."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{path}: the output folder {path.parent} does not exist")
    # a fresh name, created as any new file is (mode 0666 less the umask; mkstemp's 0600 would
    # be kept by the rename and hide outputs from the user's group)
    tmp = str(path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
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

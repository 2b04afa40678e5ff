"""The data contract: Parquet rows with an id, a quality score and a feature vector.

Reading turns any number of Parquet files into one `Dataset` of contiguous numpy arrays without a
Python loop over rows; writing puts one row per input row, in input order, with `selected` and the
final score, and renames the file into place only once it is complete.
"""

from __future__ import annotations

import json
import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import UserError, quoted

# The column names of the paper's original train_mask.py.
ID_COLUMN = "chunk_id"
QUALITY_COLUMN = "quality_score"
FEATURE_COLUMN = "feature_arr"
BATCH_ROWS = 65536  # rows decoded at a time while reading


@dataclass
class Dataset:
    ids: np.ndarray  # (N,) int64, or uint64 when the input's id column is uint64; unique
    quality: np.ndarray  # (N,) float32, higher is better
    features: np.ndarray  # (N, d) float32, C-contiguous

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self.features.shape[1]


# The output's own columns: an id column of either name would be lost in the output.
OUTPUT_COLUMNS = ("selected", "score")
# Quality enters float32 sums of squares (the term scale), so it must stay far below float32's
# largest value: |quality| <= 2^50 (about 1.1e15).
QUALITY_LIMIT = 2.0 ** 50
# Feature rows whose largest |value| lies in [2^-40, 2^40] keep their float32 values. Outside it,
# squares and dot products in float32 overflow or underflow, so all rows are multiplied by one
# power of two (exact; cosines and the per-dimension standardisation of DiSF are unchanged) that
# brings them inside; rows more than 2^80 apart in scale cannot share float32 and are refused.
SAFE_EXPONENT = 40


def check_ratio(select_ratio: float) -> None:
    """A fraction to select, checked alone: a command that selects late checks it up front."""
    if not 0.0 < select_ratio < 1.0:
        raise UserError(f"--select_ratio must lie strictly between 0 and 1, got {select_ratio}")


def budget(select_ratio: float, n_rows: int) -> int:
    """Rows to select: round half up of select_ratio * N, so 0.1 of 25 rows is 3 (not banker's 2)."""
    check_ratio(select_ratio)
    k = int(np.floor(select_ratio * n_rows + 0.5))
    if k < 1:
        raise UserError(
            f"--select_ratio {select_ratio} of {n_rows} rows selects zero rows; raise the ratio"
        )
    return k


def block_count(n_rows: int, block_size: int) -> int:
    """Blocks of at most `block_size` rows over `n_rows` (one block where block_size <= 0)."""
    return 1 if block_size <= 0 else max(1, -(-n_rows // block_size))


def random_blocks(n_rows: int, n_blocks: int, seed: int) -> list[np.ndarray]:
    """The paper's independent blocks: a seeded permutation of range(n_rows) cut into `n_blocks`
    near-equal parts, the same for the pipeline's plan and the experiments."""
    return np.array_split(np.random.default_rng(seed).permutation(n_rows), n_blocks)


def principal_direction(part: np.ndarray) -> np.ndarray:
    """The unit direction along which `part`'s rows vary most (float64)."""
    centred = part - part.mean(axis=0)
    return np.linalg.eigh((centred.T @ centred).astype(np.float64))[1][:, -1]


def neighbourhood_blocks(features: np.ndarray, n_blocks: int) -> list[np.ndarray]:
    """`n_blocks` near-equal blocks of neighbouring rows, for coverage objectives learned block by
    block: random blocks each cover a random slice of the whole space, so their union is redundant.
    Balanced bisection along each part's principal direction: a part given b blocks is split at
    the floor(b/2)/b quantile of its projections, so every block has floor(n/B) or ceil(n/B) rows.
    Deterministic; sorted row indices."""
    if not 1 <= n_blocks <= len(features):
        raise ValueError(f"{n_blocks} blocks over {len(features)} rows")
    blocks, parts = [], [(np.arange(len(features)), n_blocks)]
    while parts:
        rows, b = parts.pop()
        if b == 1:
            blocks.append(np.sort(rows))
            continue
        part = features[rows]
        direction = principal_direction(part)
        left = len(rows) * (b // 2) // b
        order = np.argpartition((part - part.mean(axis=0)) @ direction.astype(part.dtype), left)
        parts += [(rows[order[left:]], b - b // 2), (rows[order[:left]], b // 2)]
    return blocks


@dataclass
class NeighbourhoodTree:
    """neighbourhood_blocks' bisection fitted on a sample and kept as cuts, so that rows no one
    process holds together (a corpus's union of picks) are routed to the same blocks shard by
    shard: rows on the low side of a cut go to its first child. `cuts[i]` is (direction,
    threshold, first child, second child); a child >= 0 is a cut's index, -1 - b is block b."""

    cuts: list[tuple[np.ndarray, float, int, int]]

    @classmethod
    def fit(cls, sample: np.ndarray, n_blocks: int) -> "NeighbourhoodTree":
        cuts: list = []
        leaves = iter(range(n_blocks))

        def grow(rows: np.ndarray, b: int) -> int:
            if b == 1:
                return -1 - next(leaves)
            part = sample[rows].astype(np.float64)
            direction = (principal_direction(part) if len(rows) > 1
                         else np.eye(sample.shape[1])[0])
            projection = part @ direction
            left = len(rows) * (b // 2) // b
            ordered = np.sort(projection)  # cut midway in the gap at the quantile
            threshold = float(ordered[max(left - 1, 0):left + 1].mean()) if len(rows) else 0.0
            cuts.append(None)
            at = len(cuts) - 1
            low = projection < threshold
            cuts[at] = (direction, threshold, grow(rows[low], b // 2), grow(rows[~low], b - b // 2))
            return at

        grow(np.arange(len(sample)), n_blocks)
        return cls(cuts)

    def save(self, path: Path) -> None:
        """The cuts as one .npz file (written whole), for `load` in another process."""
        arrays = {"directions": np.array([c[0] for c in self.cuts], np.float64),
                  "thresholds": np.array([c[1] for c in self.cuts], np.float64),
                  "children": np.array([c[2:] for c in self.cuts], np.int64).reshape(-1, 2)}
        with atomic_output(path) as tmp, open(tmp, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: Path) -> "NeighbourhoodTree":
        with np.load(path) as arrays:
            return cls([(direction, float(threshold), int(low), int(high))
                        for direction, threshold, (low, high) in zip(
                            arrays["directions"], arrays["thresholds"], arrays["children"])])

    def route(self, features: np.ndarray) -> np.ndarray:
        """Each row's block (int64), one matrix-vector product per cut."""
        return self.spill(features, -1.0)[1]

    def spill(self, features: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
        """Each row to its own block and, as a guest, to the far side of a cut it lies within
        `margin` of: on its own path only from a cut's second side to its first, a guest on to
        either side by the same rule. Two rows at most `margin` apart (Euclidean) then meet in
        the home block of the one on the first side of the first cut between them, the other
        there as a guest, since a unit direction shortens no distance; sending guests both ways
        from the own path too would bring them together twice. (row index, block, home?) per
        copy, the home copies first in row order; a negative margin sends no guest."""
        rows = np.arange(len(features))
        node = np.zeros(len(features), np.int64)
        home = np.ones(len(features), bool)
        if not self.cuts:  # one block
            return rows, node, home
        for at, (direction, threshold, low, high) in enumerate(self.cuts):
            mine = np.flatnonzero(node == at)  # a cut's children come after it in self.cuts
            projection = features[rows[mine]].astype(np.float64) @ direction
            below = projection < threshold
            node[mine] = np.where(below, low, high)
            near = (np.abs(projection - threshold) <= margin) & ~(home[mine] & below)
            if near.any():  # route sends none: no copy of the whole arrays per cut
                rows = np.concatenate([rows, rows[mine[near]]])
                node = np.concatenate([node, np.where(below[near], high, low)])
                home = np.concatenate([home, np.zeros(int(near.sum()), bool)])
        return rows, -1 - node, home


def check_column_names(id_column: str, quality_column: str, feature_column: str) -> None:
    """The three input columns are distinct, and the id column is not one the output adds."""
    if id_column in OUTPUT_COLUMNS:
        raise UserError(f"--id_column {id_column}: the output's own columns are "
                        f"{' and '.join(OUTPUT_COLUMNS)}, so these ids would be lost; rename the "
                        f"column in the input")
    names = {"--id_column": id_column, "--quality_column": quality_column,
             "--feature_column": feature_column}
    if len(set(names.values())) < 3:
        raise UserError("--id_column, --quality_column and --feature_column must name three "
                        f"different columns, got {names}")


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _vectors(chunk: pa.Array, path: str, name: str, first_row: int) -> np.ndarray:
    """One chunk of a list / fixed-size-list column as an (n, d) array in its own number type,
    every row checked: numbers, no nulls, one length, finite. Row numbers in errors count from
    the file's first row."""
    is_list = (pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type)
               or pa.types.is_fixed_size_list(chunk.type))
    if not is_list or not _is_number(chunk.type.value_type):
        raise UserError(f"{path}: column '{name}' must be a list of numbers, found {chunk.type}")
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
    if matrix.dtype.kind == "f":
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            row = first_row + int(np.flatnonzero(~finite)[0])
            raise UserError(f"{path}: column '{name}' has NaN or inf at row {row}")
    return matrix


def _quality(column: pa.Array, path: str, name: str, first_row: int) -> np.ndarray:
    """A chunk of the quality column as float64: numbers (not text, not true/false), finite and
    within +-QUALITY_LIMIT."""
    if not _is_number(column.type):
        raise UserError(f"{path}: quality column '{name}' must hold numbers (int or float), "
                        f"found {column.type}")
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise UserError(f"{path}: quality column '{name}' is NaN, inf or null at row "
                        f"{first_row + int(bad[0])}")
    big = np.flatnonzero(np.abs(values) > QUALITY_LIMIT)
    if len(big):
        row = int(big[0])
        raise UserError(f"{path}: quality column '{name}' is {values[row]:g} at row "
                        f"{first_row + row}, beyond +-{QUALITY_LIMIT:.2g}; rescale the scores")
    return values


def _ids(column: pa.Array, path: str, name: str, first_row: int, dtype: np.dtype) -> np.ndarray:
    """A chunk of the id column in the dataset's id type (int64, or uint64 when any input has
    uint64 ids), refusing a value that type cannot hold exactly."""
    if not pa.types.is_integer(column.type):
        raise UserError(f"{path}: id column '{name}' must be integer, found {column.type}")
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise UserError(f"{path}: id column '{name}' is null at row {row}")
    values = column.to_numpy()
    if dtype == np.uint64 and values.dtype.kind == "i" and (values < 0).any():
        row = int(np.flatnonzero(values < 0)[0])
        raise UserError(f"{path}: id column '{name}' is {values[row]} at row {first_row + row}, "
                        f"but other inputs hold uint64 ids; one id type cannot hold both")
    return values.astype(dtype)


def _check_columns(name: str, kind: str, names: list[str], columns: dict[str, str]) -> None:
    """Every column the flags name is in the file or table `name` (`kind` says which)."""
    for flag, column in columns.items():
        if column not in names:
            raise UserError(f"{name}: missing column '{column}' (set {flag}); the {kind} has "
                            f"{names}")


@dataclass
class _Part:
    """One input of a dataset: a Parquet file, or a table given in memory. `name` is how errors
    name it (the file's path); `batches(columns)` yields its record batches of those columns."""

    name: str
    rows: int
    id_type: pa.DataType
    batches: Callable[[list[str]], Iterable[pa.RecordBatch]]


def _file_part(path: str, columns: dict[str, str]) -> _Part:
    """Fail early, before any large read, on a missing, unreadable or empty file or a missing
    column; the file as a part, with its row count and its id column's type."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    try:
        metadata = pq.read_metadata(path)
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{path}: not a readable Parquet file ({quoted(err)})") from None
    _check_columns(path, "file", schema.names, columns)
    if metadata.num_rows == 0:
        raise UserError(f"{path}: the file has no rows")
    return _Part(path, metadata.num_rows, schema.field(columns["--id_column"]).type,
                 lambda names: _batches(path, names))


def _batches(path: str, columns: list[str]):
    """The file's record batches; page data that cannot be decoded (a corrupt file whose footer
    is intact) is a UserError naming the file."""
    try:
        # Stream without pre-buffering (which holds the whole file's column chunks until the
        # end): memory is the output plus about one batch.
        yield from pq.ParquetFile(path, pre_buffer=False).iter_batches(
            batch_size=BATCH_ROWS, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{path}: the Parquet data cannot be decoded ({quoted(err)}); the file is "
                        f"damaged") from None


def _fit_float32(features: np.ndarray, exponents: np.ndarray, shifted: np.ndarray,
                 paths: Sequence[str], sizes: Sequence[int], name: str) -> None:
    """Bring the rows stored at their own scale (`shifted`) and the others to one power-of-two
    scale inside float32's safe range, in place. `exponents` holds every row's binary exponent
    of its largest |value|; `paths` and `sizes` locate a row for the error."""
    low, high = int(np.argmin(exponents)), int(np.argmax(exponents))
    if exponents[high] - exponents[low] > 2 * SAFE_EXPONENT:
        starts = np.cumsum([0, *sizes])
        where = []
        for row in (low, high):
            file = int(np.searchsorted(starts, row, side="right")) - 1
            where.append(f"row {row - starts[file]} of {paths[file]} (largest |value| about "
                         f"2^{exponents[row]})")
        raise UserError(f"column '{name}': {where[0]} and {where[1]} differ in scale by more "
                        f"than float32 arithmetic can hold (2^{2 * SAFE_EXPONENT}); rescale them")
    common = (int(exponents[low]) + int(exponents[high])) // 2
    factor = np.ldexp(1.0, np.where(shifted, exponents, 0) - common).astype(np.float32)
    features *= factor[:, None]


def read_dataset(paths: Sequence[str | os.PathLike], id_column: str = ID_COLUMN,
                 quality_column: str = QUALITY_COLUMN,
                 feature_column: str = FEATURE_COLUMN) -> Dataset:
    """Read one or more Parquet files as one dataset, in file order then row order, each file
    checked (`_file_part`) before any is read."""
    if not paths:
        raise UserError("no input file given (--input)")
    columns = _input_columns(id_column, quality_column, feature_column)
    return _dataset_of([_file_part(str(p), columns) for p in paths], id_column, quality_column,
                       feature_column)


def table_dataset(table: pa.Table, name: str, id_column: str = ID_COLUMN,
                  quality_column: str = QUALITY_COLUMN,
                  feature_column: str = FEATURE_COLUMN) -> Dataset:
    """A table held in memory as a dataset, checked as `read_dataset` checks a file (errors
    name it `name` where they would name the file)."""
    columns = _input_columns(id_column, quality_column, feature_column)
    _check_columns(name, "table", table.schema.names, columns)
    if table.num_rows == 0:
        raise UserError(f"{name}: the table has no rows")
    part = _Part(name, table.num_rows, table.schema.field(id_column).type,
                 lambda names: table.select(names).to_batches(max_chunksize=BATCH_ROWS))
    return _dataset_of([part], id_column, quality_column, feature_column)


def _input_columns(id_column: str, quality_column: str, feature_column: str) -> dict[str, str]:
    check_column_names(id_column, quality_column, feature_column)
    return {"--id_column": id_column, "--quality_column": quality_column,
            "--feature_column": feature_column}


def _dataset_of(parts: list[_Part], id_column: str, quality_column: str,
                feature_column: str) -> Dataset:
    """The parts as one dataset, every row checked: the ids of every part are read and checked
    first (the cheapest column; a duplicate across files is found before any vector is decoded).
    The other arrays are allocated once and filled batch by batch, so reading peaks at the
    feature matrix plus one record batch, not at several copies of the whole input."""
    names = [part.name for part in parts]
    sizes = [part.rows for part in parts]
    total = sum(sizes)
    id_type = np.uint64 if any(pa.types.is_uint64(part.id_type) for part in parts) else np.int64
    ids = np.empty(total, dtype=id_type)
    offset = 0
    for part in parts:
        row = 0  # within the part, for error messages
        for batch in part.batches([id_column]):
            ids[offset:offset + batch.num_rows] = _ids(batch.column(id_column), part.name,
                                                       id_column, row, id_type)
            offset += batch.num_rows
            row += batch.num_rows
    check_unique_ids(ids, sizes, names, id_column)

    quality = np.empty(total, dtype=np.float32)
    exponents = np.empty(total, dtype=np.int32)  # binary exponent of each row's largest |value|
    shifted = np.zeros(total, dtype=bool)  # rows stored divided by 2^exponent (out of range)
    features = None
    offset = 0
    for part in parts:
        path, row = part.name, 0
        for batch in part.batches([quality_column, feature_column]):
            n = batch.num_rows
            rows = slice(offset, offset + n)
            quality[rows] = _quality(batch.column(quality_column), path, quality_column, row)
            vectors = _vectors(batch.column(feature_column), path, feature_column, row)
            if features is None:
                features = np.empty((total, vectors.shape[1]), dtype=np.float32)
            if vectors.shape[1] != features.shape[1]:
                raise UserError(
                    f"{path}: column '{feature_column}' has {vectors.shape[1]}-d vectors at row "
                    f"{row}, but {names[0]} starts with {features.shape[1]}-d ones"
                )
            largest = np.abs(vectors).max(axis=1)
            if not largest.all():
                raise UserError(
                    f"{path}: column '{feature_column}' is all zeros at row "
                    f"{row + int(np.argmin(largest != 0))}; a zero vector has no direction, so "
                    f"its cosine to any row is undefined (drop the row)")
            exponents[rows] = np.frexp(largest.astype(np.float64))[1]
            out = np.flatnonzero(np.abs(exponents[rows]) > SAFE_EXPONENT)
            if len(out):  # divide these rows by their own power of two before float32 holds them
                vectors = vectors.astype(np.float64)
                vectors[out] *= np.ldexp(1.0, -exponents[rows][out])[:, None]
                shifted[offset + out] = True
            features[rows] = vectors
            offset += n
            row += n
    if shifted.any():
        _fit_float32(features, exponents, shifted, names, sizes, feature_column)
    return Dataset(ids=ids, quality=quality, features=features)


def _groupable(column: pa.ChunkedArray | pa.Array, path: str, name: str,
               first_row: int) -> np.ndarray:
    """One chunk of a column whose values group rows: integers (int64) or text (str), no
    nulls; a dictionary-encoded column is read as its values."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)):
        raise UserError(f"{path}: column '{name}' must hold integers or text to group rows by, "
                        f"found {kind}")
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise UserError(f"{path}: column '{name}' is null at row {row}")
    values = column.to_numpy(zero_copy_only=False)
    return values.astype(np.int64) if pa.types.is_integer(kind) else values.astype(str)


def read_column(paths: Sequence[str | os.PathLike], column: str,
                flag: str = "--stratify") -> np.ndarray:
    """One more column of the files `read_dataset` reads, aligned with its rows (same files, same
    order): integers or text, as `flag` (which named it) needs values to group rows by. A file
    without the column, a null, or integers in one file and text in another is a UserError
    naming the file and column."""
    if not paths:
        raise UserError("no input file given (--input)")
    parts = []
    for path in map(str, paths):
        if not os.path.exists(path):
            raise UserError(f"{path}: no such file")
        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError) as err:
            raise UserError(f"{path}: not a readable Parquet file ({quoted(err)})") from None
        if column not in names:
            raise UserError(f"{path}: missing column '{column}' ({flag} {column}); the file has "
                            f"{names}")
        row = 0
        for batch in _batches(path, [column]):
            parts.append(_groupable(batch.column(column), path, column, row))
            row += batch.num_rows
    kinds = {part.dtype.kind for part in parts}
    if len(kinds) > 1:
        raise UserError(f"column '{column}' holds integers in some of {list(map(str, paths))} "
                        f"and text in others; one kind of value is needed to group rows")
    return np.concatenate(parts)


def check_unique_ids(ids: np.ndarray, sizes: Sequence[int], paths: Sequence[str],
                     id_column: str) -> None:
    """Refuse a repeated id, naming the file (or the two files) of its first two copies (`ids`
    holds the files' ids one after another, `sizes[i]` of them from `paths[i]`)."""
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        dup = int(unique[np.argmax(counts > 1)])
        ends = np.cumsum(sizes)
        parts = dict.fromkeys(int(np.searchsorted(ends, r, side="right"))
                              for r in np.flatnonzero(ids == dup)[:2])  # one, where in one file
        raise UserError(f"duplicate id {dup} in column '{id_column}' (in "
                        f"{' and '.join(str(paths[i]) for i in parts)})")


def temporary_beside(path: Path) -> Path:
    """A fresh `.NAME.XXXXXXXX.tmp` name beside `path`: what file and folder writers use, and
    what `paths.temporaries` finds after a killed one."""
    return path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"


def _new_file_beside(path: Path) -> Path:
    """Create an empty, unused temporary file beside `path` with the permissions the umask
    gives (mkstemp's 0600 would survive the rename and hide the output from others)."""
    while True:
        tmp = temporary_beside(path)
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_output(path: str | os.PathLike):
    """Yield a temporary path beside `path` to write to; rename it into place only on success,
    so a crash never leaves a half-written output under the real name (and a failure, including
    Ctrl-C, leaves no temporary file either)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{path}: the output folder {path.parent} does not exist")
    tmp = _new_file_beside(path)
    try:
        yield str(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_table_atomic(table: pa.Table, path: str | os.PathLike, **options) -> None:
    """pq.write_table(table, path, **options), the file complete or absent."""
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, **options)


def write_text_atomic(text: str, path: str | os.PathLike) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(text)


def write_json_atomic(obj, path: str | os.PathLike) -> None:
    write_text_atomic(json.dumps(obj, indent=2) + "\n", path)


def id_array(ids: np.ndarray) -> pa.Array:
    """Ids as they came in: uint64 stays uint64 (ids of 2^63 and more), any other as int64."""
    ids = np.asarray(ids)
    return pa.array(ids, pa.uint64() if ids.dtype == np.uint64 else pa.int64())


def selection_table(ids: np.ndarray, selected: np.ndarray, score: np.ndarray,
                    id_column: str = ID_COLUMN) -> pa.Table:
    """The output schema: the id column, `selected` (bool) and `score` (the final logit)."""
    if len(np.unique(ids)) != len(ids) or not (len(ids) == len(selected) == len(score)):
        raise AssertionError("selection output must hold every input id exactly once")
    if np.isnan(score).any():
        raise AssertionError("a selector produced a NaN score; it is never written")
    return pa.table({
        id_column: id_array(ids),
        "selected": pa.array(selected.astype(bool)),
        "score": pa.array(score.astype(np.float32)),
    })


def write_dataset(path: str | os.PathLike, data: Dataset, extra: dict | None = None,
                  metadata: dict | None = None) -> None:
    """Write `data` in the input contract (its default column names, features as a fixed-size
    list of float32), `extra`'s columns beside it and `metadata` as the file's schema metadata;
    atomically (write_table_atomic)."""
    table = dataset_table(data)
    for name, column in (extra or {}).items():
        table = table.append_column(name, column)
    write_table_atomic(table.replace_schema_metadata(metadata), path)


def dataset_table(data: Dataset, id_column: str = ID_COLUMN,
                  quality_column: str = QUALITY_COLUMN,
                  feature_column: str = FEATURE_COLUMN) -> pa.Table:
    """`data` as a table in the input contract."""
    flat = pa.array(np.ascontiguousarray(data.features, dtype=np.float32).reshape(-1))
    return pa.table({id_column: id_array(data.ids),
                     quality_column: pa.array(np.asarray(data.quality).astype(np.float32)),
                     feature_column: pa.FixedSizeListArray.from_arrays(
                         flat, data.features.shape[1])})

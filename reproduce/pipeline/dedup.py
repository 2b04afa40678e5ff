"""Stage dedup, between prepare and select: near-duplicate documents, found two ways, written as
one keep-list that later stages honour.

Text (--input, the FineWeb shards): datatrove's MinHash deduplication, its four steps as rounds of
executor tasks: signatures (task r of N: shards r, r+N, ...), buckets (one task per bucket),
clusters (one task), filter (the signature tasks' shards again). FineWeb's settings are the
defaults: word 5-grams, 14 buckets of 8 hashes. The signatures are datatrove's own or rensa's
(--minhash; minhash.py), in datatrove's files either way. Of each cluster one document is
kept by a rule of its own, not datatrove's (the root of its union-find, which follows the task
numbering), so that the keep-list does not depend on --tasks: the member of highest quality where
--prepared is given, ties (and every cluster without --prepared) to the first in input order;
every other member is removed as a duplicate of it (one more task, after the filter).

Embedding (--prepared, prepare's rows; those the text step kept): SemDeDup's rule, with the pair
work inside neighbourhoods. The rows, at unit length, are cut into regions of about --region_rows
rows by principal-direction cuts fitted on a seeded sample by one task, then routed by one task
per group of shards (datamask.data.NeighbourhoodTree); each region's own rows are compared with
every row in it (each pair bounded first on the region's leading directions, and compared in
full only where the bound reaches the threshold: the same pairs, less arithmetic), and
the pairs whose cosine reaches --threshold are resolved at the end, all at once: taken by quality
(higher first, ties: the smaller id), a row paired with a row kept before it is removed as a
duplicate of the most similar such row. So every embedding removal names a row that stays, the
copy of higher quality. With --region_pairs all (the default) a row within the threshold's
distance, sqrt(2 (1 - threshold)), of a cut is also sent as a guest to the far side (from the
cut's second side to its first only, where the cut is on the row's own path), so that every pair
meets once, in the home region of one of its rows, and the keep-list is the one a single region of all rows gives, at the
cost of the guests' pair work (the manifest counts the routed rows; it grows with the number of
regions), or within --guest_margin times that distance, fewer guests and no longer exact; with
inside, only pairs inside one region are found, as SemDeDup and NeMo Curator do after k-means,
and a near-copy that a cut separates from its original stays.

Files under --output: the keep-list, keep.parquet (id, keep: every input row once, in input
order), removals.parquet (id, reason, duplicates, similarity: each removed row, why, and the row
it copies) and manifest.json (written last: the inputs, settings and counts); config.json and
logs/ (datatrove's logs and completion markers: a rerun with the same inputs and settings runs
only the unfinished tasks, anything else starts afresh); and the steps' working files (minhash/,
regions/, pairs/), of which the bulky signatures and region rows are removed once the keep-list
is written.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import (QUALITY_COLUMN, NeighbourhoodTree, block_count, read_dataset,
                           write_json_atomic, write_table_atomic)
from datamask.errors import UserError, quoted
from datamask.options import REQUIRED, Range, option, validate
from datamask.paths import check_paths, leave_as_found, remove_temporaries
from datamask.processes import children_die_with_parent
from datamask.shared import require

from .common import (check_distinct_files, check_prepared, check_text_shard, file_stats,
                     parquet_files)
from .engines import Executed, check_executor, engine_session, run_then_merge, start_or_resume
from .minhash import (BACKENDS, BITS, DEFAULT_BACKEND, HASH_WIDTHS, check_backend,
                      signature_step)

datatrove_base = require("datatrove.pipeline.base", "dedup")

KEEP_FILE = "keep.parquet"
REMOVALS_FILE = "removals.parquet"
MANIFEST = "manifest.json"
MINHASH = "minhash"  # signatures/, buckets/, clusters/, removed/, kept/, removals.parquet
MINHASH_REMOVALS = "removals.parquet"  # in minhash/: (id, duplicates), each cluster's copy kept
REGIONS = "regions"  # each pair task's rows, written by the region plan
PAIRS = "pairs"  # each pair task's pairs at the threshold
REGION_PLAN = "plan.json"  # in regions/: the rows the plan cut into regions
TREE_FILE = "tree.npz"  # in regions/: the plan's cuts
ROUTED = ".routed.json"  # regions/SHARD.routed.json: the copies that shard's route task wrote
SAMPLE_FLOOR = 100_000  # rows the default sample holds at least (all where fewer)
SAMPLE_PER_REGION = 50  # and per region, so that deep cuts are fitted on enough rows
TILE_ROWS, TILE_AMONG = 256, 4_096  # a region's pair bounds computed at once (4 MB)
BOUND_DIMS = 48  # leading directions of a region's rows in the bound that filters its pairs
BOUND_SAMPLE = 8_192  # rows those directions are fitted on
BOUND_SLACK = 1e-4  # below the threshold: the float32 bound's rounding never drops a pair
BOUND_CHUNK = 65_536  # rows projected at once
REGION_PAIRS = ("all", "inside")
PAIR_SCHEMA = pa.schema([("id", pa.string()), ("other", pa.string()), ("similarity", pa.float32()),
                         ("quality", pa.float64()), ("other_quality", pa.float64())])
FLOAT_SLACK = 1e-4  # added to the guests' margin: cosines of float32 rows are rounded
# the settings of each step, as `pipeline dedup --help` groups their flags
MINHASH_SETTINGS = ("minhash", "n_grams", "num_buckets", "hashes_per_bucket", "hash_precision")
EMBEDDING_SETTINGS = ("threshold", "region_rows", "region_pairs", "guest_margin", "sample", "seed")


@dataclasses.dataclass(kw_only=True)
class DedupConfig(Executed):
    """The dedup stage's settings: `pipeline dedup`'s flags, help, choices and range checks come
    from these fields, and a config that breaks one is refused, naming the flag, when it is made.
    The executor's come from the shared executor flags."""

    input: Path | None = option(None, "folder of FineWeb Parquet shards: MinHash on their text")
    prepared: Path | None = option(None, "folder of prepared rows (of those shards): "
                                         "near-duplicate embeddings among the rows MinHash kept")
    output: Path = option(REQUIRED, "folder for the keep-list")
    minhash: str = option(DEFAULT_BACKEND, "the library of the signatures: rensa's RMinHash (22x "
                                           "datatrove's per core, measured), or datatrove's own, "
                                           "over the same word n-grams and into datatrove's "
                                           "files", choices=BACKENDS)
    n_grams: int = option(5, "words per shingle", within=Range(1))
    num_buckets: int = option(14, "LSH bands; a pair sharing one band's hashes is a match",
                              within=Range(1))
    hashes_per_bucket: int = option(8, "hashes per band", within=Range(1))
    hash_precision: int | None = option(None, "bits per hash", choices=HASH_WIDTHS,
                                        default_text="the library's, datatrove 64, rensa 32")
    threshold: float = option(0.99, "cosine at or above which the row of lower quality is "
                                    "removed, in (0, 1]; SemDeDup's eps 0.01 is 0.99",
                              within=Range(0.0, 1.0, open_low=True))
    region_rows: int = option(10_000, "rows per neighbourhood whose pairs are compared",
                              within=Range(1))
    region_pairs: str = option("all", "all: rows near a cut are compared on both sides too, so "
                                      "every pair is found, as in one region; inside: cheaper, "
                                      "a copy a cut separates stays", choices=REGION_PAIRS)
    guest_margin: float = option(1.0, "with all: the far side's margin, a fraction of a pair's "
                                      "distance at the threshold; below 1 fewer guests, not "
                                      "exact", within=Range(0.0, 1.0, open_low=True))
    sample: int | None = option(None, "rows the neighbourhood cuts are fitted on", within=Range(1),
                                default_text="50 per neighbourhood, at least 100,000, at most "
                                             "every row")
    seed: int = option(0, "seed of that sample")
    tasks: int | None = option(None, "executor tasks", within=Range(1), flag=False,
                               default_text="--workers")

    def __post_init__(self):
        validate(self)

    def check_together(self) -> None:
        """The rules between flags, all checked before any file is read."""
        if self.input is None and self.prepared is None:
            raise UserError("give --input (MinHash on the FineWeb shards' text), --prepared "
                            "(near-duplicate embeddings of prepare's rows), or both")
        if self.region_pairs == "inside" and self.guest_margin != 1:
            raise UserError(f"--guest_margin {self.guest_margin}: sizes the guests of "
                            f"--region_pairs all; --region_pairs inside sends none")
        if self.minhash == "rensa" and self.hash_precision not in (None, BITS["rensa"]):
            raise UserError(f"--hash_precision {self.hash_precision}: rensa's hashes are 32 "
                            f"bits; give 32 or --minhash datatrove")

    def cut_margin(self) -> float:
        """How far from a cut a row is also sent to the far side: guest_margin's distance with
        --region_pairs all, -1 (no guest) with inside."""
        if self.region_pairs == "all":
            return guest_margin(self.threshold, self.guest_margin)
        return -1.0


def minhash_config(n_grams: int = 5, num_buckets: int = 14, hashes_per_bucket: int = 8,
                   precision: int = 64):
    """datatrove's MinhashConfig; the defaults are FineWeb's."""
    from datatrove.pipeline.dedup import MinhashConfig
    from datatrove.utils.hashing import HashConfig

    return MinhashConfig(n_grams=n_grams, num_buckets=num_buckets,
                         hashes_per_bucket=hashes_per_bucket,
                         hash_config=HashConfig(precision=precision))


def read_ids(files: list[Path], flag: str) -> pa.ChunkedArray:
    """The `id` column of `files` as text, in file then row order; a null or an id in two rows
    is refused, naming it (the keep-list holds every id once)."""
    parts = []
    for path in files:
        try:
            column = pq.read_table(path, columns=["id"]).column("id")
        except (pa.ArrowException, OSError) as err:
            raise UserError(f"{flag} {path}: no readable 'id' column ({quoted(err)})") from None
        if column.null_count:
            raise UserError(f"{flag} {path}: column 'id' is null at row "
                            f"{column.to_pylist().index(None)}")
        parts.append(column.cast(pa.string()))
    ids = pa.chunked_array([c for part in parts for c in part.chunks], pa.string())
    counts = pc.value_counts(ids)
    twice = counts.filter(pc.greater(counts.field("counts"), 1))
    if len(twice):
        raise UserError(f"{flag}: id {twice.field('values')[0]} is in "
                        f"{twice.field('counts')[0]} rows; every row needs its own id")
    return ids


def same_rows(ids: pa.ChunkedArray, listed: pa.Array | pa.ChunkedArray) -> bool:
    """Whether two id columns, each without a repeat, hold the same ids."""
    return len(ids) == len(listed) and pc.all(pc.is_in(ids, value_set=listed)).as_py()


def removed_ids(keep: Path, ids: pa.ChunkedArray, input_flag: str,
                flag: str = "--keep") -> pa.Array:
    """The ids the keep-list in folder `keep` removes, once it is shown to be a finished
    keep-list of exactly the rows `ids` (the consumer's input, named by `input_flag`): a keep-list
    of another input is refused, naming the input it came from."""
    keep = Path(keep)
    if not (keep / MANIFEST).is_file() or not (keep / KEEP_FILE).is_file():
        raise UserError(f"{flag} {keep}: no finished keep-list there (no {MANIFEST} and "
                        f"{KEEP_FILE}); run `datamask pipeline dedup` into it first")
    if not same_rows(ids, pq.read_table(keep / KEEP_FILE, columns=["id"]).column("id")):
        made_from = json.loads((keep / MANIFEST).read_text())["input"]
        raise UserError(f"{flag} {keep}: a keep-list of another input ({made_from['rows']} rows "
                        f"of {made_from['text'] or made_from['prepared']}), not of the "
                        f"{len(ids)} rows of {input_flag}")
    return read_removed(keep)


def read_removed(keep: Path) -> pa.Array:
    """The ids the keep-list in folder `keep` removes."""
    table = pq.read_table(Path(keep) / KEEP_FILE, columns=["id", "keep"])
    return table.filter(pc.invert(table.column("keep"))).column("id").combine_chunks()


def region_sample(rows: int, regions: int) -> int:
    """The rows the cuts are fitted on by default: SAMPLE_PER_REGION per region, at least
    SAMPLE_FLOOR, at most every row."""
    return min(rows, max(SAMPLE_FLOOR, SAMPLE_PER_REGION * regions))


def guest_margin(threshold: float, fraction: float) -> float:
    """How far from a cut a row is also sent to the far side: `fraction` of sqrt(2 (1 -
    threshold)), the distance of two unit rows at the threshold (1: every pair at the threshold
    meets in a region), plus FLOAT_SLACK."""
    return fraction * np.sqrt(2 * (1 - threshold)) + FLOAT_SLACK


def bound_vectors(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Each unit row as its coordinates on the orthonormal columns of `basis` and, last, the
    length of what they leave out: the dot product of two such vectors bounds the rows' cosine
    from above (the left-out parts' dot product is at most the product of their lengths)."""
    out = np.empty((len(rows), basis.shape[1] + 1), np.float32)
    for start in range(0, len(rows), BOUND_CHUNK):
        part = rows[start:start + BOUND_CHUNK].astype(np.float32)
        projection = part @ basis
        out[start:start + len(part), :-1] = projection
        out[start:start + len(part), -1] = np.linalg.norm(part - projection @ basis.T, axis=1)
    return out


def principal_basis(among: np.ndarray, dims: int) -> np.ndarray:
    """The `dims` leading directions of the rows (uncentred, so a region's mean direction comes
    first), fitted on a seeded sample of BOUND_SAMPLE of them: (dimension, dims)."""
    rng = np.random.default_rng(0)
    sample = among[np.sort(rng.choice(len(among), min(BOUND_SAMPLE, len(among)), replace=False))]
    _, _, directions = np.linalg.svd(sample.astype(np.float64), full_matrices=False)
    return np.ascontiguousarray(directions[:dims].T, dtype=np.float32)


def similar_pairs(among: np.ndarray, own: np.ndarray, threshold: float,
                  bound_dims: int = BOUND_DIMS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of a row among[own[i]] and another row of `among` (unit rows) whose cosine is at
    least `threshold`: (index into own, index into among, cosine). Every pair is first bounded in
    `bound_dims` + 1 dimensions (bound_vectors on the rows' leading directions), a tile of
    TILE_ROWS x TILE_AMONG at a time, a tile whose largest bound is BOUND_SLACK below the
    threshold skipped whole, and only the pairs the bound leaves are compared in full, in
    float64: the pairs a full comparison of every pair finds, at a fraction of its arithmetic
    where near copies are rare. The own rows are bounded first, so that a pair of two own rows
    is bounded once where their tiles allow (it may still come in both orders). A pair's cosine
    depends on its two rows alone, not on the region it is found in."""
    if bound_dims + 1 < among.shape[1]:
        bounds = bound_vectors(among, principal_basis(among, min(bound_dims, len(among))))
    else:  # a bound no cheaper than the cosine itself: the cosine, in float32
        bounds = among.astype(np.float32)
    guests = np.ones(len(among), bool)
    guests[own] = False
    order = np.r_[own, np.flatnonzero(guests)]  # own rows first: own[i] at i
    bounds = bounds[order]
    low = threshold - BOUND_SLACK
    found = [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))]
    for start in range(0, len(own), TILE_ROWS):
        block = bounds[start:min(start + TILE_ROWS, len(own))]
        # a tile of own rows wholly before this block met these rows when its own block ran
        for at in range(start // TILE_AMONG * TILE_AMONG, len(among), TILE_AMONG):
            tile = block @ bounds[at:at + TILE_AMONG].T
            selves = np.arange(max(start, at), min(start + len(block), at + TILE_AMONG))
            tile[selves - start, selves - at] = -np.inf  # a row is no pair of itself
            if tile.max() < low:
                continue
            first, second = np.nonzero(tile >= low)
            first, second = first + start, order[second + at]
            cosine = np.einsum("ij,ij->i", among[own[first]].astype(np.float64),
                               among[second].astype(np.float64))
            near = cosine >= threshold
            found.append((first[near], second[near], cosine[near].astype(np.float32)))
    return tuple(np.concatenate(part) for part in zip(*found))


def keep_first(ids: np.ndarray, quality: np.ndarray, first: np.ndarray, second: np.ndarray,
               similarity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SemDeDup's rule over pairs found at the threshold, the copy of higher quality kept: rows
    in order of quality (higher first, ties: the smaller id); a row paired with a row kept before
    it is removed, as a duplicate of the most similar one (ties: the one earlier in that order).
    A pair may come twice, in either order; a row paired with itself is ignored. Nothing depends
    on the order of the pairs, which follows the pair tasks' numbering. (removed rows, the row
    each duplicates, their cosine), as indices into `ids`."""
    order = np.lexsort((ids, -quality.astype(np.float64)))
    rank = np.empty(len(ids), np.int64)
    rank[order] = np.arange(len(ids))
    other = first != second
    first, second, similarity = first[other], second[other], similarity[other]
    swap = rank[first] > rank[second]
    earlier, later = np.where(swap, second, first), np.where(swap, first, second)
    # by the later row's rank, then the most similar first (ties: the earlier row's rank)
    by = np.lexsort((rank[earlier], -similarity, rank[later]))
    earlier, later, similarity = earlier[by], later[by], similarity[by]
    starts = np.flatnonzero(np.r_[True, later[1:] != later[:-1]]) if len(later) else []
    kept = np.ones(len(ids), bool)
    removed, duplicates, cosine = [], [], []
    for start, stop in zip(starts, np.r_[starts[1:], len(later)].astype(np.int64)):
        # by rank: a row's fate is known before a later row asks
        alive = np.flatnonzero(kept[earlier[start:stop]])
        if len(alive):
            best = start + alive[0]
            kept[later[start]] = False
            removed.append(later[start])
            duplicates.append(earlier[best])
            cosine.append(similarity[best])
    return (np.array(removed, np.int64), np.array(duplicates, np.int64),
            np.array(cosine, np.float32))


def cluster_row(writer, document) -> dict:
    """What the MinHash filter writes of a document (an adapter of datatrove's writers): its id
    and its cluster (-1 for none)."""
    return {"id": str(document.id), "cluster": document.metadata["minhash_cluster_id"]}


def in_a_cluster(document) -> bool:
    """A kept document with duplicates: its cluster's one copy that stays."""
    return document.metadata["minhash_cluster_id"] >= 0


class CompleteClusterFiles(datatrove_base.PipelineStep):
    """After datatrove's cluster step: an empty .remove and .clusters file for every signature
    task that has none, so its filter task reads its documents' clusters rather than passing
    them on unlabelled (datatrove's filter does so where a task has no .remove file)."""

    name = "complete the cluster files"
    type = "🫂 - DEDUP"

    def __init__(self, folder: str, tasks: int):
        super().__init__()
        self.folder, self.tasks = folder, tasks

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        Path(self.folder).mkdir(parents=True, exist_ok=True)  # not made where nothing matched
        for task in range(self.tasks):
            for suffix in ("remove", "clusters"):
                (Path(self.folder) / f"{task:06d}.{suffix}").touch()
        yield from data or ()


class ChooseKeptCopies(datatrove_base.PipelineStep):
    """One task, after datatrove's filter: of each MinHash cluster, the member kept by the
    stage's rule (the highest quality where `prepared` rows are given, ties and otherwise the
    first in the order of `text`'s files and rows), the others written to
    minhash/removals.parquet as (id, duplicates). The members are what the filter tasks wrote,
    (id, cluster) under removed/ and kept/: the clusters are sets of documents that the task
    numbering does not change, only the numbers datatrove gives them and the root it keeps."""

    name = "choose each cluster's copy"
    type = "🫂 - DEDUP"

    def __init__(self, work: str, text: list[str], prepared: list[str]):
        super().__init__()
        self.work, self.text, self.prepared = work, text, prepared

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        work = Path(self.work)
        members = pa.concat_tables([read_cluster_members(work / "removed"),
                                    read_cluster_members(work / "kept")])
        position = pc.index_in(members.column("id"), value_set=read_ids(
            [Path(f) for f in self.text], "--input")).to_numpy(zero_copy_only=False)
        quality = np.zeros(len(members))
        if self.prepared:
            rows = pa.concat_tables(pq.read_table(f, columns=["id", QUALITY_COLUMN])
                                    .cast(pa.schema([("id", pa.string()),
                                                     (QUALITY_COLUMN, pa.float64())]))
                                    for f in self.prepared)
            quality = rows.column(QUALITY_COLUMN).take(
                pc.index_in(members.column("id"), value_set=rows.column("id"))).to_numpy()
        cluster = members.column("cluster").to_numpy()
        order = np.lexsort((position, -quality, cluster))  # a cluster's kept copy first
        cluster, ids = cluster[order], members.column("id").take(order)
        first = np.r_[True, cluster[1:] != cluster[:-1]]
        copy = np.flatnonzero(first)[np.cumsum(first) - 1]  # each member's cluster's first
        removed = np.flatnonzero(~first)
        write_table_atomic(pa.table({"id": ids.take(removed),
                                     "duplicates": ids.take(copy[removed])}),
                           work / MINHASH_REMOVALS)
        self.stat_update("removed", value=len(removed))
        yield from data or ()


def read_cluster_members(folder: Path) -> pa.Table:
    """(id, cluster) of the documents the MinHash filter tasks wrote into `folder`."""
    schema = pa.schema([("id", pa.string()), ("cluster", pa.int64())])
    files = sorted(folder.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f).select(schema.names).cast(schema)
                             for f in files]) if files else schema.empty_table()


def minhash_rounds(text: list[str], prepared: list[str], work: Path, config, tasks: int,
                   backend: str) -> list[tuple[list, int, str]]:
    """datatrove's four MinHash steps as executor rounds, (steps, tasks, unit), on the FineWeb
    shards `text` (one folder's, in name order): each filter task writes the documents it
    removes, and the ones its clusters keep, as (id, cluster) under `work`/removed and
    `work`/kept; then one task chooses each cluster's copy by the stage's rule (the quality of
    the `prepared` rows, when given). The signatures are `backend`'s (minhash.BACKENDS)."""
    from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster,
                                          MinhashDedupFilter)
    from datatrove.pipeline.filters import LambdaFilter
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    def shards():
        return ParquetReader(str(Path(text[0]).parent), glob_pattern="*.parquet",
                             text_key="text", id_key="id")

    signatures, buckets, clusters = (str(work / name) for name in ("signatures", "buckets",
                                                                   "clusters"))
    return [
        ([shards(), signature_step(backend, signatures, config)], tasks, "signature"),
        ([MinhashDedupBuckets(signatures, buckets, config=config)], config.num_buckets,
         "bucket"),
        ([MinhashDedupCluster(buckets, clusters, config=config, save_cluster_id=True),
          CompleteClusterFiles(clusters, tasks)], 1, "cluster"),
        ([shards(),
          MinhashDedupFilter(clusters, load_cluster_ids=True, exclusion_writer=ParquetWriter(
              str(work / "removed"), adapter=cluster_row)),
          LambdaFilter(in_a_cluster),
          ParquetWriter(str(work / "kept"), adapter=cluster_row)], tasks, "filter"),
        ([ChooseKeptCopies(str(work), text, prepared)], 1, "choice"),
    ]


def minhash_removals(work: Path) -> pa.Table:
    """The MinHash step's removals, (id, duplicates): the second the document its cluster
    keeps."""
    return pq.read_table(work / MINHASH_REMOVALS)


def prepared_survivors(path: str, removed: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A prepared shard's rows the text step kept: (ids, quality, features at unit length;
    read_dataset refuses a zero vector)."""
    ids = pq.read_table(path, columns=["id"]).column("id").cast(pa.string())
    rows = read_dataset([path])
    alive = np.asarray(pc.invert(pc.is_in(ids, value_set=removed)).to_numpy(zero_copy_only=False))
    features = rows.features[alive].astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    return (np.asarray(ids.to_numpy(zero_copy_only=False), dtype=object)[alive],
            rows.quality[alive], features)


def text_removed(output: Path, text: bool) -> pa.Array:
    """The ids the MinHash step removed (none where it did not run)."""
    if not text:
        return pa.array([], pa.string())
    return minhash_removals(output / MINHASH).column("id").combine_chunks()


class PlanRegions(datatrove_base.PipelineStep):
    """One task: the cuts into `regions` regions fitted on a sample of `sample` of the rows the
    text step kept (the config's seed), written to regions/tree.npz, and regions/plan.json (the
    rows); the route tasks then route every row by them."""

    name = "plan the regions"
    type = "🫂 - DEDUP"

    def __init__(self, config: DedupConfig, prepared: list[str], regions: int, sample: int):
        super().__init__()
        self.prepared, self.output = prepared, str(config.output)
        self.text = config.input is not None
        self.regions, self.sample, self.seed = regions, sample, config.seed

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output) / REGIONS
        shutil.rmtree(out, ignore_errors=True)  # what a killed plan or route left
        out.mkdir(parents=True)
        removed = text_removed(Path(self.output), self.text)
        alive = [pc.sum(pc.invert(pc.is_in(pq.read_table(p, columns=["id"]).column("id")
                                           .cast(pa.string()), value_set=removed))).as_py() or 0
                 for p in self.prepared]
        total = sum(alive)
        if total:  # else the text step removed every row: no region, no pair
            rng = np.random.default_rng(self.seed)
            chosen = np.sort(rng.choice(total, min(self.sample, total), replace=False))
            sample, offset = [], 0
            for path, count in zip(self.prepared, alive):
                mine = chosen[(chosen >= offset) & (chosen < offset + count)] - offset
                if len(mine):
                    sample.append(prepared_survivors(path, removed)[2][mine])
                offset += count
            with self.track_time("fit"):
                tree = NeighbourhoodTree.fit(np.concatenate(sample), self.regions)
            tree.save(out / TREE_FILE)
        write_json_atomic({"rows": total}, out / REGION_PLAN)
        yield from data or ()


class RouteRows(datatrove_base.PipelineStep):
    """Task r of N = the prepared shards r, r + N, ...: each shard's rows the text step kept,
    routed by the plan's cuts with the guests of those within the config's cut_margin of a cut
    (none for a negative margin), written to regions/REGION/SHARD.parquet (uncompressed: the pair tasks
    read them at once), so that a pair task holds one region at a time; then
    regions/SHARD.routed.json, the copies written."""

    name = "route the rows to their regions"
    type = "🫂 - DEDUP"

    def __init__(self, config: DedupConfig, prepared: list[str]):
        super().__init__()
        self.prepared, self.output = prepared, str(config.output)
        self.text, self.margin = config.input is not None, config.cut_margin()

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output) / REGIONS
        if not (out / TREE_FILE).is_file():  # no row left to route
            return
        tree = NeighbourhoodTree.load(out / TREE_FILE)
        removed = text_removed(Path(self.output), self.text)
        for index in range(rank, len(self.prepared), world_size):
            ids, quality, features = prepared_survivors(self.prepared[index], removed)
            with self.track_time("route"):
                rows, region, home = tree.spill(features, self.margin)
            for value in np.unique(region):
                mine = region == value
                (out / f"{value:05d}").mkdir(parents=True, exist_ok=True)
                flat = pa.array(np.ascontiguousarray(features[rows[mine]]).reshape(-1))
                write_table_atomic(pa.table({
                    "id": pa.array(ids[rows[mine]], pa.string()), "quality": quality[rows[mine]],
                    "features": pa.FixedSizeListArray.from_arrays(flat, features.shape[1]),
                    "home": home[mine]}),
                    out / f"{value:05d}" / f"{index:05d}.parquet", compression="none",
                    use_dictionary=["id"])
            write_json_atomic({"routed": len(rows)}, out / f"{index:05d}{ROUTED}")
            self.stat_update("rows", value=len(ids))
        yield from data or ()


def routed_rows(output: Path) -> dict | None:
    """The embedding step's rows and the copies the route tasks wrote, guests included (None
    where the step did not run)."""
    plan = output / REGIONS / REGION_PLAN
    if not plan.is_file():
        return None
    return {**json.loads(plan.read_text()), "routed": sum(
        json.loads(f.read_text())["routed"] for f in (output / REGIONS).glob(f"*{ROUTED}"))}


class FindPairs(datatrove_base.PipelineStep):
    """Task r of N = the regions r, r + N, ...: in each, read alone (its guests make it many times
    its own rows), the pairs of one of its own rows and any row in it whose cosine reaches the
    threshold, written to pairs/TASK.parquet (id, other, similarity, and the quality of each)."""

    name = "find near-duplicate embeddings"
    type = "🫂 - DEDUP"

    def __init__(self, output: str, threshold: float):
        super().__init__()
        self.output, self.threshold = output, threshold

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        folders = sorted(f for f in (Path(self.output) / REGIONS).iterdir()
                         if f.is_dir() and int(f.name) % world_size == rank)
        found = [PAIR_SCHEMA.empty_table()]
        for folder in folders:
            table = pa.concat_tables(pq.read_table(f) for f in sorted(folder.glob("*.parquet")))
            vectors = table.column("features").combine_chunks()
            features = vectors.flatten().to_numpy().reshape(len(table), vectors.type.list_size)
            own = np.flatnonzero(table.column("home").to_numpy())
            with self.track_time("region"):
                first, second, sims = similar_pairs(features, own, self.threshold)
            ids, quality = table.column("id"), table.column("quality")
            found.append(pa.table({
                "id": ids.take(own[first]), "other": ids.take(second),
                "similarity": pa.array(sims, pa.float32()),
                "quality": quality.take(own[first]), "other_quality": quality.take(second)},
                schema=PAIR_SCHEMA))
            self.stat_update("pairs", value=len(sims))
        written = Path(self.output) / PAIRS / f"{rank:05d}.parquet"
        written.parent.mkdir(exist_ok=True)
        remove_temporaries(written)  # what a killed attempt at this task left
        write_table_atomic(pa.concat_tables(found), written)
        yield from data or ()


def embedding_removals(tables: list[pa.Table]) -> pa.Table:
    """keep_first over the pair tasks' pairs: (id, duplicates, similarity) of each row removed."""
    pairs = pa.concat_tables([t.cast(PAIR_SCHEMA) for t in tables])
    ids = pa.concat_arrays([pairs.column("id").combine_chunks(),
                            pairs.column("other").combine_chunks()])
    names, at = np.unique(np.asarray(ids.to_numpy(zero_copy_only=False), dtype=object),
                          return_inverse=True)
    quality = np.empty(len(names), np.float64)
    quality[at] = np.concatenate([pairs.column("quality").to_numpy(),
                                  pairs.column("other_quality").to_numpy()])
    removed, copied, sims = keep_first(names, quality, at[:len(pairs)], at[len(pairs):],
                                       pairs.column("similarity").to_numpy())
    return pa.table({"id": pa.array(names[removed], pa.string()),
                     "duplicates": pa.array(names[copied], pa.string()),
                     "similarity": pa.array(sims, pa.float32())})


def remove_working_files(output: Path) -> None:
    """The bulky copies the keep-list no longer needs, MinHash signatures and region rows, with
    the markers of the rounds that wrote them: a later rerun that finds a task's output missing
    writes them again."""
    for folder in (MINHASH + "/signatures", REGIONS, "logs/signatures/completions",
                   "logs/region_plans/completions", "logs/routes/completions"):
        shutil.rmtree(output / folder, ignore_errors=True)


def finished(output: Path) -> bool:
    return all((output / name).is_file() for name in (KEEP_FILE, REMOVALS_FILE, MANIFEST))


def removal_rows(found: pa.Table, reason: str) -> pa.Table:
    """A step's removals (id, duplicates, and similarity where it measures one) as rows of
    removals.parquet."""
    similarity = (found.column("similarity") if "similarity" in found.column_names
                  else pa.nulls(len(found), pa.float32()))
    return pa.table({"id": found.column("id"), "reason": pa.array([reason] * len(found),
                                                                  pa.string()),
                     "duplicates": found.column("duplicates"), "similarity": similarity})


class WriteKeepList(datatrove_base.PipelineStep):
    """One task: keep.parquet (every id of the input `files` once, in input order, and whether it
    stays), removals.parquet (each removed id in input order, its reason and the id it
    duplicates), then manifest.json (`manifest` and the counts); the working copies removed.
    `pairs`: the pair tasks whose pairs it reads (0: no embedding step). A keep-list already
    written is not written again."""

    name = "write the keep-list"
    type = "🫂 - DEDUP"

    def __init__(self, config: DedupConfig, files: list[str], pairs: int, manifest: dict):
        super().__init__()
        self.text, self.output = config.input is not None, str(config.output)
        self.files, self.flag = files, "--input" if self.text else "--prepared"
        self.pairs, self.manifest = pairs, manifest

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output)
        if not finished(out):
            for name in (KEEP_FILE, REMOVALS_FILE, MANIFEST):
                remove_temporaries(out / name)  # what a killed merge left
            ids = read_ids([Path(f) for f in self.files], self.flag)
            parts = []
            if self.text:
                found = minhash_removals(out / MINHASH)
                parts.append(removal_rows(found, "minhash"))
            if self.pairs:
                found = embedding_removals([pq.read_table(out / PAIRS / f"{task:05d}.parquet")
                                            for task in range(self.pairs)])
                parts.append(removal_rows(found, "embedding"))
            removals = pa.concat_tables(parts)
            at = pc.index_in(removals.column("id"), value_set=ids)
            if at.null_count or len(pc.unique(removals.column("id"))) != len(removals):
                raise UserError(f"{out}: the steps removed an id twice or one the input does not "
                                f"hold; delete the output folder and rerun")
            removals = removals.take(pc.sort_indices(at))  # in input order
            keep = pc.invert(pc.is_in(ids, value_set=removals.column("id")))
            write_table_atomic(pa.table({"id": ids, "keep": keep}), out / KEEP_FILE)
            write_table_atomic(removals, out / REMOVALS_FILE)
            reasons = removals.column("reason").to_pylist()
            manifest = {**self.manifest, "kept": len(ids) - len(removals),
                        "routed": routed_rows(out),
                        "removed": {r: reasons.count(r) for r in ("minhash", "embedding")},
                        "stage_wall_s": round(time.time() - self.manifest["started_at"], 3)}
            write_json_atomic(manifest, out / MANIFEST)
            self.stat_update("removed", value=len(removals))
        remove_working_files(out)
        yield from data or ()


def run_dedup(config: DedupConfig) -> dict:
    """MinHash on the FineWeb shards in folder `input`, then near-duplicate embeddings among the
    prepared rows in folder `prepared` that it kept (either step alone where the other's input is
    None), written as one keep-list in `output`, in `tasks` executor tasks (None: `workers`), the
    signatures by the library `minhash` at `hash_precision` bits (None: its own); returns
    manifest.json's content (for Slurm, which returns at submission, the submission).
    Everything is checked before any work; a rerun of a finished run returns at once."""
    fineweb, prepared, output, sample = (config.input, config.prepared, config.output,
                                         config.sample)
    check_executor(config.executor, config.workers, config.cluster)
    precision = check_backend(config.minhash, config.hash_precision)
    tasks = config.workers if config.tasks is None else config.tasks
    text_files, prepared_files, ids, prepared_ids, regions = [], [], None, None, 0
    if fineweb is not None:
        if not Path(fineweb).is_dir():
            raise UserError(f"--input {fineweb}: not a folder; give the folder of FineWeb "
                            f"Parquet shards")
        text_files = parquet_files([str(fineweb)])
        check_distinct_files(text_files)
        for path in text_files:
            check_text_shard(path)
        ids = read_ids(text_files, "--input")
    if prepared is not None:
        prepared_files = parquet_files([str(prepared)], "--prepared")
        check_distinct_files(prepared_files, "--prepared")
        rows = check_prepared(prepared_files)
        prepared_ids = read_ids(prepared_files, "--prepared")
        if ids is not None and not same_rows(ids, prepared_ids):
            raise UserError(f"--prepared {prepared}: its {len(prepared_ids)} rows are not the "
                            f"{len(ids)} rows of --input {fineweb}; give the rows prepare made "
                            f"of these shards")
        if sample is not None and sample > rows:
            raise UserError(f"--sample {sample}: more rows than the {rows} of --prepared "
                            f"{prepared}")
        regions = block_count(rows, config.region_rows)
        sample = sample or region_sample(rows, regions)
    check_paths({"--input": [fineweb, *text_files] if fineweb else None,
                 "--prepared": [prepared, *prepared_files] if prepared else None},
                folders={"--output": output})
    text_tasks = min(tasks, len(text_files))
    pair_tasks = min(tasks, regions) if prepared is not None else 0
    settings = {
        "minhash": {"backend": config.minhash, "n_grams": config.n_grams,
                    "num_buckets": config.num_buckets,
                    "hashes_per_bucket": config.hashes_per_bucket, "hash_precision": precision,
                    "tasks": text_tasks} if fineweb is not None else None,
        "embedding": {"threshold": config.threshold, "region_rows": config.region_rows,
                      "regions": regions, "region_pairs": config.region_pairs,
                      "guest_margin": config.guest_margin, "sample": sample, "seed": config.seed,
                      "tasks": pair_tasks, "route_tasks": min(tasks, len(prepared_files))}
        if prepared is not None else None}
    recorded = {"inputs": file_stats(text_files + prepared_files), **settings}
    manifest = {"input": {"text": str(Path(fineweb).absolute()) if fineweb else None,
                          "prepared": str(Path(prepared).absolute()) if prepared else None,
                          "rows": len(ids if ids is not None else prepared_ids)},
                **settings, "executor": config.executor, "started_at": time.time(),
                "output": str(output)}
    with leave_as_found([output], keep_on_interrupt=[output]):
        output.mkdir(parents=True, exist_ok=True)
        start_or_resume(output / "config.json", recorded, [
            output / name for name in (MINHASH, REGIONS, PAIRS, "logs", KEEP_FILE,
                                       REMOVALS_FILE, MANIFEST)])
        if not finished(output):  # else a rerun of a finished run: no executor is started
            with engine_session(config):
                jobs = _run_steps(config, text_files, prepared_files, settings, manifest)
            if jobs:  # Slurm: submitted; the merge job writes the keep-list
                return {"submitted": True, **jobs, "output": str(output)}
        remove_working_files(output)
    return json.loads((output / MANIFEST).read_text())


def _run_steps(config: DedupConfig, text_files: list[Path], prepared_files: list[Path],
               settings: dict, manifest: dict) -> dict | None:
    """The rounds of run_dedup once everything is checked (`settings`: its defaults resolved):
    MinHash's four, then the region plan and the pair tasks, then the keep-list (absolute paths:
    cluster workers do not start in this folder). On Slurm the job ids, by round."""
    children_die_with_parent()  # a kill -9 of this command leaves no executor process behind
    config = dataclasses.replace(config, output=config.output.absolute())
    out = config.output
    text, embedding = settings["minhash"], settings["embedding"]
    rounds = []
    text_paths, prepared = ([str(f.absolute()) for f in files]
                            for files in (text_files, prepared_files))
    if text:
        hashing = minhash_config(text["n_grams"], text["num_buckets"], text["hashes_per_bucket"],
                                 text["hash_precision"])
        rounds += minhash_rounds(text_paths, prepared, out / MINHASH, hashing, text["tasks"],
                                 text["backend"])
    if embedding:
        rounds += [([PlanRegions(config, prepared, embedding["regions"], embedding["sample"])],
                    1, "region_plan"),
                   ([RouteRows(config, prepared)], embedding["route_tasks"], "route"),
                   ([FindPairs(str(out), embedding["threshold"])], embedding["tasks"], "pair")]
    merge = WriteKeepList(config, text_paths or prepared, embedding["tasks"] if embedding else 0,
                          manifest)
    jobs = run_then_merge(config, rounds, [merge], out / "logs", "dedup")
    if not jobs:
        return None
    ids = [jobs["tasks_job"], *jobs.get("round_jobs", [])]
    return {**{f"{unit}s_job": job for (_, _, unit), job in zip(rounds, ids)},
            "merge_job": jobs["merge_job"]}

"""Stage 2, select: any registered selector over the prepared rows, in independent blocks.

The paper optimises random blocks of rows independently; here each block is one task of a datatrove
executor (LocalPipelineExecutor by default, SlurmPipelineExecutor or RayPipelineExecutor on a
cluster), and one more task merges the blocks into a selection keyed by id. Files, under --output:
  plan.parquet       chunk_id -> block (a seeded permutation cut into near-equal blocks; with
                     --partition neighbourhood the leaves of a NeighbourhoodTree fitted on a
                     seeded sample of --partition_sample rows' features, every row routed) and
                     each block's budget: the whole input's budget(select_ratio, N) split over
                     the blocks by largest remainder on their rows, so the blocks select exactly
                     it; with --stratify each row's stratum and each block's budget per stratum
  term_scale.json    with several blocks and a selector that weighs quality against diversity
                     (it takes `term_scale`: the learner, joint-greedy), the whole input's term
                     scale, fitted once by one task on a seeded sample of the rows (all of them
                     up to SCALE_SAMPLE) as the report fits its own; every block and every part
                     of the merge round scores on it, so lamb means there what it means on the
                     whole input (a one-block run's selector fits its own on all rows)
  blocks/NNNNN.*     one block's selection (Parquet) and its summary (JSON: rows, time, and
                     the learner's steps, stop and objectives: docs/select.md#what-a-run-did)
  selection.parquet  chunk_id, id, selected, score, block: every prepared row exactly once
  summary.json       counts and selector time; logs/ holds datatrove's logs and completions
A re-run with the same configuration and unchanged prepared files skips finished blocks
(datatrove's completions); anything else clears them first.

--merge_ratio R adds a second round across the blocks (GreeDi, Mirzasoleiman et al. 2013): each
block selects R of its rows instead of select_ratio; one planning task cuts the union of those
picks into parts of about --merge_rows rows (the block size unless given), neighbours together
(principal-direction cuts fitted on a sample of the union, so near-copies from different blocks
meet) or at random (--merge_partition); each part selects its share of the same count one round
would select (its blocks' count at R: budget(R, N), split the same way), on the same executor,
resumable the same way. Files added:
  union_plan.parquet  chunk_id -> union part of every pick, and each part's budget
  unions/NNNNN.*      one part's selection and summary, as blocks/
and selection.parquet's `union` column (-1 for rows the blocks did not pick); `selected` and
`score` then come from the merge round.

--stratify COLUMN splits the whole input's budget k = budget(select_ratio, N) over COLUMN's values
by largest remainder (datamask.stratify), then each stratum's part over the blocks by largest
remainder on its rows in each block; a block selects per stratum with those budgets. So the
selection's count of every stratum is the whole input's share to the row, whatever the blocks.
The column comes from the prepared shards when they hold it, else from the FineWeb shards of
--strata_from, looked up by the string `id` that prepare keeps.

--keep DIR, a keep-list of the dedup stage made of these rows (refused before any work where it
is of other rows or unfinished), leaves the rows it removes out of everything: N above is the
rows it keeps, and only those are planned, sampled, stratified and selected. The plan lists only
them (its metadata's `removed` tells the tasks to drop the others as they read the shards);
selection.parquet still holds every prepared row, a removed one not selected, score 0, block
(and union) -1; summary.json names the keep-list and its `removed_by_keep` count.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import (
    FEATURE_COLUMN,
    ID_COLUMN,
    Dataset,
    NeighbourhoodTree,
    atomic_output,
    block_count,
    budget,
    check_unique_ids,
    dataset_table,
    id_array,
    random_blocks,
    read_column,
    read_dataset,
    write_json_atomic,
    write_table_atomic,
)
from datamask.errors import UserError
from datamask.options import REQUIRED, Range, option, validate
from datamask.paths import check_paths, leave_as_found
from datamask.processes import children_die_with_parent
from datamask.shared import require
from datamask.stratify import largest_remainder, select_stratified, strata_of

from .common import (
    check_distinct_files,
    check_prepared,
    file_stats,
    parquet_files,
    parse_method,
)
from .dedup import KEEP_FILE, read_ids, removed_ids
from .engines import Executed, check_executor, engine_session, run_then_merge, start_or_resume

datatrove_base = require("datatrove.pipeline.base", "select (block executors)")


def selector_params(name: str, params: dict) -> dict:
    """Check the name and every option now, in this process (not inside a worker, where the
    error would reach the user as an executor's log), and silence the learner's progress bar."""
    from datamask.selectors import make_selector, selector_class

    if "progress" in getattr(selector_class(name), "RUN_OPTIONS", ()):
        params = {"progress": False, **params}
    make_selector(name, **params)  # validates every option; the workers build their own
    return params


UNION_PLAN = "union_plan.parquet"
SCATTERED = "scattered"  # the blocks' rows, written by the scatter round; removed by the merge
UNION_ROWS = "union_rows"  # the merge round parts' rows, written by its planning task; the same
SCALE_ROWS = "scale_rows"  # the term scale's sample rows, written by the scatter round; the same
TERM_SCALE = "term_scale.json"  # the whole input's term scale, written by the scale task
# rows the whole input's term scale is fitted on: every row up to this many (the report's own
# scale then), else a seeded sample of it, the size up to which the learner's greedy starts fit
# theirs on full-budget masks over all rows
SCALE_SAMPLE = 20_000
PARTITIONS = ("neighbourhood", "random")  # how the rows are cut into blocks, the union into parts
# rows the neighbourhood cuts are fitted on (the input's for the blocks, the union's for the merge
# round's parts): the planning step holds this many rows' features whatever the input's size
TREE_SAMPLE = 50_000


@dataclasses.dataclass(kw_only=True)
class SelectConfig(Executed):
    """The select stage's settings: `pipeline select`'s flags, help and range checks are
    generated from these fields (datamask.options), and a config that breaks one is refused,
    naming the flag, when it is made. The executor's come from the shared executor flags."""

    input: tuple[Path, ...] = option(REQUIRED, "prepared Parquet files or folders")
    output: Path = option(REQUIRED, "folder for this method's selection")
    method: str = option(REQUIRED, "NAME or NAME:key=value,... with a registered selector's "
                                   "options, e.g. datamask:n_epochs=500,lamb=0.5 (list: "
                                   "datamask pipeline methods)")
    select_ratio: float = option(0.25, "fraction of the input to select, split over the blocks "
                                       "by their rows; the pipeline's share, where `datamask "
                                       "select` takes 0.1 of one shard",
                                 within=Range(0.0, 1.0, open_low=True, open_high=True))
    block_size: int = option(0, "rows per block, 0 for one block (paper: 1M)", within=Range(0))
    seed: int = option(0, "seed of the row-to-block assignment")
    partition: str = option("random", "how the rows are cut into blocks: random (a seeded "
                                      "permutation) or neighbourhood (near rows together, so a "
                                      "block is a region of the space: for coverage objectives "
                                      "such as Facility)", choices=PARTITIONS)
    partition_sample: int | None = option(None, "rows whose features the neighbourhood cuts are "
                                                "fitted on, a seeded sample",
                                          within=Range(0), metavar="N",
                                          default_text="all rows up to 50,000")
    stratify: str | None = option(None, "split the whole input's budget over this column's "
                                        "values in proportion to the input, to the row, and "
                                        "select each part within its stratum", metavar="COLUMN")
    strata_from: tuple[Path, ...] | None = option(
        None, "FineWeb shards (files or folders) holding the --stratify column, looked up by "
              "id; needed when the prepared shards lack it", metavar="DIR")
    merge_ratio: float = option(0.0, "a second round across blocks: each block selects this "
                                     "share, then the union of their picks the budget; above "
                                     "--select_ratio, 0 for none")
    merge_rows: int = option(0, "rows per part of the merge round, 0 for the block size",
                             within=Range(0))
    merge_partition: str = option("neighbourhood", "how the union is cut into parts: "
                                                   "neighbourhood (near rows together) or random",
                                  choices=PARTITIONS)
    keep: Path | None = option(None, "a keep-list of these prepared rows (`dedup`'s output "
                                     "folder): the rows it removes are not selected and count "
                                     "toward no budget")
    def __post_init__(self):
        validate(self)

    def check_together(self) -> None:
        """The rules between flags, all checked before any file is read."""
        check_merge_ratio(self.select_ratio, self.merge_ratio)
        if self.merge_rows and not self.merge_ratio:
            raise UserError("--merge_rows sizes the merge round's parts; give --merge_ratio too")
        if self.partition_sample is not None and self.partition != "neighbourhood":
            raise UserError("--partition_sample sizes the sample the neighbourhood blocks are "
                            "fitted on; give --partition neighbourhood too")
        if self.strata_from and not self.stratify:
            raise UserError("--strata_from names where the --stratify column is; give "
                            "--stratify")

    def merge(self, n_blocks: int) -> dict:
        """The merge round's settings as config.json and summary.json record them, its parts'
        rows resolved (none for one block: nothing to merge)."""
        if not (self.merge_ratio and n_blocks > 1):
            return {}
        return {"merge_ratio": self.merge_ratio, "merge_rows": self.merge_rows or self.block_size,
                "merge_partition": self.merge_partition}


def check_merge_ratio(select_ratio: float, merge_ratio: float) -> None:
    """--merge_ratio: none (0), or a share of each block above --select_ratio, at most all."""
    if merge_ratio > 1:
        raise UserError(f"--merge_ratio {merge_ratio}: must be at most 1 (the share of each "
                        f"block kept for the merge round)")
    if merge_ratio and not select_ratio < merge_ratio:
        raise UserError(f"--merge_ratio {merge_ratio}: must be above --select_ratio "
                        f"{select_ratio} (each block keeps more than its share, for the merge "
                        f"round to choose from)")


@dataclasses.dataclass
class BlockPlan:
    """What a plan file (plan.parquet, union_plan.parquet) says beside its rows, kept as JSON in
    its Parquet schema metadata: the blocks (or the merge round's parts), each one's budget, or
    with --stratify its budget per stratum (`strata`: {"values": [...], "budgets": one list of
    per-block budgets per value}; before a merge round `final_strata`, the whole selection's, for
    the merge round), and how many prepared rows a keep-list left out (`removed`)."""

    n_blocks: int
    budgets: list[int] | None = None
    strata: dict | None = None
    final_strata: dict | None = None
    removed: int = 0

    def to_metadata(self) -> dict[str, str]:
        metadata = {"n_blocks": str(self.n_blocks)}
        if self.removed:
            metadata["removed"] = str(self.removed)
        for key in ("budgets", "strata", "final_strata"):
            if getattr(self, key) is not None:
                metadata[key] = json.dumps(getattr(self, key))
        return metadata

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> "BlockPlan":
        metadata = metadata or {}
        loaded = {key: json.loads(metadata[key.encode()])
                  for key in ("budgets", "strata", "final_strata") if key.encode() in metadata}
        return cls(int(metadata[b"n_blocks"]), removed=int(metadata.get(b"removed", 0)), **loaded)

    @classmethod
    def read(cls, path: Path | str) -> "BlockPlan":
        return cls.from_metadata(pq.read_schema(path).metadata)

    def write(self, table: pa.Table, path: Path) -> pa.Table:
        """`table` (the plan's rows) written to `path` with this plan as its metadata."""
        table = table.replace_schema_metadata(self.to_metadata())
        write_table_atomic(table, path)
        return table

    def picks(self) -> int:
        """The rows the blocks select together."""
        return int(np.sum(self.strata["budgets"] if self.strata else self.budgets))

    def stratum_budgets(self, block: int) -> dict:
        """One block's budget of each stratum value."""
        return dict(zip(self.strata["values"], np.asarray(self.strata["budgets"])[:, block]))


def rows_in(data: Dataset, wanted: np.ndarray) -> Dataset:
    """The rows of `data` whose ids are among `wanted`, in their order."""
    mine = np.isin(data.ids, wanted)
    return Dataset(data.ids[mine], data.quality[mine], data.features[mine])


def planned_rows(rows: Dataset, plan: pa.Table) -> Dataset:
    """The rows of `rows` that `plan` lists: where a keep-list removed rows (the plan's `removed`)
    those are in no block; else every prepared row is, and nothing is filtered, so a run without
    a keep-list reads its rows as it always did."""
    if not BlockPlan.from_metadata(plan.schema.metadata).removed:
        return rows
    return rows_in(rows, plan.column(ID_COLUMN).to_numpy())


def prepared_rows(prepared: list[str], wanted: np.ndarray):
    """The rows of `wanted` ids as a core Dataset, in prepared-file then row order."""
    parts = [rows_in(read_dataset([path]), wanted) for path in prepared]
    return Dataset(np.concatenate([p.ids for p in parts]),
                   np.concatenate([p.quality for p in parts]),
                   np.ascontiguousarray(np.concatenate([p.features for p in parts])))


class ScatterRows(datatrove_base.PipelineStep):
    """The round before the blocks, where there are several: task r reads its contiguous share of
    the prepared shards once and writes each block's rows of them to scattered/BLOCK/r.parquet,
    so that a block's task reads its own rows (in prepared order) instead of every shard; where
    the plan marks a term scale sample not fitted yet, its rows too, to scale_rows/00000/."""

    name = "scatter rows to blocks"
    type = "🎯 - SELECT"

    def __init__(self, prepared: list[str], plan: str, output: str, tasks: int):
        super().__init__()
        self.prepared, self.plan, self.output, self.tasks = prepared, plan, output, tasks

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out, name = Path(self.output), f"{rank:05d}.parquet"
        sampled = ("scale_sample" in pq.read_schema(self.plan).names
                   and not (out / TERM_SCALE).exists())
        plan = pq.read_table(self.plan, columns=[ID_COLUMN, "block"]
                             + (["scale_sample"] if sampled else []))
        planned, blocks = plan.column(ID_COLUMN).to_numpy(), plan.column("block").to_numpy()
        in_sample = plan.column("scale_sample").to_numpy() if sampled else None
        missing = unfinished(out / "blocks", int(blocks.max()) + 1)
        if len(missing) or sampled:  # a rerun scatters only what a task still to run needs
            with rows_by_group(out / SCATTERED, name) as add, \
                    rows_by_group(out / SCALE_ROWS, name) as add_sample:
                for index in np.array_split(np.arange(len(self.prepared)), self.tasks)[rank]:
                    rows = planned_rows(read_dataset([self.prepared[index]]), plan)
                    at = positions(planned, rows.ids)
                    add(blocks[at], rows, np.isin(blocks[at], missing))
                    if sampled:  # group 0, the sample; -1, the rows outside it, not written
                        add_sample(np.where(in_sample[at], 0, -1), rows, in_sample[at])
                    self.stat_update("rows", value=len(rows))
        yield from data or ()


class FitTermScale(datatrove_base.PipelineStep):
    """One task between the scatter round and the blocks: the whole input's term scale, fitted
    once on the plan's scale sample exactly as the report fits its own (`datamask.report.Report`:
    full-budget masks at select_ratio, the selector's metric and seed), written to term_scale.json
    for every block and part of the merge round to score on."""

    name = "fit the term scale"
    type = "🎯 - SELECT"

    def __init__(self, output: str, method: str, params: dict, select_ratio: float):
        super().__init__()
        self.output, self.method, self.params = output, method, params
        self.select_ratio = select_ratio

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output)
        if not (out / TERM_SCALE).exists():  # a rerun keeps the scale it fitted
            sample = group_rows(out / SCALE_ROWS, 0)
            scale = whole_input_scale(sample, self.method, self.params, self.select_ratio)
            write_json_atomic({**dataclasses.asdict(scale), "sample_rows": len(sample)},
                              out / TERM_SCALE)
            self.stat_update("rows", value=len(sample))
        yield from data or ()


def whole_input_scale(sample: Dataset, method: str, params: dict, select_ratio: float):
    """The term scale the report fits on `sample` (a seeded sample of the whole input, or all of
    it) for the selector's metric (`algorithm`) and `seed`, at budget(select_ratio, rows)."""
    from datamask.report import Report
    from datamask.selectors import make_selector

    options = make_selector(method, **params).params
    metric = options["algorithm"]
    report = Report(sample, select_ratio, options["lamb"], seed=options["seed"], metrics=(metric,))
    return report.joint(metric).scale


def takes_term_scale(method: str) -> bool:
    """Whether the selector weighs quality against diversity on a scale it can be given."""
    from datamask.selectors import selector_class

    return any(f.name == "term_scale" for f in dataclasses.fields(selector_class(method).Options))


def read_term_scale(path: Path) -> tuple:
    """term_scale.json as the selectors' `term_scale` option: TermScale's fields in order."""
    from datamask.objectives import TermScale

    stored = json.loads(path.read_text())
    return tuple(stored[f.name] for f in dataclasses.fields(TermScale))


def unfinished(folder: Path, n_blocks: int) -> np.ndarray:
    """The blocks of a round whose selection is not written yet."""
    return np.array([b for b in range(n_blocks) if not (folder / f"{b:05d}.parquet").exists()],
                    np.int64)


@contextmanager
def rows_by_group(folder: Path, name: str):
    """`add(groups, rows, wanted)` appends each row (of those `wanted`, a bool mask) to
    folder/GROUP/name, one Parquet file per group, each renamed into place only when the `with`
    ends without an error."""
    with ExitStack() as files:
        writers = {}

        def add(groups: np.ndarray, rows: Dataset, wanted: np.ndarray | None = None) -> None:
            for group in np.unique(groups if wanted is None else groups[wanted]):
                keep = groups == group
                table = dataset_table(Dataset(rows.ids[keep], rows.quality[keep],
                                              rows.features[keep]))
                if group not in writers:
                    (folder / f"{group:05d}").mkdir(parents=True, exist_ok=True)
                    path = files.enter_context(atomic_output(folder / f"{group:05d}" / name))
                    writers[group] = files.enter_context(pq.ParquetWriter(path, table.schema))
                writers[group].write_table(table)

        yield add


def group_rows(folder: Path, group: int) -> Dataset:
    """A group's rows as rows_by_group wrote them, in the order they were added (none where no
    row went to the group)."""
    files = sorted((folder / f"{group:05d}").glob("*.parquet"))
    if not files:
        return Dataset(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 0), np.float32))
    return read_dataset(files)


class SelectBlocks(datatrove_base.PipelineStep):
    """One task = one block of a plan (the first round's blocks, or the merge round's parts of
    the union): read its rows (the prepared shards for one block, else what the scatter round or
    the merge round's planning task wrote for it), select its budget, write. The budget is the
    plan's `budgets` entry (per stratum with --stratify), else, for one block, select_ratio of
    its rows (the round's: `select_ratio`); with `term_scale` (a term_scale.json) the selector
    scores on that scale. `config` is the stage's, its output absolute."""

    name = "select a block"
    type = "🎯 - SELECT"

    def __init__(self, config: SelectConfig, prepared: list[str], plan: str, params: dict,
                 select_ratio: float, group: str = "block", term_scale: str | None = None):
        super().__init__()
        self.prepared, self.plan, self.output = prepared, plan, str(config.output)
        self.method, self.params = parse_method(config.method)[0], params
        self.select_ratio = select_ratio
        self.stratify, self.group, self.term_scale = config.stratify, group, term_scale

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from datamask.selectors import make_selector

        blocks = BlockPlan.read(self.plan)
        n_blocks, budgets = blocks.n_blocks, blocks.budgets
        plan = pq.read_table(self.plan, columns=[ID_COLUMN, "stratum"]) if self.stratify else None
        params = self.params
        if self.term_scale:
            params = {**params, "term_scale": read_term_scale(Path(self.term_scale))}
        for block in range(rank, n_blocks, world_size):
            if self.group == "union":
                rows = group_rows(Path(self.output) / UNION_ROWS, block)
            elif n_blocks > 1:
                rows = group_rows(Path(self.output) / SCATTERED, block)
            else:  # one block: every planned prepared row
                rows = planned_rows(read_dataset(self.prepared),
                                    pq.read_table(self.plan, columns=[ID_COLUMN]))
            with self.track_time(self.group):
                selector = make_selector(self.method, **params)
                if self.stratify:
                    selection = select_stratified(selector, rows, rows_strata(plan, rows.ids),
                                                  self.select_ratio, self.stratify,
                                                  blocks.stratum_budgets(block))
                elif budgets is None:
                    selection = selector.select(rows, self.select_ratio)
                else:
                    selection = select_count(selector, rows, budgets[block], self.select_ratio)
            out = Path(self.output) / f"{self.group}s"
            selection.write(out / f"{block:05d}.parquet", ID_COLUMN)
            summary = {self.group: block, "rows": len(rows),
                       "selected": int(selection.selected.sum()),
                       "wall_time_s": selection.wall_time_s, **selection.run}
            if self.stratify:  # the learner's run fields are per stratum
                summary["strata"] = selection.params["strata"]
            write_json_atomic(summary, out / f"{block:05d}.json")
            self.stat_update("rows", value=len(rows))
            self.stat_update("selected", value=int(selection.selected.sum()))
        yield from data or ()


def select_count(selector, rows, k: int, select_ratio: float):
    """`selector`'s k of `rows`; none or all without running it where there is nothing to choose
    (a part of the union can hold fewer rows than its budget needs to leave a choice)."""
    from datamask.selectors import Selection

    if 0 < k < len(rows):
        return selector.select(rows, k / len(rows))  # budget(k / n, n) == k
    return Selection(selector.name, rows.ids, np.full(len(rows), k == len(rows)),
                     np.zeros(len(rows), np.float32),
                     {**selector.params, "select_ratio": select_ratio}, 0.0)


class PlanUnion(datatrove_base.PipelineStep):
    """One task between the rounds: the union of the blocks' picks cut into the merge round's
    parts, neighbours together (cuts fitted on a sample of the union, then every pick routed shard
    by shard) or at random, and each part's budget: the whole selection's count, per stratum with
    --stratify, split over the parts by largest remainder on their union rows."""

    name = "plan the merge round"
    type = "🎯 - SELECT"

    def __init__(self, config: SelectConfig, prepared: list[str], plan: str, parts: int,
                 count: int):
        super().__init__()
        self.prepared, self.plan, self.output = prepared, plan, str(config.output)
        self.parts, self.partition, self.seed = parts, config.merge_partition, config.seed
        self.count, self.stratify = count, config.stratify

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output)
        missing = unfinished(out / "unions", self.parts)
        if (out / UNION_PLAN).exists() and not len(missing):  # a rerun of a finished round
            return
        blocks = BlockPlan.read(self.plan)
        picks = read_round(out / "blocks", blocks.n_blocks, "block")
        union = np.sort(picks.filter(picks.column("selected")).column(ID_COLUMN).to_numpy())
        part = self.cut(union, out / UNION_ROWS, missing)
        table = pa.table({ID_COLUMN: id_array(union), "union": pa.array(part)})
        parts = BlockPlan(self.parts)
        if self.stratify:
            strata = rows_strata(pq.read_table(self.plan, columns=[ID_COLUMN, "stratum"]), union)
            table = table.append_column("stratum", pa.array(strata))
            final = blocks.final_strata
            parts.strata = {"values": final["values"], "budgets": [
                split(total, np.bincount(part[strata == value], minlength=self.parts))
                for value, total in zip(final["values"], np.sum(final["budgets"], axis=1))]}
        else:
            parts.budgets = split(self.count, np.bincount(part, minlength=self.parts))
        parts.write(table, out / UNION_PLAN)
        yield from data or ()

    def cut(self, union: np.ndarray, folder: Path, missing: np.ndarray) -> np.ndarray:
        """Each union id's part (int32), in one pass over the prepared shards that writes the
        rows of the `missing` parts to folder/PART/ on the way."""
        part = np.empty(len(union), np.int32)
        if self.partition == "random":
            for index, rows in enumerate(random_blocks(len(union), self.parts, self.seed)):
                part[rows] = index
        else:
            rng = np.random.default_rng(self.seed)
            sample = union[rng.choice(len(union), min(TREE_SAMPLE, len(union)), replace=False)]
            tree = NeighbourhoodTree.fit(prepared_rows(self.prepared, sample).features,
                                         self.parts)
        with rows_by_group(folder, "00000.parquet") as add:
            for path in self.prepared:
                rows = rows_in(read_dataset([path]), union)
                at = np.searchsorted(union, rows.ids)
                if self.partition != "random":
                    part[at] = tree.route(rows.features)
                add(part[at], rows, np.isin(part[at], missing))
        return part


def split(total: int, sizes: np.ndarray) -> list[int]:
    """largest_remainder, with nothing to split over parts that hold no rows."""
    return largest_remainder(total, sizes).tolist() if total else [0] * len(sizes)


def read_round(folder: Path, n_blocks: int, group: str) -> pa.Table:
    """Every block's selection of one round, with its block number in column `group`."""
    tables = []
    for block in range(n_blocks):
        path = folder / f"{block:05d}.parquet"
        if not path.exists():
            raise UserError(f"{path}: {group} {block} has no selection; its task did not finish")
        tables.append(pq.read_table(path).append_column(
            group, pa.array(np.full(pq.read_metadata(path).num_rows, block, np.int32))))
    return pa.concat_tables(tables)


def round_times(folder: Path, n_blocks: int) -> list[float]:
    return [json.loads((folder / f"{b:05d}.json").read_text())["wall_time_s"]
            for b in range(n_blocks)]


class MergeBlocks(datatrove_base.PipelineStep):
    """One task: join the blocks into selection.parquet, checking every planned id appears once;
    after a merge round, the union's parts decide which of the blocks' picks stay selected."""

    name = "merge block selections"
    type = "🎯 - SELECT"

    def __init__(self, prepared: list[str], plan: str, output: str, summary: dict):
        super().__init__()
        self.prepared, self.plan, self.output, self.summary = prepared, plan, output, summary

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output)
        plan = pq.read_table(self.plan)
        blocks = BlockPlan.from_metadata(plan.schema.metadata)
        n_blocks = blocks.n_blocks
        merged = read_round(out / "blocks", n_blocks, "block")
        times = round_times(out / "blocks", n_blocks)
        planned = plan.column(ID_COLUMN).to_numpy()
        got = merged.column(ID_COLUMN).to_numpy()
        if len(got) != len(planned) or not np.array_equal(np.sort(got), np.sort(planned)):
            missing = np.setdiff1d(planned, got)
            raise UserError(f"{out}: the blocks hold {len(got)} rows for {len(planned)} planned "
                            f"(missing ids: {missing[:5].tolist()}); rerun the select stage")
        # back to prepared order, with FineWeb's string id beside the int64 one
        prepared = pa.concat_tables([pq.read_table(p, columns=[ID_COLUMN, "id"])
                                     for p in self.prepared])
        every = prepared.column(ID_COLUMN).to_numpy()
        listed = None  # where a keep-list removed rows, which prepared rows the plan lists
        if blocks.removed:
            listed = np.isin(every, planned)
            every = every[listed]
        merged = merged.take(pa.array(positions(got, every)))
        ids = merged.column(ID_COLUMN)
        columns = {name: merged.column(name) for name in ("selected", "score", "block")}
        if self.summary.get("merge_ratio"):
            columns.update(self.merge_round(out, every))
        planned_selected = columns["selected"].to_numpy(zero_copy_only=False)
        if listed is not None:  # every prepared row once, the removed ones in no block
            ids = prepared.column(ID_COLUMN)
            columns = {name: every_row(column, listed, UNLISTED[name])
                       for name, column in columns.items()}
        table = pa.table({ID_COLUMN: ids, "id": prepared.column("id"), **columns})
        write_table_atomic(table, out / "selection.parquet")
        selected = int(pc.sum(table.column("selected")).as_py())
        if "stratum" in plan.column_names:  # the plan lists its rows in prepared order
            values, labels, sizes = strata_of(plan_strata(plan))
            chosen = np.bincount(labels, weights=planned_selected,
                                 minlength=len(values)).astype(int)
            self.summary["strata"] = [{"value": v, "rows": int(n), "selected": int(c)}
                                      for v, n, c in zip(values.tolist(), sizes, chosen)]
        # the copies of the prepared rows go, with the markers of the rounds that wrote them:
        # a later rerun that finds a round's selection missing writes its rows again
        for copy in (SCATTERED, UNION_ROWS, SCALE_ROWS, "logs/scatters/completions",
                     "logs/union_plans/completions", "logs/scales/completions"):
            shutil.rmtree(out / copy, ignore_errors=True)
        if (out / TERM_SCALE).exists():
            self.summary["term_scale"] = json.loads((out / TERM_SCALE).read_text())
        write_json_atomic({**self.summary, "rows": len(table), "selected": selected,
                           "blocks": n_blocks, "selector_time_s": round(sum(times), 3),
                           "slowest_block_s": round(max(times), 3),
                           "stage_wall_s": round(time.time() - self.summary["started_at"], 3),
                           "output": str(out / "selection.parquet")}, out / "summary.json")
        self.stat_update("selected", value=selected)
        yield from data or ()

    def merge_round(self, out: Path, ids: np.ndarray) -> dict:
        """The merge round's columns over `ids` (prepared order): selected and score from the
        union's parts (rows outside the union are not selected), `union` the part (-1 outside);
        the round's counts and times go to the summary."""
        plan = pq.read_table(out / UNION_PLAN)
        parts = BlockPlan.from_metadata(plan.schema.metadata).n_blocks
        chosen = read_round(out / "unions", parts, "union")
        union = plan.column(ID_COLUMN).to_numpy()
        got = chosen.column(ID_COLUMN).to_numpy()
        if len(got) != len(union) or not np.array_equal(np.sort(got), union):
            raise UserError(f"{out}: the merge round's parts hold {len(got)} rows for the "
                            f"union's {len(union)}; rerun the select stage")
        at = positions(ids, got)
        selected = np.zeros(len(ids), bool)
        selected[at] = chosen.column("selected").to_numpy()
        score = np.zeros(len(ids), np.float32)
        score[at] = chosen.column("score").to_numpy()
        part = np.full(len(ids), -1, np.int32)
        part[at] = chosen.column("union").to_numpy()
        times = round_times(out / "unions", parts)
        self.summary.update({"union_rows": len(union), "unions": parts,
                             "merge_selector_time_s": round(sum(times), 3),
                             "slowest_union_s": round(max(times), 3)})
        return {"selected": pa.array(selected), "score": pa.array(score), "union": pa.array(part)}


# selection.parquet's values for a row a keep-list removed: not selected, in no block or part
UNLISTED = {"selected": False, "score": 0, "block": -1, "union": -1}


def every_row(column: pa.Array | pa.ChunkedArray, listed: np.ndarray, fill) -> pa.Array:
    """A column over the plan's rows as one over every prepared row (`listed`: which the plan
    holds), `fill` in the others, its type kept."""
    values = column.to_numpy(zero_copy_only=False)
    full = np.full(len(listed), fill, values.dtype)
    full[listed] = values
    return pa.array(full, column.type)


def positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of `wanted` sits in `keys` (unique, and holding every one of them)."""
    order = np.argsort(keys)
    return order[np.searchsorted(keys, wanted, sorter=order)]


def rows_strata(plan: pa.Table, ids: np.ndarray) -> np.ndarray:
    """The plan's stratum of each of `ids`."""
    return plan_strata(plan)[positions(plan.column(ID_COLUMN).to_numpy(), ids)]


def plan_strata(plan: pa.Table) -> np.ndarray:
    """The plan's stratum column as the values `datamask.stratify` groups (int64 or str)."""
    values = plan.column("stratum").to_numpy()
    return values if values.dtype.kind == "i" else values.astype(str)


def stratified_budgets(strata: np.ndarray, block: np.ndarray, n_blocks: int,
                       select_ratio: float) -> dict:
    """The whole input's budget split over the strata, then each stratum's part over the blocks
    by its rows in each (largest remainder both times): {"values": [...], "budgets": one list of
    per-block budgets per value}."""
    values, labels, sizes = strata_of(strata)
    per_stratum = largest_remainder(budget(select_ratio, len(strata)), sizes)
    rows = np.bincount(labels * n_blocks + block, minlength=len(values) * n_blocks)
    rows = rows.reshape(len(values), n_blocks)
    return {"values": values.tolist(),
            "budgets": [largest_remainder(k, r).tolist() for k, r in zip(per_stratum, rows)]}


def write_plan(config: SelectConfig, files: list[Path], n_blocks: int, *,
               strata: np.ndarray | None = None, scale_sample: bool = False,
               partition_sample: int = 0, kept: np.ndarray | None = None) -> pa.Table:
    """Assign every prepared row to a block, written to the output's plan.parquet: a seeded
    permutation cut into near-equal parts, or with partition "neighbourhood" the leaf of a
    NeighbourhoodTree fitted on the features of the permutation's first `partition_sample` rows,
    every row routed shard by shard; with several blocks every block's budget, the whole input's
    (at merge_ratio before a merge round) split by largest remainder on their rows; with `strata` (one value per prepared row) each row's stratum
    and every block's stratum budgets instead (before a merge round, the larger of select_ratio's
    and merge_ratio's, and select_ratio's kept as `final_strata` for the merge round); with
    `scale_sample` the rows of the term scale's sample, the permutation's first SCALE_SAMPLE.
    With `kept` (a keep-list's, one bool per prepared row) only the rows it keeps are planned,
    counted and listed, and the metadata's `removed` tells the tasks to leave out the others.
    Returns the plan as written."""
    seed, select_ratio, partition = config.seed, config.select_ratio, config.partition
    merge_ratio = config.merge(n_blocks).get("merge_ratio", 0.0)
    per_file = [pq.read_table(f, columns=[ID_COLUMN]).column(ID_COLUMN).to_numpy() for f in files]
    ids = np.concatenate(per_file)
    check_unique_ids(ids, [len(i) for i in per_file], files, ID_COLUMN)
    if kept is not None:
        ids = ids[kept]
    block = np.empty(len(ids), np.int32)
    cut = random_blocks(len(ids), n_blocks, seed)
    if partition == "random":
        for b, rows in enumerate(cut):
            block[rows] = b
    else:
        block[:] = neighbourhood_plan(files, ids, np.concatenate(cut)[:partition_sample], n_blocks,
                                      kept)
    table = pa.table({ID_COLUMN: pa.array(ids, pa.int64()), "block": pa.array(block)})
    plan = BlockPlan(n_blocks, removed=0 if kept is None else int(np.sum(~kept)))
    if scale_sample:
        sample = np.zeros(len(ids), bool)
        sample[np.concatenate(cut)[:SCALE_SAMPLE]] = True
        table = table.append_column("scale_sample", pa.array(sample))
    if strata is None and n_blocks > 1:
        plan.budgets = largest_remainder(budget(merge_ratio or select_ratio, len(ids)),
                                         np.bincount(block, minlength=n_blocks)).tolist()
    if strata is not None:
        table = table.append_column("stratum", pa.array(strata))
        plan.strata = final = stratified_budgets(strata, block, n_blocks, select_ratio)
        if merge_ratio:  # the blocks keep more of each stratum; the merge round keeps `final`
            wider = stratified_budgets(strata, block, n_blocks, merge_ratio)["budgets"]
            plan.strata = {"values": final["values"],
                           "budgets": np.maximum(wider, final["budgets"]).tolist()}
            plan.final_strata = final
    return plan.write(table, config.output / "plan.parquet")


def neighbourhood_plan(files: list[Path], ids: np.ndarray, sample: np.ndarray,
                       n_blocks: int, kept: np.ndarray | None = None) -> np.ndarray:
    """Each planned row's block (`ids`, prepared order: every row, or those `kept` marks): the
    leaf of a NeighbourhoodTree fitted on the features of the rows at `sample` (positions in
    `ids`), then every row routed, one shard held at a time. Refused, before any block runs,
    where a block would hold no row (rows with equal features that no cut can part)."""
    if n_blocks == 1:
        return np.zeros(len(ids), np.int32)
    tree = NeighbourhoodTree.fit(prepared_rows([str(f) for f in files], ids[sample]).features,
                                 n_blocks)
    block = np.concatenate([tree.route(read_dataset([f]).features) for f in files])
    if kept is not None:
        block = block[kept]
    rows = np.bincount(block, minlength=n_blocks)
    if not rows.all():
        raise UserError(f"--partition neighbourhood: {int(np.sum(rows == 0))} of the {n_blocks} "
                        f"blocks would hold no row (too many rows share the same features to "
                        f"cut them into blocks of this size); use --partition random or a larger "
                        f"--block_size")
    return block.astype(np.int32)


def read_strata(files: list[Path], column: str, strata_from: list[str] | None) -> np.ndarray:
    """Each prepared row's value of `column`: from the prepared shards when they hold it, else
    from the FineWeb shards of --strata_from by the string `id` (every prepared id found once)."""
    if not strata_from:
        lacking = [f for f in files if column not in pq.read_schema(f).names]
        if lacking:
            raise UserError(f"{lacking[0]}: the prepared shard has no column '{column}' "
                            f"(--stratify {column}); give --strata_from with the FineWeb shards "
                            f"that hold it")
        return read_column(files, column)
    sources = parquet_files(strata_from, "--strata_from")
    values = read_column(sources, column)
    source_ids = read_column(sources, "id", "--strata_from")
    distinct, first = np.unique(source_ids, return_index=True)
    if len(distinct) < len(source_ids):
        repeated = np.setdiff1d(np.arange(len(source_ids)), first)[0]
        raise UserError(f"--strata_from: id {source_ids[repeated]!r} appears twice in "
                        f"{[str(s) for s in sources]}; its {column} would be ambiguous")
    wanted = read_column(files, "id", "--input")
    at = np.minimum(np.searchsorted(distinct, wanted), len(distinct) - 1)
    missing = np.flatnonzero(distinct[at] != wanted)
    if len(missing):
        raise UserError(f"--strata_from: {len(missing)} prepared ids are in none of its shards "
                        f"(first: {wanted[missing[0]]!r}); give the shards prepare read")
    return values[first[at]]


def run_select(config: SelectConfig) -> dict:
    """Plan the blocks, run them as executor tasks (then the merge round's, with merge_ratio),
    merge; returns summary.json's content (for Slurm, which returns at submission, the
    submission instead). With `keep` (a dedup keep-list's folder, one made of these rows) the rows
    it removes are in no block and count toward no budget."""
    check_executor(config.executor, config.workers, config.cluster)
    inputs, output, keep = config.input, config.output, config.keep
    name, params = parse_method(config.method)
    params = selector_params(name, params)
    files = parquet_files(list(inputs))
    check_paths({"--input": [str(f) for f in files] + [str(i) for i in inputs],
                 "--strata_from": config.strata_from, "--keep": keep},
                folders={"--output": output})
    check_distinct_files(files)
    n_rows = check_prepared(files)
    kept = None  # with --keep, which prepared rows (file then row order) the keep-list keeps
    if keep is not None:
        ids = read_ids(files, "--input")
        removed = removed_ids(keep, ids, f"--input {' '.join(str(i) for i in inputs)}")
        kept = pc.invert(pc.is_in(ids, value_set=removed)).to_numpy()
        n_rows = int(kept.sum())  # the rows to select from: every count below is of these
        if not n_rows:
            raise UserError(f"--keep {keep}: the keep-list removes every row of --input; "
                            f"nothing is left to select")
    n_blocks = block_count(n_rows, config.block_size)
    budget(config.select_ratio, n_rows // n_blocks)  # fail on a bad ratio now, not in a task
    cut = {}
    if config.partition == "neighbourhood":
        sample = config.partition_sample
        cut = {"partition": config.partition,
               "partition_sample": min(TREE_SAMPLE, n_rows) if sample is None else sample}
        if not n_blocks <= cut["partition_sample"] <= n_rows:
            kept_rows = " the keep-list keeps" if keep is not None else ""
            raise UserError(f"--partition_sample {cut['partition_sample']}: must be at least the "
                            f"{n_blocks} blocks and at most the input's {n_rows} rows{kept_rows}")
    strata = read_strata(files, config.stratify, config.strata_from) if config.stratify else None
    if strata is not None and kept is not None:
        strata = strata[kept]
    merge = config.merge(n_blocks)
    if merge:
        check_part_memory(files[0], merge["merge_rows"], config.executor, config.workers,
                          config.cluster)
    with engine_session(config), \
            leave_as_found([output], keep_on_interrupt=[output]):
        return _run_blocks(config, files, (name, params), n_blocks, strata, cut, kept)


def check_part_memory(prepared: Path, rows: int, executor: str, workers: int,
                      cluster: dict) -> None:
    """A part of the merge round holds about `rows` rows: refused where their features alone
    exceed one task's memory (a Ray or Slurm task's CPUs x --mem_per_cpu_gb; locally this
    machine's memory over --workers), which the selector's own arrays only add to."""
    kind = pq.read_schema(prepared).field(FEATURE_COLUMN).type
    dim = getattr(kind, "list_size", None) or len(
        pq.read_table(prepared, columns=[FEATURE_COLUMN]).slice(0, 1)[FEATURE_COLUMN][0])
    need = rows * dim * np.dtype(np.float32).itemsize
    if executor == "local":
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / workers
        whose = f"this machine's memory over --workers {workers}"
    else:
        have = cluster.get("cpus_per_task", 1) * cluster.get("mem_per_cpu_gb", 1) * 2**30
        whose = "--cpus_per_task x --mem_per_cpu_gb"
    if need > have:
        raise UserError(f"--merge_rows {rows:,}: a part of the merge round holds about that many "
                        f"rows of {dim}-d float32 features, {need / 2**30:.1f} GiB before any "
                        f"selector works on them, over a task's {have / 2**30:.1f} GiB "
                        f"({whose}); lower --merge_rows")


def _run_blocks(config: SelectConfig, files: list[Path], selector: tuple[str, dict],
                n_blocks: int, strata: np.ndarray | None, cut: dict,
                kept: np.ndarray | None) -> dict:
    """The work of run_select once everything is checked: plan (neighbourhood blocks where `cut`
    holds their flags; only the rows `kept` marks where a keep-list was given), blocks, the merge
    round where the config asks for one, merge."""
    children_die_with_parent()  # a kill -9 of this command leaves no executor process behind
    name, params = selector
    stratify, keep, select_ratio = config.stratify, config.keep, config.select_ratio
    merge, output = config.merge(n_blocks), config.output
    output.mkdir(parents=True, exist_ok=True)
    run = {"method": name, "params": params, "select_ratio": select_ratio,
           "block_size": config.block_size, "seed": config.seed, "inputs": file_stats(files),
           **merge, **cut}
    if stratify:
        run["stratify"] = stratify
        run["strata_from"] = (file_stats(parquet_files(list(config.strata_from), "--strata_from"))
                              if config.strata_from else None)
    if keep is not None:  # a rerun with another keep-list starts afresh
        run["keep"] = file_stats([keep / KEEP_FILE])
    start_or_resume(output / "config.json", run, [
        output / name for name in ("blocks", "unions", SCATTERED, UNION_ROWS, SCALE_ROWS, "logs",
                                   "plan.parquet", UNION_PLAN, TERM_SCALE, "selection.parquet",
                                   "summary.json")])
    (output / "blocks").mkdir(exist_ok=True)
    scaled = n_blocks > 1 and takes_term_scale(name)
    planned = write_plan(config, files, n_blocks, strata=strata, scale_sample=scaled, kept=kept,
                         partition_sample=cut.get("partition_sample", 0))

    # absolute paths: cluster workers do not start in this folder
    config = dataclasses.replace(config, output=output.absolute())
    prepared = [str(f.absolute()) for f in files]
    plan, output = str(config.output / "plan.parquet"), config.output
    summary = {"method": config.method, "selector": name, "params": params,
               "select_ratio": select_ratio, "executor": config.executor,
               "started_at": time.time(), **merge, **cut}
    if stratify:
        summary["stratify"] = stratify
    if keep is not None:
        summary.update(keep=str(keep.absolute()), removed_by_keep=int(np.sum(~kept)))
    term_scale = str(output / TERM_SCALE) if scaled else None
    first_ratio = merge.get("merge_ratio", select_ratio)
    rounds = [([SelectBlocks(config, prepared, plan, params, first_ratio,
                             term_scale=term_scale)], n_blocks, "block")]
    if scaled:  # fitted once, before any block
        rounds.insert(0, ([FitTermScale(str(output), name, params, select_ratio)], 1, "scale"))
    if n_blocks > 1:  # each block reads its own rows, not every prepared shard
        scatter = min(len(prepared), config.workers)
        rounds.insert(0, ([ScatterRows(prepared, plan, str(output), scatter)], scatter,
                          "scatter"))
    if merge:
        (output / "unions").mkdir(exist_ok=True)
        # the blocks' picks in all, so the parts' count is known before they run (a Slurm job
        # array is sized at submission)
        parts = block_count(BlockPlan.from_metadata(planned.schema.metadata).picks(),
                            merge["merge_rows"])
        plan_union = PlanUnion(config, prepared, plan, parts,
                               budget(select_ratio, planned.num_rows))
        union_parts = SelectBlocks(config, prepared, str(output / UNION_PLAN), params,
                                   select_ratio, group="union", term_scale=term_scale)
        rounds += [([plan_union], 1, "union_plan"), ([union_parts], parts, "union")]
    merging = [MergeBlocks(prepared, plan, str(output), summary)]
    jobs = run_then_merge(config, rounds, merging, output / "logs", "select")
    if jobs:  # Slurm: submitted; the merge job writes the selection
        ids = [jobs["tasks_job"], *jobs.get("round_jobs", [])]
        return {"submitted": True, "blocks": n_blocks,
                **{f"{unit}s_job": job for (_, _, unit), job in zip(rounds, ids)},
                "merge_job": jobs["merge_job"], "output": str(output)}
    return json.loads((output / "summary.json").read_text())

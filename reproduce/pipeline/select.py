"""Stage 2, select: any registered selector over the prepared rows, in independent blocks.

The paper optimises random blocks of rows independently; here each block is one task of a datatrove
executor (LocalPipelineExecutor by default, SlurmPipelineExecutor or RayPipelineExecutor on a
cluster), and one more task merges the blocks into a selection keyed by id. Files, under --output:
  plan.parquet       chunk_id -> block (a seeded permutation cut into near-equal blocks); with
                     --stratify also each row's stratum, and each block's budget per stratum
  blocks/NNNNN.*     one block's selection (Parquet) and its summary (JSON: rows, time, and
                     the learner's steps, stop and objectives: docs/select.md#what-a-run-did)
  selection.parquet  chunk_id, id, selected, score, block: every prepared row exactly once
  summary.json       counts and selector time; logs/ holds datatrove's logs and completions
A re-run with the same configuration and unchanged prepared files skips finished blocks
(datatrove's completions); anything else clears them first.

--stratify COLUMN splits the whole input's budget k = budget(select_ratio, N) over COLUMN's values
by largest remainder (datamask.stratify), then each stratum's part over the blocks by largest
remainder on its rows in each block; a block selects per stratum with those budgets. So the
selection's count of every stratum is the whole input's share to the row, whatever the blocks.
The column comes from the prepared shards when they hold it, else from the FineWeb shards of
--strata_from, looked up by the string `id` that prepare keeps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import (
    FEATURE_COLUMN,
    ID_COLUMN,
    QUALITY_COLUMN,
    block_count,
    budget,
    check_unique_ids,
    random_blocks,
    read_column,
    read_dataset,
    write_json_atomic,
    write_table_atomic,
)
from datamask.errors import UserError, quoted
from datamask.paths import check_paths, leave_as_found
from datamask.processes import children_die_with_parent
from datamask.shared import require
from datamask.stratify import largest_remainder, select_stratified, strata_of

from .common import check_distinct_files, file_stats, parquet_files, parse_method
from .engines import check_executor, engine_session, run_then_merge, start_or_resume

datatrove_base = require("datatrove.pipeline.base", "select (block executors)")


def selector_params(name: str, params: dict) -> dict:
    """Check the name and every option now, in this process (not inside a worker, where the
    error would reach the user as an executor's log), and silence the learner's progress bar."""
    from datamask.selectors import make_selector, selector_class

    if "progress" in getattr(selector_class(name), "RUN_OPTIONS", ()):
        params = {"progress": False, **params}
    make_selector(name, **params)  # validates every option; the workers build their own
    return params


PREPARED_COLUMNS = (ID_COLUMN, QUALITY_COLUMN, FEATURE_COLUMN, "id")


def check_prepared(files: list[Path]) -> int:
    """Every input is a shard the prepare stage wrote (its columns, readable); the row count."""
    rows = 0
    for path in files:
        try:
            metadata = pq.read_metadata(path)
            names = metadata.schema.to_arrow_schema().names
        except (pa.ArrowException, OSError) as err:
            raise UserError(f"{path}: not a readable Parquet file ({quoted(err)})") from None
        missing = [c for c in PREPARED_COLUMNS if c not in names]
        if missing:
            raise UserError(f"{path}: not a prepared shard (no column '{missing[0]}'); run "
                            f"`datamask pipeline prepare` on the FineWeb shards first")
        rows += metadata.num_rows
    return rows


class SelectBlocks(datatrove_base.PipelineStep):
    """One task = one block: read the block's rows from the prepared shards, select, write."""

    name = "select a block"
    type = "🎯 - SELECT"

    def __init__(self, prepared: list[str], plan: str, output: str, method: str, params: dict,
                 select_ratio: float, stratify: str | None = None):
        super().__init__()
        self.prepared, self.plan, self.output = prepared, plan, output
        self.method, self.params, self.select_ratio = method, params, select_ratio
        self.stratify = stratify

    def block_rows(self, block: int):
        """The block's rows as a core Dataset, in prepared-file then row order."""
        from datamask.data import Dataset

        plan = pq.read_table(self.plan)
        wanted = plan.column(ID_COLUMN).to_numpy()[plan.column("block").to_numpy() == block]
        parts = []
        for path in self.prepared:
            data = read_dataset([path])
            keep = np.isin(data.ids, wanted)
            if keep.any():
                parts.append(Dataset(data.ids[keep], data.quality[keep], data.features[keep]))
        return Dataset(np.concatenate([p.ids for p in parts]),
                       np.concatenate([p.quality for p in parts]),
                       np.ascontiguousarray(np.concatenate([p.features for p in parts])))

    def block_strata(self, ids: np.ndarray) -> np.ndarray:
        """The plan's stratum of each of `ids`."""
        plan = pq.read_table(self.plan, columns=[ID_COLUMN, "stratum"])
        planned = plan.column(ID_COLUMN).to_numpy()
        order = np.argsort(planned)
        where = order[np.searchsorted(planned, ids, sorter=order)]
        return plan_strata(plan)[where]

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from datamask.selectors import make_selector

        metadata = pq.read_schema(self.plan).metadata
        n_blocks = int(metadata[b"n_blocks"])
        for block in range(rank, n_blocks, world_size):
            rows = self.block_rows(block)
            with self.track_time("block"):
                selector = make_selector(self.method, **self.params)
                if self.stratify:
                    plan = json.loads(metadata[b"strata"])
                    budgets = dict(zip(plan["values"], np.asarray(plan["budgets"])[:, block]))
                    selection = select_stratified(selector, rows, self.block_strata(rows.ids),
                                                  self.select_ratio, self.stratify, budgets)
                else:
                    selection = selector.select(rows, self.select_ratio)
            out = Path(self.output) / "blocks"
            selection.write(out / f"{block:05d}.parquet", ID_COLUMN)
            summary = {"block": block, "rows": len(rows),
                       "selected": int(selection.selected.sum()),
                       "wall_time_s": selection.wall_time_s, **selection.run}
            if self.stratify:  # the learner's run fields are per stratum
                summary["strata"] = selection.params["strata"]
            write_json_atomic(summary, out / f"{block:05d}.json")
            self.stat_update("rows", value=len(rows))
            self.stat_update("selected", value=int(selection.selected.sum()))
        yield from data or ()


class MergeBlocks(datatrove_base.PipelineStep):
    """One task: join the blocks into selection.parquet, checking every planned id appears once."""

    name = "merge block selections"
    type = "🎯 - SELECT"

    def __init__(self, prepared: list[str], plan: str, output: str, summary: dict):
        super().__init__()
        self.prepared, self.plan, self.output, self.summary = prepared, plan, output, summary

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        out = Path(self.output)
        plan = pq.read_table(self.plan)
        n_blocks = int(plan.schema.metadata[b"n_blocks"])
        tables, timings = [], []
        for block in range(n_blocks):
            path = out / "blocks" / f"{block:05d}.parquet"
            if not path.exists():
                raise UserError(f"{path}: block {block} has no selection; its task did not finish")
            tables.append(pq.read_table(path).append_column(
                "block", pa.array(np.full(pq.read_metadata(path).num_rows, block, np.int32))))
            timings.append(json.loads(path.with_suffix(".json").read_text()))
        merged = pa.concat_tables(tables)
        planned = plan.column(ID_COLUMN).to_numpy()
        got = merged.column(ID_COLUMN).to_numpy()
        if len(got) != len(planned) or not np.array_equal(np.sort(got), np.sort(planned)):
            missing = np.setdiff1d(planned, got)
            raise UserError(f"{out}: the blocks hold {len(got)} rows for {len(planned)} planned "
                            f"(missing ids: {missing[:5].tolist()}); rerun the select stage")
        # back to prepared order, with FineWeb's string id beside the int64 one
        prepared = pa.concat_tables([pq.read_table(p, columns=[ID_COLUMN, "id"])
                                     for p in self.prepared])
        position = {cid: i for i, cid in enumerate(got.tolist())}
        order = np.array([position[c] for c in prepared.column(ID_COLUMN).to_pylist()])
        merged = merged.take(pa.array(order))
        table = pa.table({ID_COLUMN: merged.column(ID_COLUMN), "id": prepared.column("id"),
                          "selected": merged.column("selected"), "score": merged.column("score"),
                          "block": merged.column("block")})
        write_table_atomic(table, out / "selection.parquet")
        selected = int(pc.sum(table.column("selected")).as_py())
        times = [t["wall_time_s"] for t in timings]
        if "stratum" in plan.column_names:  # the plan lists rows in prepared order, as `table`
            values, labels, sizes = strata_of(plan_strata(plan))
            chosen = np.bincount(labels, weights=table.column("selected").to_numpy(),
                                 minlength=len(values)).astype(int)
            self.summary["strata"] = [{"value": v, "rows": int(n), "selected": int(c)}
                                      for v, n, c in zip(values.tolist(), sizes, chosen)]
        write_json_atomic({**self.summary, "rows": len(table), "selected": selected,
                           "blocks": n_blocks, "selector_time_s": round(sum(times), 3),
                           "slowest_block_s": round(max(times), 3),
                           "stage_wall_s": round(time.time() - self.summary["started_at"], 3),
                           "output": str(out / "selection.parquet")}, out / "summary.json")
        self.stat_update("selected", value=selected)
        yield from data or ()


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


def write_plan(files: list[Path], path: Path, n_blocks: int, seed: int,
               strata: np.ndarray | None = None, select_ratio: float = 0.0) -> None:
    """Assign every prepared row to a block: a seeded permutation cut into near-equal parts; with
    `strata` (one value per prepared row) each row's stratum and every block's stratum budgets."""
    per_file = [pq.read_table(f, columns=[ID_COLUMN]).column(ID_COLUMN).to_numpy() for f in files]
    ids = np.concatenate(per_file)
    check_unique_ids(ids, [len(i) for i in per_file], files, ID_COLUMN)
    block = np.empty(len(ids), np.int32)
    for b, rows in enumerate(random_blocks(len(ids), n_blocks, seed)):
        block[rows] = b
    table = pa.table({ID_COLUMN: pa.array(ids, pa.int64()), "block": pa.array(block)})
    metadata = {"n_blocks": str(n_blocks)}
    if strata is not None:
        table = table.append_column("stratum", pa.array(strata))
        metadata["strata"] = json.dumps(stratified_budgets(strata, block, n_blocks,
                                                           select_ratio))
    write_table_atomic(table.replace_schema_metadata(metadata), path)


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


def run_select(inputs: list[str], output: Path, method_spec: str, select_ratio: float,
               block_size: int = 0, seed: int = 0, executor: str = "local", workers: int = 1,
               cluster: dict | None = None, stratify: str | None = None,
               strata_from: list[str] | None = None) -> dict:
    """Plan the blocks, run them as executor tasks, merge; returns summary.json's content
    (for Slurm, which returns at submission, the submission instead)."""
    check_executor(executor, workers, cluster)
    if block_size < 0:
        raise UserError(f"--block_size must be 0 (one block) or a positive number of rows, got "
                        f"{block_size}")
    name, params = parse_method(method_spec)
    params = selector_params(name, params)
    files = parquet_files(inputs)
    check_paths({"--input": [str(f) for f in files] + [str(i) for i in inputs],
                 "--strata_from": strata_from}, folders={"--output": output})
    check_distinct_files(files)
    n_rows = check_prepared(files)
    n_blocks = block_count(n_rows, block_size)
    budget(select_ratio, n_rows // n_blocks)  # fail on a bad ratio now, not inside a task
    if strata_from and not stratify:
        raise UserError("--strata_from names where the --stratify column is; give --stratify")
    strata = read_strata(files, stratify, strata_from) if stratify else None
    with engine_session(executor, cluster), leave_as_found([output], keep_on_interrupt=[output]):
        return _run_blocks(files, output, method_spec, name, params, select_ratio, block_size,
                           seed, executor, workers, n_blocks, cluster, stratify, strata,
                           strata_from)


def _run_blocks(files: list[Path], output: Path, method_spec: str, name: str, params: dict,
                select_ratio: float, block_size: int, seed: int, executor: str, workers: int,
                n_blocks: int, cluster: dict | None, stratify: str | None = None,
                strata: np.ndarray | None = None, strata_from: list[str] | None = None) -> dict:
    """The work of run_select once everything is checked: plan, blocks, merge."""
    children_die_with_parent()  # a kill -9 of this command leaves no executor process behind
    output.mkdir(parents=True, exist_ok=True)
    config = {"method": name, "params": params, "select_ratio": select_ratio,
              "block_size": block_size, "seed": seed, "inputs": file_stats(files)}
    if stratify:
        config["stratify"] = stratify
        config["strata_from"] = (file_stats(parquet_files(strata_from, "--strata_from"))
                                if strata_from else None)
    start_or_resume(output / "config.json", config, [
        output / name for name in ("blocks", "logs", "plan.parquet", "selection.parquet",
                                   "summary.json")])
    (output / "blocks").mkdir(exist_ok=True)
    plan = output / "plan.parquet"
    write_plan(files, plan, n_blocks, seed, strata, select_ratio)

    # absolute paths: cluster workers do not start in this folder
    prepared = [str(f.absolute()) for f in files]
    plan, output = plan.absolute(), output.absolute()
    summary = {"method": method_spec, "selector": name, "params": params,
               "select_ratio": select_ratio, "executor": executor, "started_at": time.time()}
    if stratify:
        summary["stratify"] = stratify
    blocks = [SelectBlocks(prepared, str(plan), str(output), name, params, select_ratio, stratify)]
    merge = [MergeBlocks(prepared, str(plan), str(output), summary)]
    jobs = run_then_merge(executor, blocks, n_blocks, merge, output / "logs", workers, cluster,
                          "select", unit="block")
    if jobs:  # Slurm: submitted; the merge job writes the selection
        return {"submitted": True, "blocks": n_blocks, "blocks_job": jobs["tasks_job"],
                "merge_job": jobs["merge_job"], "output": str(output)}
    return json.loads((output / "summary.json").read_text())

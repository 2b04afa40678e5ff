"""Stage 1a, score: FineWeb-format Parquet shards -> each row's quality score, for prepare.

prepare embeds and scores each shard in one task, so on a GPU node that embeds thousands of
documents a second the heuristic scorer (about 240 a core) sets the pace (docs/engines.md,
"Per-core bound"). This stage scores alone, on CPU nodes; `pipeline prepare --scores SCORES/`
then reads the quality from its shards and only embeds.

One output shard per input shard, same file name, one row per input row in input order:
`chunk_id` (prepare's hash of `id`), `id` and `quality_score`, the scorer's name (prepare's, so
the two stages' shards name the same scorer alike) with the run in each shard's Parquet metadata.
The shards are dealt into executor tasks as prepare's (task r of N scores shards r, r+N, ...,
each written atomically); one merge task writes score.json. A rerun with the same inputs, scorer
and --tasks skips the finished tasks, rewrites only shards not made with this scorer from their
input as it is, and returns at once when every shard is; a run that fails removes what it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from datamask.data import ID_COLUMN, QUALITY_COLUMN, write_table_atomic
from datamask.errors import UserError
from datamask.paths import remove_temporaries

from .engines import check_executor
from .prepare import (SCORE_STAGE, Scorer, Scoring, ShardRun, ShardStep, _made_with, _manifest,
                      _read_shard, check_inputs, check_shards, input_stats, make_scorer,
                      run_shard_tasks)


@dataclass(kw_only=True)
class ScoreConfig(Scoring):
    """The score stage's settings: prepare's inputs, output, quality and task settings, one
    declaration for both (`Scoring`), and no embedder."""


def check_outputs(output: Path, files: list[Path]) -> None:
    """Every shard already in --output under an input's name is one this stage wrote: another
    (a prepared shard, with its embeddings) is not ours to replace."""
    for path in files:
        earlier = output / path.name
        if earlier.exists() and SCORE_STAGE.record not in (pq.read_schema(earlier).metadata or {}):
            raise UserError(f"--output {output} holds {path.name}, which `pipeline score` did not "
                            f"write; score into a new folder")


def run_score(config: ScoreConfig, *, scorer: Scorer | None = None) -> dict:
    """Score every row of every input shard in `config.tasks` executor tasks (default:
    `workers`, at most one per shard); returns counts (scored vs reused), or for Slurm, which
    returns at submission, the submission. `scorer`, where given, replaces the one the quality
    settings name. Everything is checked before the first row is scored, as prepare checks it."""
    output = config.output
    check_executor(config.executor, config.workers, config.cluster)
    files = check_inputs(config.input, output, config.quality if scorer is None else None)
    check_outputs(output, files)
    earlier = _manifest(output / SCORE_STAGE.manifest)
    if scorer is None:
        scorer = make_scorer(config.quality, files, config.quality_model, config.quality_label)
    check_shards(files, scorer)
    run = ShardRun.of(SCORE_STAGE, config, files, {"quality": scorer.name}, earlier)
    inputs = input_stats(files)
    counts = run.left_alone(inputs)  # None: work to do; else no scorer is built, no executor
    if counts is None:
        submitted = run_shard_tasks(config, files, run, ScoreShards(run, scorer), inputs)
        if submitted:
            return submitted
        counts = run.written()
    return {"output": str(output), "quality": scorer.name,
            "rows": sum(c["rows"] for c in counts.values()),
            "scored": sum(c["scored"] for c in counts.values()), "files": counts}


class ScoreShards(ShardStep):
    """Each shard scored in chunks of `chunk` rows and written whole, unless its output shard
    holds its ids in order, scored with this scorer."""

    name = "score shards"

    def __init__(self, run: ShardRun, scorer: Scorer):
        super().__init__(run)
        self.scorer = scorer

    def write_shard(self, source: Path) -> tuple[int, int]:
        run = self.shard_run
        shard = _read_shard(source)
        out_path = Path(run.output) / source.name
        n = len(shard.ids)
        if (_made_with(out_path, run.earlier, SCORE_STAGE).get("config") == run.config
                and pq.read_table(out_path, columns=[ID_COLUMN]).column(ID_COLUMN).to_pylist()
                == shard.chunk_ids.tolist()):
            return n, 0
        remove_temporaries(out_path)  # what a killed writer of this shard left
        quality = np.empty(n, np.float32)
        with tqdm(total=n, desc=f"score {source.name}", unit="doc",
                  disable=not run.progress) as bar:
            for start in range(0, n, run.chunk):
                batch = shard.table.slice(start, run.chunk)
                quality[start:start + len(batch)] = self.scorer(batch, shard.path)
                bar.update(len(batch))
        table = pa.table({ID_COLUMN: pa.array(shard.chunk_ids, pa.int64()),
                          "id": pa.array(shard.ids, pa.string()),
                          QUALITY_COLUMN: pa.array(quality)})
        write_table_atomic(table.replace_schema_metadata(run.metadata(n)), out_path)
        return n, n

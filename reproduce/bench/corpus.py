"""`make bench-corpus`: N documents through prepare, select, tokenize and export on one node, timed.

A throughput corpus, not a quality one: N FineWeb-format documents whose lengths are drawn from a
built pool's documents (`make pool`) and whose text is the pool's own sentences, recombined
(seeded), each document's sentences from the domain of the pool document its length came from.
It is written shard by shard (atomically; a finished shard is skipped by a rerun), so memory stays
flat whatever N. Then the stages a user runs, each as its own `python -m reproduce STAGE` child
process on the local executor: prepare (the static embedding model, the heuristic quality scorer),
select (datamask at select's defaults, in blocks of --block_size rows), tokenizer (trained on the
first shard), tokenize, export (the selection's documents as a dataset). On a slice of the same
corpus (--slice documents) prepare runs again with the transformer (all-MiniLM-L6-v2, prepare's
default) on one worker, and the parts of prepare (reading, each embedding, the scorer) are timed
side by side in this process on the slice's first documents.

Per stage: wall time, documents/s, peak resident memory (the largest process of the stage's tree,
from getrusage of the reaped child, and the tree's sum, sampled), bytes of its output; and the
node-hours that --project documents take on 2-core CPU nodes like this one, computed from these
rates. Everything lands in --work: the corpus, each stage's output and log, stages/*.json (one
record per finished stage: a rerun skips the stages whose record and output are both there, and
each stage itself skips its finished tasks), results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamask import processes
from datamask.data import block_count, write_json_atomic, write_table_atomic, write_text_atomic
from datamask.errors import UserError
from datamask.paths import check_folder_output, remove_temporaries
from datamask.shared import machine

from reproduce.pipeline.bbc import FINEWEB_SCHEMA
from reproduce.pipeline.common import POSITIVE, SEED, Progress, parquet_files
from reproduce.pool.sources import fineweb_id, paragraphs

COMMAND = "bench-corpus"
CORPUS_SCHEMA = FINEWEB_SCHEMA.append(pa.field("domain", pa.string()))
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MAX_PIECE = 600  # characters: a longer "sentence" (a code block, a word list) is cut at spaces
PAPER_BLOCK = 1_000_000  # the paper's select block (ALGORITHM.md)
PARTS_DOCUMENTS = 2_000  # the in-process part timers' documents (the slice's first)
EMBED_CHUNK = 256  # prepare's rows per embedding call
SAMPLE_S = 0.5  # how often the stage's process tree is sampled (memory, progress)
# Runs the stage (argv[2:]) as its child and writes the stage tree's largest peak RSS (KiB) to
# argv[1]: getrusage(RUSAGE_CHILDREN) of a process this small, because a child's ru_maxrss
# starts from the RSS of the process it was forked from (Linux keeps it across exec), which in
# this benchmark's own process holds torch and the pool's text.
# It dies with this process and the stage with it (datamask.processes), kill -9 included.
MAXRSS_WRAPPER = ("import os, resource, subprocess, sys\n"
                  "from datamask import processes\n"
                  "os.environ[processes.ENVIRONMENT] = str(os.getpid())\n"
                  "code = subprocess.call(sys.argv[2:])\n"
                  "open(sys.argv[1], 'w').write(str(resource.getrusage("
                  "resource.RUSAGE_CHILDREN).ru_maxrss))\n"
                  "sys.exit(code)")
CORPUS_COMMAND = "in the benchmark's process (reproduce.bench.corpus.build_corpus)"


# ---------------------------------------------------------------- the corpus


class PoolText:
    """What the corpus draws from a built pool: each pool document's length and domain, and per
    domain its sentences (each with the separator that followed it: a space inside a paragraph,
    a blank line after one) and their lengths."""

    def __init__(self, pool: Path):
        files = parquet_files([str(pool / "fineweb")], "--pool")
        table = pa.concat_tables([pq.read_table(f, columns=["text", "domain"]) for f in files])
        texts = table.column("text").to_pylist()
        self.lengths = np.array([len(t) for t in texts], np.int64)
        self.domains = np.array(table.column("domain").to_pylist())
        self.pieces: dict[str, np.ndarray] = {}
        self.piece_lengths: dict[str, np.ndarray] = {}
        for domain in sorted(set(self.domains.tolist())):
            pieces = [piece for text, d in zip(texts, self.domains) if d == domain
                      for piece in sentence_pieces(text)]
            self.pieces[domain] = np.array(pieces, dtype=object)
            self.piece_lengths[domain] = np.array([len(p) for p in pieces], np.int64)

    def documents(self, n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
        """`n` texts and their domains: each takes a pool document's length and domain, and that
        domain's sentences drawn at random until the text is as close to the length as whole
        sentences get (at least one)."""
        rows = rng.integers(len(self.lengths), size=n)
        texts = []
        for target, domain in zip(self.lengths[rows], self.domains[rows]):
            lengths = self.piece_lengths[domain]
            draw = int(target / lengths.mean() * 1.5) + 4
            picks = rng.integers(len(lengths), size=draw)
            ends = np.cumsum(lengths[picks])
            while ends[-1] < target:
                more = rng.integers(len(lengths), size=draw)
                picks = np.concatenate([picks, more])
                ends = np.concatenate([ends, ends[-1] + np.cumsum(lengths[more])])
            count = int(np.searchsorted(ends, target)) + 1  # the first that reaches the target
            if count > 1 and target - ends[count - 2] < ends[count - 1] - target:
                count -= 1
            texts.append("".join(self.pieces[domain][picks[:count]]).rstrip())
        return texts, self.domains[rows].tolist()


def sentence_pieces(text: str) -> list[str]:
    """The text's sentences, each with the separator that follows it (' ' or a blank line);
    pieces over MAX_PIECE characters cut at whitespace."""
    out = []
    for paragraph in paragraphs(text):
        sentences = [p for s in SENTENCE_END.split(paragraph) for p in cut_piece(s) if p]
        out += [s + " " for s in sentences[:-1]] + [sentences[-1] + "\n\n"] if sentences else []
    return out


def cut_piece(sentence: str) -> list[str]:
    if len(sentence) <= MAX_PIECE:
        return [sentence]
    pieces, current = [], ""
    for word in re.split(r"(?<=\s)", sentence):
        if current and len(current) + len(word) > MAX_PIECE:
            pieces.append(current.rstrip())
            current = ""
        current += word
    return pieces + [current.rstrip()]


def pool_config(pool: Path) -> dict:
    manifest = pool / "pool.json"
    if not manifest.is_file():
        raise UserError(f"--pool {pool}: not a built pool (no pool.json); build one with "
                        f"`make pool` (datamask pipeline pool)")
    return json.loads(manifest.read_text())["config"]


def check_corpus(pool: Path, folder: Path, documents: int, shard_documents: int,
                 seed: int) -> dict:
    """The corpus's config; a corpus of other settings already in `folder` is refused (its
    shards would be mixed with or taken for this one's)."""
    config = {"pool": str(pool.absolute()), "pool_config": pool_config(pool),
              "documents": documents, "shard_documents": shard_documents, "seed": seed}
    recorded = folder / "config.json"
    if recorded.exists() and json.loads(recorded.read_text()) != config:
        raise UserError(f"--work {folder.parent}: holds a corpus of other settings "
                        f"({recorded}); give a new --work folder")
    return config


def build_corpus(pool: Path, folder: Path, documents: int, shard_documents: int,
                 seed: int, bench: str = COMMAND) -> dict:
    """The corpus under folder/fineweb, shard by shard (atomic; finished shards skipped), then
    corpus.json (its config, counts, and its length quantiles beside the pool's)."""
    config = check_corpus(pool, folder, documents, shard_documents, seed)
    recorded = folder / "config.json"
    shards = folder / "fineweb"
    shards.mkdir(parents=True, exist_ok=True)
    write_json_atomic(config, recorded)
    source = PoolText(pool)
    starts = list(range(0, documents, shard_documents))
    progress = Progress("corpus", len(starts), bench)
    for shard, start in enumerate(starts):
        path = shards / f"{shard:05d}.parquet"
        count = min(shard_documents, documents - start)
        if path.exists():  # written by rename: complete
            progress.tick(f"shard {shard} ({count:,} documents, done before)", worked=False)
            continue
        remove_temporaries(path)  # what a killed writer of this shard left
        texts, domains = source.documents(count, np.random.default_rng([seed, 23, shard]))
        ids = [fineweb_id(f"datamask-bench-corpus/seed={seed}/{start + i}") for i in range(count)]
        n = len(texts)
        table = pa.table({"text": texts, "id": ids,
                          "dump": [f"datamask bench corpus seed={seed}"] * n,
                          "url": [f"datamask-bench-corpus:{start + i}" for i in range(count)],
                          "date": [None] * n, "file_path": [None] * n, "language": ["en"] * n,
                          "language_score": [None] * n, "token_count": [None] * n,
                          "domain": domains}, schema=CORPUS_SCHEMA)
        write_table_atomic(table, path)
        progress.tick(f"shard {shard} ({count:,} documents)")
    lengths = np.concatenate([
        pc.utf8_length(pq.read_table(f, columns=["text"]).column("text")).to_numpy()
        for f in sorted(shards.glob("*.parquet"))])
    quantiles = [0.1, 0.25, 0.5, 0.75, 0.9]
    summary = {**config, "shards": len(starts), "characters": int(lengths.sum()),
               "length_quantiles": {"q": quantiles,
                                    "corpus": np.quantile(lengths, quantiles).round().tolist(),
                                    "pool": np.quantile(source.lengths, quantiles).round().tolist()},
               "pool_documents": len(source.lengths),
               "pool_sentences": {d: len(p) for d, p in source.pieces.items()}}
    write_json_atomic(summary, folder / "corpus.json")
    return summary


def write_slice(corpus: Path, folder: Path, documents: int) -> list[str]:
    """The corpus's first `documents` rows as one FineWeb shard (atomic, kept when there); their
    texts."""
    table = pa.concat_tables([pq.read_table(f) for f in _first_files(corpus, documents)])
    table = table.slice(0, documents)
    path = folder / "00000.parquet"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_table_atomic(table, path)
    return table.column("text").to_pylist()


def _first_files(corpus: Path, documents: int) -> list[Path]:
    files, rows = [], 0
    for f in sorted(corpus.glob("*.parquet")):
        if rows >= documents:
            break
        files.append(f)
        rows += pq.read_metadata(f).num_rows
    return files


# ---------------------------------------------------------------- measuring a stage


def tree_rss(pid: int) -> int:
    """Bytes resident in the process `pid` and all its descendants (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


class PeakSampler:
    """In a thread, every SAMPLE_S: the peak of `tree_rss(pid)`, and `each()` (progress); once
    more when the `with` ends."""

    def __init__(self, pid: int, each=lambda: None):
        self.pid, self.each, self.peak = pid, each, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while True:
            ended = self.stop.wait(SAMPLE_S)
            self.peak = max(self.peak, tree_rss(self.pid))
            self.each()
            if ended:
                return

    def __enter__(self) -> "PeakSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def output_bytes(paths: list[Path]) -> int:
    """Bytes of the files under `paths` (its logs included)."""
    total = 0
    for path in paths:
        files = [path] if path.is_file() else path.rglob("*") if path.is_dir() else []
        total += sum(f.stat().st_size for f in files if f.is_file())
    return total


class Stage:
    """One stage of the benchmark: its command line (a `python -m reproduce` stage), the file
    that says it finished, its outputs, and how to count its finished items for the progress
    lines."""

    def __init__(self, name: str, args: list[str], done: Path, outputs: list[Path],
                 documents: int, items=None, total: int = 1, unit: str = "task"):
        self.name, self.args, self.done, self.outputs = name, args, done, outputs
        self.documents, self.items, self.total, self.unit = documents, items, total, unit

    @property
    def command(self) -> str:
        return f"python -m reproduce {' '.join(self.args)}"

    def finished(self) -> set[str]:
        return set(self.items()) if self.items else set()


def run_stage(stage: Stage, work: Path, bench: str = COMMAND) -> dict:
    """Run the stage's command as a child (it dies with this process, kill -9 included) and
    measure it: wall time, peak RSS of its largest process (MAXRSS_WRAPPER: getrusage of the
    children it reaped) and of its tree (sampled), its output's bytes; progress lines as its
    items finish. A stage that fails stops the benchmark with its log's last lines."""
    log = work / "logs" / f"{stage.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    resumed = any(p.exists() for p in stage.outputs)
    cmd = [sys.executable, "-m", "reproduce", *stage.args]
    env = {**os.environ, processes.ENVIRONMENT: str(os.getpid())}
    print(f"{bench}: {stage.name}: {stage.command} (log: {log})", flush=True)
    before = stage.finished()
    progress = Progress(stage.name, stage.total, bench)
    for item in sorted(before):
        progress.tick(f"{stage.unit} {item} (done before)", worked=False)
    seen = set(before)

    def tick_new():
        for item in sorted(stage.finished() - seen):
            seen.add(item)
            progress.tick(f"{stage.unit} {item}")

    peak_file = log.with_suffix(".maxrss")
    started = time.perf_counter()
    with open(log, "a") as out:
        child = subprocess.Popen([sys.executable, "-c", MAXRSS_WRAPPER, str(peak_file), *cmd],
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    with PeakSampler(child.pid, tick_new) as sampler:
        child.wait()
        wall = time.perf_counter() - started
    if not stage.items and child.returncode == 0:
        progress.tick(stage.name)
    if child.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(True)[-5:])
        raise UserError(f"{stage.name}: `{stage.command}` failed (exit "
                        f"{child.returncode}); its log {log} ends:\n{tail.rstrip()}")
    return record(stage, wall, int(peak_file.read_text()) * 1024, sampler.peak, resumed)


def record(stage: Stage, wall: float, largest: int, tree: int, resumed: bool) -> dict:
    return {"stage": stage.name, "documents": stage.documents, "wall_s": round(wall, 2),
            "documents_per_s": round(stage.documents / wall, 2),
            "peak_rss_largest_mb": round(largest / 2**20, 1),
            "peak_rss_tree_mb": round(max(tree, largest) / 2**20, 1),
            "output_mb": round(output_bytes(stage.outputs) / 1e6, 2),
            "resumed": resumed, "command": stage.command}


def completions(folder: Path):
    """A datatrove step's finished ranks, from its completion markers."""
    return lambda: [p.name for p in folder.glob("completions/*")]


# ---------------------------------------------------------------- where prepare's time goes


def prepare_parts(texts: list[str], slice_shard: Path, static_model: str) -> dict:
    """prepare's parts timed one after the other in this process: reading the slice's shard, then
    on `texts` the static and the transformer embedding (prepare's chunks) and the heuristic
    scorer (a fresh one: its chunk cache starts empty). {part: {documents, s}}."""
    from reproduce.bench.prepare import embed_all, seconds
    from reproduce.pipeline.embedders import Embedder, make_embedder
    from reproduce.pipeline.prepare import HeuristicQuality

    parts = {"read the shard (pyarrow)": {
        "documents": pq.read_metadata(slice_shard).num_rows,
        "s": seconds(lambda: pq.read_table(slice_shard))}}
    static, transformer = make_embedder(static_model).load(), Embedder().load()
    scorer = HeuristicQuality()
    table = pa.table({"text": texts})
    timed = {
        "static embedding (model2vec)": lambda: embed_all(static, texts, EMBED_CHUNK),
        "quality scorer (datatrove-heuristics, empty cache)": lambda: [
            scorer(table.slice(i, EMBED_CHUNK), slice_shard)
            for i in range(0, len(texts), EMBED_CHUNK)],
        "transformer embedding (all-MiniLM-L6-v2)": lambda: embed_all(transformer, texts,
                                                                      EMBED_CHUNK)}
    for name, fn in timed.items():
        parts[name] = {"documents": len(texts), "s": seconds(fn)}
    return {name: {**part, "s": round(part["s"], 3)} for name, part in parts.items()}


# ---------------------------------------------------------------- the run


def corpus_arguments(parser: argparse.ArgumentParser, work: str,
                     seed: str = "the corpus's seed") -> None:
    """The flags of a benchmark over this corpus: the pool, the work folder (`work` says what it
    holds), its size and shards, the seed (`seed` says what it draws), the projection and the
    results folder."""
    parser.add_argument("--pool", type=Path, required=True,
                        help="a built pool folder (`make pool`): the corpus's lengths and text")
    parser.add_argument("--work", type=Path, required=True,
                        help=f"folder for {work} and the results; a rerun resumes there")
    parser.add_argument("--documents", type=POSITIVE, default=1_000_000,
                        help="documents in the corpus (default: %(default)s)")
    parser.add_argument("--shard_documents", type=POSITIVE, default=20_000,
                        help="documents per corpus shard (default: %(default)s)")
    parser.add_argument("--seed", type=SEED, default=0, help=seed)
    parser.add_argument("--project", type=float, default=1e8,
                        help="documents of the projection (default: %(default).0e)")
    parser.add_argument("--results", type=Path,
                        help="also write results.json and results.md into this folder")
    parser.add_argument("--static_model", default="static",
                        help="prepare's static embedding model: static (distilled once, cached) "
                             "or static:DIR (`make distil`) (default: %(default)s)")


def check_corpus_flags(args: argparse.Namespace) -> None:
    """corpus_arguments' flags, checked before any work."""
    from reproduce.pipeline.embedders import check_static_model

    check_folder_output("--work", args.work)
    check_static_model(args.static_model, "--static_model")
    if args.results is not None:
        check_folder_output("--results", args.results)
    if not 0 < args.project < float("inf"):
        raise UserError(f"--project must be a positive number of documents, got {args.project}")
    if not args.pool.is_dir():
        raise UserError(f"--pool {args.pool}: no such folder; build one with `make pool`")
    check_corpus(args.pool, args.work / "corpus", args.documents, args.shard_documents,
                 args.seed)


def build_parser() -> argparse.ArgumentParser:
    from reproduce.cli import StageParser
    from reproduce.pipeline.common import NON_NEGATIVE

    parser = StageParser(prog="python -m reproduce.bench.corpus",
                         description=__doc__.splitlines()[0])
    corpus_arguments(parser, "the corpus, every stage's output")
    parser.add_argument("--workers", type=POSITIVE, default=2,
                        help="local executor workers of prepare, select and tokenize "
                             "(default: %(default)s)")
    parser.add_argument("--slice", type=POSITIVE, default=20_000,
                        help="the corpus's first documents that prepare embeds with the "
                             "transformer too (default: %(default)s)")
    parser.add_argument("--block_size", type=NON_NEGATIVE, default=PAPER_BLOCK,
                        help="select's rows per block: the paper's, which a 10^8-document run "
                             "would use, so the rate measured is the one projected "
                             "(default: %(default)s)")
    parser.set_defaults(func=run)
    return parser


def stages(args: argparse.Namespace, work: Path) -> list[Stage]:
    corpus, prepared, selected = work / "corpus" / "fineweb", work / "prepared", work / "select"
    tokens, tokenizer, exported = work / "tokens", work / "tokenizer.json", work / "export"
    n, shards = args.documents, -(-args.documents // args.shard_documents)
    workers = ["--workers", str(args.workers)]
    tokenize_ranks = min(args.workers, shards)
    slice_n = min(args.slice, n)
    slice_shards = work / "slice" / "fineweb"
    prepare_flags = ["--quality", "heuristic", "--no_progress"]
    return [
        Stage("prepare", ["prepare", "--input", str(corpus), "--output", str(prepared),
                          "--embedding_model", args.static_model, *prepare_flags, *workers],
              prepared / "prepare.json", [prepared], n,
              lambda: [p.stem for p in prepared.glob("*.parquet")], shards, "shard"),
        Stage("select", ["select", "--input", str(prepared), "--output", str(selected),
                         "--method", "datamask", "--block_size", str(args.block_size),
                         *workers],
              selected / "summary.json", [selected], n,
              lambda: [p.stem for p in (selected / "blocks").glob("*.json")],
              block_count(n, args.block_size), "block"),
        Stage("tokenizer", ["tokenizer", "--input", str(corpus / "00000.parquet"),
                            "--output", str(tokenizer)],
              tokenizer, [tokenizer], min(args.shard_documents, n)),
        Stage("tokenize", ["tokenize", "--input", str(corpus), "--selection", str(selected),
                           "--tokenizer", str(tokenizer), "--output", str(tokens), *workers],
              tokens / "summary.json", [tokens], n, completions(tokens / "logs" / "ranks"),
              tokenize_ranks, "rank"),
        Stage("export", ["export", "--input", str(corpus), "--selection", str(selected),
                         "--prepared", str(prepared), "--output", str(exported), *workers],
              exported / "summary.json", [exported], n,
              lambda: [p.name for p in (exported / "train").glob("*")], shards, "shard"),
        Stage("prepare slice, transformer", [
            "prepare", "--input", str(slice_shards), "--output", str(work / "slice-transformer"),
            *prepare_flags, "--workers", "1"],
              work / "slice-transformer" / "prepare.json", [work / "slice-transformer"], slice_n),
    ]


def record_path(name: str, work: Path) -> Path:
    return work / "stages" / f"{name.replace(', ', '-').replace(' ', '-')}.json"


def done_before(name: str, work: Path, finished: Path, command: str,
                bench: str = COMMAND) -> dict | None:
    """The record of a stage an earlier run finished with the same command, if its output is
    still there."""
    path = record_path(name, work)
    if not (path.exists() and finished.exists()):
        return None
    earlier = json.loads(path.read_text())
    if earlier["command"] != command:
        return None
    print(f"{bench}: {name}: done before ({path})", flush=True)
    return earlier


def keep(name: str, work: Path, result: dict) -> dict:
    record_path(name, work).parent.mkdir(exist_ok=True)
    write_json_atomic(result, record_path(name, work))
    return result


def run(args: argparse.Namespace) -> None:
    check_corpus_flags(args)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load = {"start": os.getloadavg()}
    print(f"{COMMAND}: {args.documents:,} documents from the pool {args.pool} into {work}, "
          f"{args.workers} workers", flush=True)
    corpus_folder = work / "corpus"
    results = {}
    previous = done_before("corpus", work, corpus_folder / "corpus.json", CORPUS_COMMAND)
    if previous:
        results["corpus"] = previous
    else:
        resumed = (corpus_folder / "fineweb").exists()
        t0 = time.perf_counter()
        with PeakSampler(os.getpid()) as sampler:
            build_corpus(args.pool, corpus_folder, args.documents, args.shard_documents,
                         args.seed)
        largest = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        corpus_stage = Stage("corpus", [], corpus_folder / "corpus.json", [corpus_folder],
                             args.documents)
        results["corpus"] = keep("corpus", work, {
            **record(corpus_stage, time.perf_counter() - t0, largest, sampler.peak, resumed),
            "command": CORPUS_COMMAND})
    summary = json.loads((corpus_folder / "corpus.json").read_text())

    slice_n = min(args.slice, args.documents)
    slice_texts = write_slice(corpus_folder / "fineweb", work / "slice" / "fineweb", slice_n)
    for stage in stages(args, work):
        results[stage.name] = (done_before(stage.name, work, stage.done, stage.command)
                               or keep(stage.name, work, run_stage(stage, work)))
    parts_file = work / "stages" / "parts.json"
    if parts_file.exists():
        parts = json.loads(parts_file.read_text())
    else:
        print(f"{COMMAND}: timing prepare's parts in this process on "
              f"{min(PARTS_DOCUMENTS, slice_n):,} documents", flush=True)
        parts = prepare_parts(slice_texts[:PARTS_DOCUMENTS],
                              work / "slice" / "fineweb" / "00000.parquet", args.static_model)
        parts_file.parent.mkdir(exist_ok=True)
        write_json_atomic(parts, parts_file)
    load["end"] = os.getloadavg()

    select_summary = json.loads((work / "select" / "summary.json").read_text())
    tokens_summary = json.loads((work / "tokens" / "summary.json").read_text())
    out = {"flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k != "func"},
           "machine": machine(), "load_average": load,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "wall_s_this_run": round(time.time() - started, 1),
           "corpus": summary, "stages": results, "parts": parts,
           "select": {k: select_summary.get(k) for k in ("rows", "selected", "blocks",
                                                         "selector_time_s", "slowest_block_s")},
           "tokenize": {k: tokens_summary.get(k) for k in ("documents", "tokens", "tasks")}}
    out["projection"] = projection(out, args)
    text = markdown(out)
    for folder in [work] + ([args.results] if args.results else []):
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, folder / "results.json")
        write_text_atomic(text, folder / "results.md")
    print(text, flush=True)


def projection(out: dict, args: argparse.Namespace) -> dict:
    """Node-hours for --project documents on 2-core CPU nodes like this one, from this run's
    rates: prepare's documents/s (the static model over the whole corpus; the transformer's over
    the slice), select's rows/s in blocks of --block_size, tokenize's selected documents/s at the
    share select kept, export's documents/s (it reads every shard, writes the selected share),
    and the tokenizer's training once."""
    stages, n = out["stages"], args.project
    ratio = out["select"]["selected"] / out["select"]["rows"]
    tokenize_rate = out["tokenize"]["documents"] / stages["tokenize"]["wall_s"]
    rows = {
        "prepare (static model, heuristic scorer)": n / stages["prepare"]["documents_per_s"],
        "select (datamask, select's defaults)": n / stages["select"]["documents_per_s"],
        "tokenizer training (once)": stages["tokenizer"]["wall_s"],
        "tokenize (the selected documents)": n * ratio / tokenize_rate,
        "export (the selected documents as a dataset)": n / stages["export"]["documents_per_s"],
    }
    hours = {k: round(v / 3600, 2) for k, v in rows.items()}
    transformer = n / stages["prepare slice, transformer"]["documents_per_s"] / 3600
    return {"documents": n, "selected_share": round(ratio, 4),
            "rates": {"prepare documents/s": stages["prepare"]["documents_per_s"],
                      "select rows/s": stages["select"]["documents_per_s"],
                      "tokenize selected documents/s": round(tokenize_rate, 2),
                      "export documents/s": stages["export"]["documents_per_s"],
                      "prepare documents/s, transformer (slice, 1 worker)":
                          stages["prepare slice, transformer"]["documents_per_s"]},
            "node_hours": hours,
            "total_node_hours": round(sum(hours.values()), 1),
            "prepare_transformer_node_hours": round(transformer, 1),
            "total_node_hours_with_transformer": round(
                sum(hours.values()) - hours["prepare (static model, heuristic scorer)"]
                + transformer, 1),
            "select_block_rows": min(args.block_size or out["select"]["rows"],
                                     out["select"]["rows"])}


def markdown(out: dict) -> str:
    flags, corpus, p = out["flags"], out["corpus"], out["projection"]
    lines = [f"# `make bench-corpus`: {flags['documents']:,} documents on one node", "",
             f"{out['date']}; {out['machine']['cpu']}, {out['machine']['cores']} cores; load "
             f"average {out['load_average']['start'][0]:.1f} at the start, "
             f"{out['load_average']['end'][0]:.1f} at the end; --workers {flags['workers']}, "
             f"--block_size {flags['block_size']:,}, --slice {flags['slice']:,}.", "",
             f"Corpus: {flags['documents']:,} documents in {corpus['shards']} shards, "
             f"{corpus['characters'] / 1e6:,.1f} M characters; length quantiles "
             f"{corpus['length_quantiles']['q']}: corpus {corpus['length_quantiles']['corpus']}, "
             f"pool {corpus['length_quantiles']['pool']} ({corpus['pool_documents']:,} pool "
             f"documents).", "",
             "| stage | documents | wall s | documents/s | peak RSS MB, largest process | "
             "peak RSS MB, process tree | output MB |", "|---|---|---|---|---|---|---|"]
    for name, r in out["stages"].items():
        note = " (resumed: the time covers the part redone)" if r["resumed"] else ""
        lines.append(f"| {name}{note} | {r['documents']:,} | {r['wall_s']:,.1f} | "
                     f"{r['documents_per_s']:,.1f} | {r['peak_rss_largest_mb']:,.0f} | "
                     f"{r['peak_rss_tree_mb']:,.0f} | {r['output_mb']:,.1f} |")
    sel, tok = out["select"], out["tokenize"]
    lines += ["", f"select: {sel['selected']:,} of {sel['rows']:,} rows in {sel['blocks']} "
                  f"block(s), selector {sel['selector_time_s']:,.1f} s (slowest block "
                  f"{sel['slowest_block_s']:,.1f} s); tokenize: {tok['documents']:,} documents, "
                  f"{tok['tokens']:,} tokens in {tok['tasks']} rank(s); tokenizer trained on "
                  f"the first shard.", ""]
    per_doc = {name: part["s"] / part["documents"] for name, part in out["parts"].items()}
    static_path = sum(v for k, v in per_doc.items() if "transformer" not in k)
    transformer_path = sum(v for k, v in per_doc.items() if "static" not in k)
    lines += ["Where prepare's time goes: its parts one after the other in one process on the "
              "slice (its shard read whole, the rest on its first documents; the stage also "
              "hashes ids and writes the shards).", "",
              "| part | documents | s | documents/s | share of read + static + scorer | "
              "share of read + transformer + scorer |", "|---|---|---|---|---|---|"]
    for name, part in out["parts"].items():
        a = f"{per_doc[name] / static_path:.0%}" if "transformer" not in name else "-"
        b = f"{per_doc[name] / transformer_path:.0%}" if "static" not in name else "-"
        lines.append(f"| {name} | {part['documents']:,} | {part['s']:,.2f} | "
                     f"{part['documents'] / max(part['s'], 1e-9):,.0f} | {a} | {b} |")
    rates = "; ".join(f"{k} {v:,.1f}" for k, v in p["rates"].items())
    lines += ["", f"Projection (computed, not measured): {p['documents']:.0e} documents on 2-core "
                  f"CPU nodes like this one, from this run's measured rates ({rates}); select in "
                  f"blocks of {p['select_block_rows']:,} rows (a 10^8 run in blocks of "
                  f"{flags['block_size']:,}: the rate holds per block where the two agree), "
                  f"{p['selected_share']:.0%} selected and tokenized. Node-hours, linear in "
                  f"the nodes (N nodes: divide by N for the wall hours):", "",
              "| stage | node-hours |", "|---|---|"]
    lines += [f"| {k} | {v:,.1f} |" for k, v in p["node_hours"].items()]
    lines += [f"| prepare + select + tokenize + export, static model | "
              f"{p['total_node_hours']:,.1f} |",
              f"| the same with the transformer's prepare (its slice rate) | "
              f"{p['total_node_hours_with_transformer']:,.1f} |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.corpus")


if __name__ == "__main__":
    sys.exit(main())

"""`make bench-dedup`: `pipeline dedup` on bench-corpus's corpus with near-copies planted, timed.

The corpus is bench-corpus's (N documents recombined from a built pool's sentences, seeded). Of
its documents of at least MIN_WORDS words, --planted of N are drawn (seeded) and each gets one copy,
the three kinds in turn:
- exact: the same text under a new id;
- words: the text with --changed_words of its words each replaced by another word of the same
  document;
- embedding: a new document of fresh text (drawn as the corpus's are), whose prepared vector is
  then set at cosine --copy_cosine to its original's (the original's unit vector turned towards a
  seeded random direction): a copy the text cannot show, placed inside dedup's threshold by
  construction, so that only a cut between neighbourhoods can keep both.
The copies are one shard beside the corpus's (hard links: no corpus shard is rewritten); prepare
(the static model, the heuristic scorer) embeds them all, the embedding copies' vectors are set in
a prepared folder of hard links (only the copies' shard is written anew), and `pipeline dedup`
runs on both as a child process, timed as bench-corpus times a stage, once per MinHash library
(--minhash datatrove and rensa, the same settings otherwise), side by side.

Distinct documents are known by construction: a corpus document is distinct when no other corpus
document has its exact text (texts compared by their BLAKE2b hash) and it was given no copy. The
results, per library: per kind, the pairs with both rows kept (the goal: none), the share of
distinct documents removed (the goal: at most 1%), each by dedup's reason, and dedup's rate with the
node-hours that --project documents take at it on nodes like this one; between them, the pairs one
finds and the other keeps, the signature round's documents per task-second, how often the two
word splits give other shingles (on a sample), and the verdict of the plan in
reproduce/results/bench/dedup/backends/ on which library is dedup's default. Everything lands
in --work; a rerun skips what is finished.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COMMAND = "bench-dedup"
KINDS = ("exact", "words", "embedding")
MIN_WORDS = 50  # an original's fewest words, so that a few changed words leave a near-copy
PLANTED_SHARD = "planted.parquet"
GOAL_DISTINCT_REMOVED = 0.01
SHINGLE_SAMPLE = 1_000  # corpus documents whose shingles both word splits make
# the verdict of reproduce/results/bench/dedup/backends/plan.md: rensa is the default iff it keeps
# no planted pair that datatrove's run removes, removes at most this much more of the distinct
# documents, and its signature round is at least this many times datatrove's per task-second
VERDICT_DISTINCT_SLACK = 0.001
VERDICT_SPEEDUP = 10
GOAL_SIGNATURES_PER_CORE = 3_000


def build_parser() -> argparse.ArgumentParser:
    from reproduce.bench.corpus import corpus_arguments
    from reproduce.cli import StageParser
    from reproduce.pipeline.common import POSITIVE
    from reproduce.pipeline.minhash import BACKENDS

    parser = StageParser(prog="python -m reproduce.bench.dedup",
                         description=__doc__.splitlines()[0])
    corpus_arguments(parser, "the corpus, the copies, each stage's output",
                     "the corpus's, the copies' and dedup's seed")
    parser.add_argument("--planted", type=float, default=0.01,
                        help="copies planted, a fraction of --documents, the kinds in turn "
                             "(default: %(default)s)")
    parser.add_argument("--changed_words", type=POSITIVE, default=3,
                        help="words replaced in a words copy (default: %(default)s)")
    parser.add_argument("--copy_cosine", type=float, default=0.995,
                        help="an embedding copy's cosine to its original (default: %(default)s)")
    parser.add_argument("--threshold", type=float, default=0.99,
                        help="dedup's --threshold (default: %(default)s, dedup's)")
    parser.add_argument("--region_pairs", choices=("all", "inside"), default="all",
                        help="dedup's --region_pairs (default: %(default)s, dedup's)")
    parser.add_argument("--workers", type=POSITIVE, default=2,
                        help="local executor workers of prepare and dedup (default: %(default)s)")
    parser.add_argument("--minhash", nargs="+", choices=BACKENDS, default=list(BACKENDS),
                        help="the MinHash libraries dedup runs with, one stage each; the "
                             "libraries' comparison and the plan's verdict need both (default: "
                             "%(default)s)")
    parser.set_defaults(func=run)
    return parser


def check_flags(args: argparse.Namespace) -> None:
    """Everything checked before any work."""
    from datamask.errors import UserError
    from reproduce.bench.corpus import check_corpus_flags

    check_corpus_flags(args)
    if not 0 < args.planted <= 0.5:
        raise UserError(f"--planted must be above 0 and at most 0.5 of --documents, got "
                        f"{args.planted}")
    if not 0 < args.copy_cosine < 1:
        raise UserError(f"--copy_cosine must be above 0 and below 1, got {args.copy_cosine}")
    if not 0 < args.threshold <= 1:
        raise UserError(f"--threshold must be a cosine similarity above 0 and at most 1, got "
                        f"{args.threshold}")
    if round(args.planted * args.documents) < len(KINDS):
        raise UserError(f"--planted {args.planted} of {args.documents} documents plants fewer "
                        f"than one copy of each kind ({', '.join(KINDS)})")
    record = args.work / "copies" / "plants.json"
    if record.exists():
        earlier = json.loads(record.read_text()).get("settings")
        if earlier != planting(args):
            raise UserError(f"--work {args.work}: its copies were planted with "
                            f"{earlier or 'settings it did not record'}, not {planting(args)}; "
                            f"give another --work")


def planting(args: argparse.Namespace) -> dict:
    """What the copies and their vectors depend on: a rerun with other values would find them
    made otherwise."""
    return {name: getattr(args, name) for name in ("documents", "shard_documents", "seed",
                                                   "planted", "changed_words", "copy_cosine")}


def text_hashes(texts: list[str]) -> np.ndarray:
    return np.array([int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
                     for t in texts], dtype=np.uint64)


def corpus_facts(shards: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every corpus document's id, word count and text hash, shard by shard."""
    ids, words, hashes = [], [], []
    for path in shards:
        table = pq.read_table(path, columns=["id", "text"])
        ids.append(np.array(table.column("id").to_pylist(), dtype=object))
        words.append(pc.list_value_length(pc.utf8_split_whitespace(table.column("text")))
                     .to_numpy(zero_copy_only=False))
        hashes.append(text_hashes(table.column("text").to_pylist()))
    return np.concatenate(ids), np.concatenate(words), np.concatenate(hashes)


def change_words(text: str, count: int, rng: np.random.Generator) -> str:
    """`count` words (split at single spaces) each replaced by another word of the text."""
    words = text.split(" ")
    for at in rng.choice(len(words), size=min(count, len(words)), replace=False):
        others = sorted(set(words) - {words[at]})
        words[at] = others[rng.integers(len(others))]
    return " ".join(words)


def plant(args: argparse.Namespace, corpus: Path, folder: Path) -> dict:
    """folder/planted.parquet (the copies, in the corpus's schema) and folder/plants.json (each
    pair: kind, the original's id and the copy's). Written once; a rerun reads them back."""
    from datamask.data import write_json_atomic, write_table_atomic
    from reproduce.bench.corpus import CORPUS_SCHEMA, PoolText
    from reproduce.pool.sources import fineweb_id

    record = folder / "plants.json"
    if record.exists() and (folder / PLANTED_SHARD).exists():
        return json.loads(record.read_text())
    shards = sorted(corpus.glob("*.parquet"))
    ids, words, hashes = corpus_facts(shards)
    rng = np.random.default_rng([args.seed, 41])
    eligible = np.flatnonzero(words >= MIN_WORDS)
    count = min(len(eligible), round(args.planted * args.documents))
    originals = rng.choice(eligible, size=count, replace=False)
    kinds = np.array([KINDS[i % len(KINDS)] for i in range(count)])
    texts, domains = read_rows(shards, originals, ["text", "domain"])
    fresh_at = np.flatnonzero(kinds == "embedding")
    fresh_texts, fresh_domains = PoolText(args.pool).documents(len(fresh_at), rng)
    for i, text, domain in zip(fresh_at, fresh_texts, fresh_domains):
        texts[i], domains[i] = text, domain
    for i in np.flatnonzero(kinds == "words"):
        texts[i] = change_words(texts[i], args.changed_words, rng)
    copy_ids = [fineweb_id(f"datamask-bench-dedup/seed={args.seed}/{kind}/{i}")
                for i, kind in enumerate(kinds)]
    n = len(texts)
    table = pa.table({"text": texts, "id": copy_ids,
                      "dump": [f"datamask bench dedup seed={args.seed}"] * n,
                      "url": [f"datamask-bench-dedup:{i}" for i in range(n)],
                      "date": [None] * n, "file_path": [None] * n, "language": ["en"] * n,
                      "language_score": [None] * n, "token_count": [None] * n,
                      "domain": domains}, schema=CORPUS_SCHEMA)
    folder.mkdir(parents=True, exist_ok=True)
    write_table_atomic(table, folder / PLANTED_SHARD)
    unique, counts = np.unique(hashes, return_counts=True)
    repeated = np.isin(hashes, unique[counts > 1])
    distinct = ~repeated
    distinct[originals] = False
    write_table_atomic(pa.table({"id": pa.array(ids[distinct], pa.string())}),
                       folder / "distinct.parquet")
    plants = {"pairs": [{"kind": str(k), "original": str(ids[o]), "copy": c}
                        for k, o, c in zip(kinds, originals, copy_ids)],
              "settings": planting(args), "corpus_documents": len(ids), "eligible": len(eligible),
              "text_repeated": int(repeated.sum()), "distinct": int(distinct.sum())}
    write_json_atomic(plants, record)
    return plants


def read_rows(shards: list[Path], positions: np.ndarray, columns: list[str]) -> list[list]:
    """`columns` of the rows at `positions` (over the shards in order), in the order asked."""
    values = {name: [None] * len(positions) for name in columns}
    order = np.argsort(positions)
    start = 0
    for path in shards:
        rows = pq.ParquetFile(path).metadata.num_rows
        lo, hi = np.searchsorted(positions[order], [start, start + rows])
        if hi > lo:
            table = pq.read_table(path, columns=columns).take(positions[order[lo:hi]] - start)
            for name in columns:
                for at, value in zip(order[lo:hi], table.column(name).to_pylist()):
                    values[name][at] = value
        start += rows
    return [values[name] for name in columns]


def turned(vectors: np.ndarray, cosine: float, rng: np.random.Generator) -> np.ndarray:
    """Each unit row turned to cosine `cosine` with itself, towards a random direction."""
    from reproduce.bench.blocks import unit_rows

    rows = unit_rows(vectors.astype(np.float64))
    away = rng.standard_normal(rows.shape)
    away -= (away * rows).sum(axis=1, keepdims=True) * rows  # orthogonal to the row
    away /= np.linalg.norm(away, axis=1, keepdims=True)
    return (cosine * rows + np.sqrt(1 - cosine**2) * away).astype(np.float32)


def set_copy_vectors(prepared: Path, folder: Path, plants: dict, cosine: float,
                     seed: int) -> None:
    """folder: prepare's shards hard-linked, the copies' shard written anew with each embedding
    copy's vector at `cosine` to its original's. Written once (atomic folder)."""
    from datamask.data import FEATURE_COLUMN, write_table_atomic
    from reproduce.pipeline.common import atomic_folder

    if folder.exists():
        return
    pairs = [p for p in plants["pairs"] if p["kind"] == "embedding"]
    originals = pa.array([p["original"] for p in pairs], pa.string())
    found = {}
    for path in sorted(prepared.glob("*.parquet")):
        if path.name != PLANTED_SHARD:
            table = pq.read_table(path, columns=["id", FEATURE_COLUMN])
            table = table.filter(pc.is_in(table.column("id"), value_set=originals))
            found.update(zip(table.column("id").to_pylist(),
                             table.column(FEATURE_COLUMN).to_pylist()))
    vectors = turned(np.array([found[p["original"]] for p in pairs], np.float32), cosine,
                     np.random.default_rng([seed, 43]))
    copies = pq.read_table(prepared / PLANTED_SHARD)
    at = {copy: i for i, copy in enumerate(copies.column("id").to_pylist())}
    features = copies.column(FEATURE_COLUMN).to_pylist()
    for pair, vector in zip(pairs, vectors):
        features[at[pair["copy"]]] = vector.tolist()
    index = copies.schema.get_field_index(FEATURE_COLUMN)
    copies = copies.set_column(index, copies.schema.field(index),
                               pa.array(features, copies.schema.field(index).type))
    with atomic_folder(folder) as tmp:
        for path in sorted(prepared.glob("*.parquet")):
            if path.name != PLANTED_SHARD:
                os.link(path, tmp / path.name)
        write_table_atomic(copies, tmp / PLANTED_SHARD)


def counts(plants: dict, keep: Path, distinct: Path) -> dict:
    """Per kind, the pairs by what dedup kept; the distinct documents removed, by reason."""
    table = pq.read_table(keep / "keep.parquet")
    kept = dict(zip(table.column("id").to_pylist(), table.column("keep").to_pylist()))
    removals = pq.read_table(keep / "removals.parquet", columns=["id", "reason"])
    reason = dict(zip(removals.column("id").to_pylist(), removals.column("reason").to_pylist()))
    kinds = []
    for kind in KINDS:
        rows = [p for p in plants["pairs"] if p["kind"] == kind]
        both = [p for p in rows if kept[p["original"]] and kept[p["copy"]]]
        kinds.append({"kind": kind, "planted": len(rows), "both_kept": len(both),
                      "copy_removed": sum(not kept[p["copy"]] for p in rows),
                      "original_removed": sum(not kept[p["original"]] for p in rows),
                      "both_kept_ids": [[p["original"], p["copy"]] for p in both[:20]]})
    distinct_ids = pq.read_table(distinct).column("id").to_pylist()
    gone = [reason[i] for i in distinct_ids if not kept[i]]
    return {"kinds": kinds, "pairs_both_kept": sum(k["both_kept"] for k in kinds),
            "distinct": {"documents": len(distinct_ids), "removed": len(gone),
                         "by_reason": {r: gone.count(r) for r in ("minhash", "embedding")}},
            "distinct_share_removed": round(len(gone) / max(len(distinct_ids), 1), 6)}


def round_seconds(logs: Path) -> dict[str, float]:
    """Each dedup round's time as datatrove's stats.json gives it: summed over its tasks and
    steps (a step that timed nothing records a bare 0)."""
    def seconds(step: dict) -> float:
        timed = step.get("time_stats", 0)
        return timed["total"] if isinstance(timed, dict) else timed

    return {path.parent.name: round(sum(map(seconds, json.loads(path.read_text()))), 1)
            for path in sorted(logs.glob("*/stats.json"))}


def stages(args: argparse.Namespace, work: Path, rows: int):
    """prepare, then one dedup stage per MinHash library, {library: stage}."""
    from reproduce.bench.corpus import Stage

    text, prepared, planted = work / "input" / "fineweb", work / "prepared", work / "planted"
    workers = ["--workers", str(args.workers)]
    prepare = Stage("prepare", ["prepare", "--input", str(text), "--output", str(prepared),
                                "--embedding_model", args.static_model,
                                "--quality", "heuristic", "--no_progress", *workers],
                    prepared / "prepare.json", [prepared], rows,
                    lambda: [p.stem for p in prepared.glob("*.parquet")],
                    len(list(text.glob("*.parquet"))), "shard")
    dedups = {}
    for backend in dict.fromkeys(args.minhash):
        out = work / f"dedup-{backend}"
        dedups[backend] = Stage(
            f"dedup-{backend}", ["dedup", "--input", str(text), "--prepared", str(planted),
                                 "--output", str(out), "--threshold", str(args.threshold),
                                 "--region_pairs", args.region_pairs, "--seed", str(args.seed),
                                 "--minhash", backend, *workers],
            out / "manifest.json", [out], rows)
    return prepare, dedups


def kept_whole(plants: dict, keep: Path) -> np.ndarray:
    """Per planted pair, in plants.json's order, whether dedup kept both its rows."""
    table = pq.read_table(keep / "keep.parquet")
    kept = dict(zip(table.column("id").to_pylist(), table.column("keep").to_pylist()))
    return np.array([kept[p["original"]] and kept[p["copy"]] for p in plants["pairs"]], bool)


def library_results(plants: dict, work: Path, backend: str, stage: dict, project: float) -> dict:
    """One library's dedup run: its counts, its rounds' task seconds, its signature round's
    documents per task-second and its stage's rate, projected to `project` documents."""
    folder = work / f"dedup-{backend}"
    manifest = json.loads((folder / "manifest.json").read_text())
    rounds = round_seconds(folder / "logs")
    rate = stage["documents_per_s"]
    return {"dedup": {"removed": manifest["removed"], "kept": manifest["kept"],
                      "regions": manifest["embedding"]["regions"],
                      "routed_rows": manifest["routed"]["routed"], "round_task_s": rounds,
                      "hash_precision": manifest["minhash"]["hash_precision"]},
            **counts(plants, folder, work / "copies" / "distinct.parquet"),
            "signature_documents_per_task_s": round(manifest["input"]["rows"]
                                                    / max(rounds["signatures"], 1e-9), 1),
            "projection": {"documents": project, "dedup_documents_per_s": rate,
                           "node_hours": round(project / rate / 3600, 1)}}


def between(plants: dict, work: Path) -> dict:
    """Per kind, the planted pairs one library's run removes a row of and the other keeps whole;
    and the rows MinHash removed in one run and not in the other."""
    whole = {b: kept_whole(plants, work / f"dedup-{b}") for b in ("datatrove", "rensa")}
    kinds = np.array([p["kind"] for p in plants["pairs"]])
    per_kind = [{"kind": kind,
                 "found_by_datatrove_only": int((~whole["datatrove"] & whole["rensa"]
                                                 & (kinds == kind)).sum()),
                 "found_by_rensa_only": int((whole["datatrove"] & ~whole["rensa"]
                                             & (kinds == kind)).sum())} for kind in KINDS]
    removed = {}
    for backend in whole:
        table = pq.read_table(work / f"dedup-{backend}" / "removals.parquet",
                              columns=["id", "reason"])
        removed[backend] = set(table.filter(pc.equal(table.column("reason"), "minhash"))
                               .column("id").to_pylist())
    return {"kinds": per_kind,
            "kept_by_rensa_removed_by_datatrove": sum(k["found_by_datatrove_only"]
                                                      for k in per_kind),
            "minhash_removed_by_datatrove_only": len(removed["datatrove"] - removed["rensa"]),
            "minhash_removed_by_rensa_only": len(removed["rensa"] - removed["datatrove"]),
            "minhash_removed_by_both": len(removed["datatrove"] & removed["rensa"])}


def shingle_agreement(shards: list[Path], n_grams: int, seed: int) -> dict:
    """On SHINGLE_SAMPLE corpus documents (seeded): how often the shingles (word n-grams, before
    hashing) of rensa's split differ from those of datatrove's (its simplify_text and spaCy's
    English tokenizer, as its signature step makes them)."""
    from datatrove.utils.text import ngrams, simplify_text
    from datatrove.utils.typeshelper import Languages
    from datatrove.utils.word_tokenizers import load_word_tokenizer
    from reproduce.pipeline.minhash import split_words

    total = sum(pq.ParquetFile(p).metadata.num_rows for p in shards)
    rng = np.random.default_rng([seed, 47])
    chosen = np.sort(rng.choice(total, min(SHINGLE_SAMPLE, total), replace=False))
    (texts,) = read_rows(shards, chosen, ["text"])
    tokenizer = load_word_tokenizer(Languages.english)
    differ, jaccard, union, apart = 0, [], 0, 0
    for text in texts:
        theirs = set(ngrams(tokenizer.word_tokenize(simplify_text(text)), n_grams))
        ours = set(ngrams(split_words(text), n_grams))
        both = theirs | ours
        differ += theirs != ours
        jaccard.append(len(theirs & ours) / len(both) if both else 1.0)
        union, apart = union + len(both), apart + len(theirs ^ ours)
    return {"documents": len(texts), "n_grams": n_grams, "documents_differing": differ,
            "share_documents_differing": round(differ / max(len(texts), 1), 4),
            "mean_jaccard": round(float(np.mean(jaccard)) if jaccard else 1.0, 6),
            "share_shingles_differing": round(apart / max(union, 1), 6)}


def verdict(libraries: dict, found: dict) -> dict:
    """The plan's rule: rensa is dedup's default iff its run keeps whole no planted pair that
    datatrove's run removes a row of, removes at most VERDICT_DISTINCT_SLACK more of the
    distinct documents, and its signature round is at least VERDICT_SPEEDUP times datatrove's in
    documents per task-second."""
    ours, theirs = libraries["rensa"], libraries["datatrove"]
    speedup = (ours["signature_documents_per_task_s"]
               / max(theirs["signature_documents_per_task_s"], 1e-9))
    tests = {
        "no_pair_kept_that_datatrove_removes": found["kept_by_rensa_removed_by_datatrove"] == 0,
        "distinct_removed_within_slack": (ours["distinct_share_removed"]
                                          <= theirs["distinct_share_removed"]
                                          + VERDICT_DISTINCT_SLACK),
        "signatures_speedup_at_least": speedup >= VERDICT_SPEEDUP}
    return {**tests, "signature_speedup": round(speedup, 1),
            "default": "rensa" if all(tests.values()) else "datatrove",
            "goal_signatures_per_core": GOAL_SIGNATURES_PER_CORE,
            "goal_signatures_per_core_met": (ours["signature_documents_per_task_s"]
                                             >= GOAL_SIGNATURES_PER_CORE)}


def run(args: argparse.Namespace) -> None:
    from datamask.data import write_json_atomic, write_text_atomic
    from datamask.shared import machine
    from reproduce.bench.corpus import build_corpus, done_before, keep, run_stage
    from reproduce.pipeline.common import atomic_folder

    check_flags(args)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print(f"{COMMAND}: {args.documents:,} documents and {args.planted:g} of them planted as "
          f"copies, in {work}", flush=True)
    build_corpus(args.pool, work / "corpus", args.documents, args.shard_documents, args.seed,
                 COMMAND)
    corpus = work / "corpus" / "fineweb"
    plants = plant(args, corpus, work / "copies")
    text = work / "input" / "fineweb"
    if not text.exists():
        with atomic_folder(text) as tmp:
            for path in sorted(corpus.glob("*.parquet")) + [work / "copies" / PLANTED_SHARD]:
                os.link(path, tmp / path.name)
    rows = plants["corpus_documents"] + len(plants["pairs"])
    prepare, dedups = stages(args, work, rows)
    results = {}
    results["prepare"] = (done_before(prepare.name, work, prepare.done, prepare.command, COMMAND)
                          or keep(prepare.name, work, run_stage(prepare, work, COMMAND)))
    set_copy_vectors(work / "prepared", work / "planted", plants, args.copy_cosine, args.seed)
    libraries = {}
    for backend, stage in dedups.items():
        results[stage.name] = (done_before(stage.name, work, stage.done, stage.command, COMMAND)
                               or keep(stage.name, work, run_stage(stage, work, COMMAND)))
        libraries[backend] = library_results(plants, work, backend, results[stage.name],
                                             args.project)
    both = len(libraries) == 2  # the libraries compared, the plan's verdict
    found = between(plants, work) if both else None
    out = {"flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k != "func"},
           "machine": machine(), "load_average_end": os.getloadavg(),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "wall_s_this_run": round(time.time() - started, 1),
           "corpus": {k: plants[k] for k in ("corpus_documents", "eligible", "text_repeated",
                                             "distinct")},
           "rows": rows, "stages": results, "libraries": libraries, "between": found,
           "shingles": (shingle_agreement(sorted(corpus.glob("*.parquet")), 5, args.seed)
                        if both else None),
           "goal_distinct_removed": GOAL_DISTINCT_REMOVED,
           "verdict": verdict(libraries, found) if both else None}
    text_md = markdown(out)
    for folder in [work] + ([args.results] if args.results else []):
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, folder / "results.json")
        write_text_atomic(text_md, folder / "results.md")
    print(text_md, flush=True)


def markdown(out: dict) -> str:
    flags, c, m = out["flags"], out["corpus"], out["machine"]
    libraries, found, v, s = out["libraries"], out["between"], out["verdict"], out["shingles"]
    names = list(libraries)
    lines = [f"# `make bench-dedup`: {flags['documents']:,} documents with planted copies, "
             f"MinHash by {' and '.join(names)}", "",
             f"{out['date']}; {m['cpu']}, {m['cores']} cores; --workers {flags['workers']}, "
             f"--threshold {flags['threshold']}, --copy_cosine {flags['copy_cosine']}, "
             f"--changed_words {flags['changed_words']}, --planted {flags['planted']}, "
             f"--region_pairs {flags['region_pairs']}, --seed {flags['seed']}; word 5-grams, "
             f"14 buckets of 8 hashes.", "",
             f"Corpus: {c['corpus_documents']:,} documents ({c['eligible']:,} of at least "
             f"{MIN_WORDS} words, the originals' pool); {c['text_repeated']:,} share their exact "
             f"text with another; {c['distinct']:,} distinct (unique text, no copy planted). "
             f"Each dedup run read {out['rows']:,} rows.", "",
             "| stage | rows | wall s | rows/s | peak RSS MB, largest process | peak RSS MB, "
             "process tree |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in out["stages"].items():
        lines.append(f"| {name} | {r['documents']:,} | {r['wall_s']:,.1f} | "
                     f"{r['documents_per_s']:,.1f} | {r['peak_rss_largest_mb']:,.0f} | "
                     f"{r['peak_rss_tree_mb']:,.0f} |")
    lines += ["", "| library | signature round, documents per task-second | rounds' task seconds "
                  "(datatrove's, summed over tasks) | regions | rows routed |",
              "|---|---:|---|---:|---:|"]
    for name, lib in libraries.items():
        d = lib["dedup"]
        lines.append(f"| {name} | {lib['signature_documents_per_task_s']:,.1f} | "
                     f"{', '.join(f'{k} {t:,.1f}' for k, t in d['round_task_s'].items())} | "
                     f"{d['regions']} | {d['routed_rows']:,} |")
    apart = (" | removed by datatrove's run only | removed by rensa's run only |" if found
             else " |")
    lines += ["", "| copy | planted | " + " | ".join(f"both kept, {n} (goal 0)" for n in names)
              + apart, "|---|---:|" + "---:|" * (len(names) + (2 if found else 0))]
    for at, kind in enumerate(KINDS):
        rows = [lib["kinds"][at] for lib in libraries.values()]
        line = (f"| {kind} | {rows[0]['planted']:,} | "
                + " | ".join(f"{r['both_kept']:,}" for r in rows) + " |")
        if found:
            pair = found["kinds"][at]
            line += f" {pair['found_by_datatrove_only']:,} | {pair['found_by_rensa_only']:,} |"
        lines.append(line)
    lines.append("")
    for name, lib in libraries.items():
        d = lib["distinct"]
        reasons = ", ".join(f"{r} {n:,}" for r, n in d["by_reason"].items())
        removed = ", ".join(f"{r} {n:,}" for r, n in lib["dedup"]["removed"].items())
        p = lib["projection"]
        lines.append(f"- {name}: distinct documents removed {d['removed']:,} of "
                     f"{d['documents']:,} ({lib['distinct_share_removed']:.2%}; goal at most "
                     f"{GOAL_DISTINCT_REMOVED:.0%}), by reason: {reasons}; all removals: "
                     f"{removed}. Projection (computed from the stage's measured rate, not run): "
                     f"{p['documents']:.0e} documents at {p['dedup_documents_per_s']:,.1f} "
                     f"rows/s take {p['node_hours']:,.1f} node-hours on nodes like this one.")
    if not found:
        return "\n".join(lines + ["", f"One library ({', '.join(names)}): no comparison of "
                                       f"the libraries and no verdict of backends/plan.md.", ""])
    lines += [f"- MinHash removals: {found['minhash_removed_by_both']:,} by both runs, "
              f"{found['minhash_removed_by_datatrove_only']:,} by datatrove's only, "
              f"{found['minhash_removed_by_rensa_only']:,} by rensa's only.",
              f"- Shingles, on {s['documents']:,} corpus documents: rensa's split gives other "
              f"word {s['n_grams']}-grams than datatrove's in {s['documents_differing']:,} "
              f"({s['share_documents_differing']:.1%}); mean Jaccard of the two sets "
              f"{s['mean_jaccard']:.4f}; {s['share_shingles_differing']:.3%} of the shingles "
              f"in one set only.", "",
              "## Verdict (the rule of backends/plan.md)", "",
              f"- rensa's run keeps whole no planted pair that datatrove's run removes: "
              f"{'yes' if v['no_pair_kept_that_datatrove_removes'] else 'no'} "
              f"({found['kept_by_rensa_removed_by_datatrove']}).",
              f"- rensa removes at most {VERDICT_DISTINCT_SLACK:.1%} more of the distinct "
              f"documents: {'yes' if v['distinct_removed_within_slack'] else 'no'}.",
              f"- rensa's signature round at least {VERDICT_SPEEDUP}x datatrove's per "
              f"task-second: {'yes' if v['signatures_speedup_at_least'] else 'no'} "
              f"({v['signature_speedup']:,.1f}x).",
              f"- **dedup's default: {v['default']}.** Apart from the verdict, the goal of "
              f"{GOAL_SIGNATURES_PER_CORE:,} signature documents per task-second for rensa: "
              f"{'met' if v['goal_signatures_per_core_met'] else 'not met'}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.dedup")


if __name__ == "__main__":
    sys.exit(main())

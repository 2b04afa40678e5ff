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
runs on both as a child process, timed as bench-corpus times a stage.

Distinct documents are known by construction: a corpus document is distinct when no other corpus
document has its exact text (texts compared by their BLAKE2b hash) and it was given no copy. The
results: per kind, the pairs with both rows kept (the goal: none), the share of distinct documents
removed (the goal: at most 1%), each by dedup's reason, and dedup's rate with the node-hours that
--project documents take at it on nodes like this one. Everything lands in --work; a rerun skips
what is finished.
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


def build_parser() -> argparse.ArgumentParser:
    from reproduce.bench.corpus import corpus_arguments
    from reproduce.cli import StageParser
    from reproduce.pipeline.common import POSITIVE

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
    from reproduce.bench.corpus import Stage

    text, prepared, planted = work / "input" / "fineweb", work / "prepared", work / "planted"
    dedup = work / "dedup"
    workers = ["--workers", str(args.workers)]
    prepare = Stage("prepare", ["prepare", "--input", str(text), "--output", str(prepared),
                                "--embedding_model", args.static_model,
                                "--quality", "heuristic", "--no_progress", *workers],
                    prepared / "prepare.json", [prepared], rows,
                    lambda: [p.stem for p in prepared.glob("*.parquet")],
                    len(list(text.glob("*.parquet"))), "shard")
    dedup_stage = Stage("dedup", ["dedup", "--input", str(text), "--prepared", str(planted),
                                  "--output", str(dedup), "--threshold", str(args.threshold),
                                  "--region_pairs", args.region_pairs, "--seed", str(args.seed),
                                  *workers],
                        dedup / "manifest.json", [dedup], rows)
    return prepare, dedup_stage


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
    prepare, dedup = stages(args, work, rows)
    results = {}
    results["prepare"] = (done_before(prepare.name, work, prepare.done, prepare.command, COMMAND)
                          or keep(prepare.name, work, run_stage(prepare, work, COMMAND)))
    set_copy_vectors(work / "prepared", work / "planted", plants, args.copy_cosine, args.seed)
    results["dedup"] = (done_before(dedup.name, work, dedup.done, dedup.command, COMMAND)
                        or keep(dedup.name, work, run_stage(dedup, work, COMMAND)))
    manifest = json.loads((work / "dedup" / "manifest.json").read_text())
    found = counts(plants, work / "dedup", work / "copies" / "distinct.parquet")
    rate = results["dedup"]["documents_per_s"]
    out = {"flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k != "func"},
           "machine": machine(), "load_average_end": os.getloadavg(),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "wall_s_this_run": round(time.time() - started, 1),
           "corpus": {k: plants[k] for k in ("corpus_documents", "eligible", "text_repeated",
                                             "distinct")},
           "rows": rows, "stages": results,
           "dedup": {"removed": manifest["removed"], "kept": manifest["kept"],
                     "regions": manifest["embedding"]["regions"],
                     "routed_rows": manifest["routed"]["routed"],
                     "round_task_s": round_seconds(work / "dedup" / "logs")},
           **found,
           "goal_distinct_removed": GOAL_DISTINCT_REMOVED,
           "projection": {"documents": args.project, "dedup_documents_per_s": rate,
                          "node_hours": round(args.project / rate / 3600, 1)}}
    text_md = markdown(out)
    for folder in [work] + ([args.results] if args.results else []):
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, folder / "results.json")
        write_text_atomic(text_md, folder / "results.md")
    print(text_md, flush=True)


def markdown(out: dict) -> str:
    flags, c, d = out["flags"], out["corpus"], out["distinct"]
    m = out["machine"]
    lines = [f"# `make bench-dedup`: {flags['documents']:,} documents with planted copies", "",
             f"{out['date']}; {m['cpu']}, {m['cores']} cores; --workers {flags['workers']}, "
             f"--threshold {flags['threshold']}, --copy_cosine {flags['copy_cosine']}, "
             f"--changed_words {flags['changed_words']}, --planted {flags['planted']}, "
             f"--region_pairs {flags['region_pairs']}, --seed {flags['seed']}.", "",
             f"Corpus: {c['corpus_documents']:,} documents ({c['eligible']:,} of at least "
             f"{MIN_WORDS} words, the originals' pool); {c['text_repeated']:,} share their exact "
             f"text with another; {c['distinct']:,} distinct (unique text, no copy planted). "
             f"dedup read {out['rows']:,} rows in {out['dedup']['regions']} regions and routed "
             f"{out['dedup']['routed_rows']:,} to them, guests included. Its rounds' task "
             f"seconds (datatrove's, summed over tasks): "
             f"{', '.join(f'{k} {v:,.1f}' for k, v in out['dedup']['round_task_s'].items())}.",
             "",
             "| stage | rows | wall s | rows/s | peak RSS MB, largest process | peak RSS MB, "
             "process tree |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in out["stages"].items():
        lines.append(f"| {name} | {r['documents']:,} | {r['wall_s']:,.1f} | "
                     f"{r['documents_per_s']:,.1f} | {r['peak_rss_largest_mb']:,.0f} | "
                     f"{r['peak_rss_tree_mb']:,.0f} |")
    lines += ["", "| copy | planted | both kept (goal 0) | copy removed | original removed |",
              "|---|---:|---:|---:|---:|"]
    for k in out["kinds"]:
        lines.append(f"| {k['kind']} | {k['planted']:,} | {k['both_kept']:,} | "
                     f"{k['copy_removed']:,} | {k['original_removed']:,} |")
    reasons = ", ".join(f"{r} {n:,}" for r, n in d["by_reason"].items())
    removed = ", ".join(f"{r} {n:,}" for r, n in out["dedup"]["removed"].items())
    p = out["projection"]
    share = out["distinct_share_removed"]
    lines += ["", f"Distinct documents removed: {d['removed']:,} of {d['documents']:,} "
                  f"({share:.2%}; goal at most {GOAL_DISTINCT_REMOVED:.0%}); by reason: "
                  f"{reasons}. All removals: {removed}.", "",
              f"Goals: no pair with both rows kept: "
              f"{'met' if out['pairs_both_kept'] == 0 else 'not met'}; distinct documents "
              f"removed at most {GOAL_DISTINCT_REMOVED:.0%}: "
              f"{'met' if share <= GOAL_DISTINCT_REMOVED else 'not met'}.", "",
              f"Projection (computed from the dedup stage's measured rate, not run): "
              f"{p['documents']:.0e} documents at {p['dedup_documents_per_s']:,.1f} rows/s "
              f"take {p['node_hours']:,.1f} node-hours on nodes like this one.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.dedup")


if __name__ == "__main__":
    sys.exit(main())

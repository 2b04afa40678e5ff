"""`make bench-precision`: prepare's transformer in bf16 and fp16 judged against fp32 by
bench-static's valid yardstick (reproduce/results/half-precision/plan.md, committed before the
run).

On bench-static's three families (its `families`, at plans 3 and 4's seeds), every route embeds
the same documents in prepare's calls: the reference (fp32 as prepare runs it), two harmless
variants (one document per call, one torch thread: they check the band in this run), random unit
vectors (known-bad) and the candidates, bf16 and fp16. Each is scored by origin-free neighbour
recall against the reference (bench-static's `origin_free_recall`), with linear CKA and the
lowest per-document cosine beside it; the rule picks the GPU route's precision. Beside the
verdict: each route's embedding documents/s on this CPU (one pass), and the exact character cut
on each family (how many texts it cuts, how many it tokenizes whole again because the cut fell
short, and that every batch's token ids are the whole texts')."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from datamask.data import write_text_atomic
from datamask.errors import UserError
from reproduce.bench import work_folder
from reproduce.bench.blocks import unit_rows
from reproduce.bench.static import (BAD_CEILING, BAND, FAMILIES, OneThread, embed_all, families,
                                    linear_cka, origin_free_recall, shard_table)
from reproduce.pipeline.embedders import Embedder, cut_text

CANDIDATES = ("bf16", "fp16")
TIE = 0.005  # within this of each other, bf16 is chosen (the plan's rule)
ROUTES = {"fp32 (reference)": "reference", "one document per call": "harmless",
          "one torch thread": "harmless", "random unit vectors": "known-bad",
          **{c: "candidate" for c in CANDIDATES}}


def embedders() -> dict:
    reference = Embedder().load()
    return {"fp32 (reference)": reference, "one document per call": Embedder(batch_size=1).load(),
            "one torch thread": OneThread(reference),
            **{c: Embedder(precision=c).load() for c in CANDIDATES}}


def cut_record(embedder: Embedder, texts: list[str]) -> dict:
    """The exact cut on these texts, in the reference's batches: texts longer than the budget,
    those tokenized whole again, and whether every batch's ids are the whole texts'."""
    budget, tokens = embedder.cut_budget, embedder.model.max_seq_length
    longer = [t for t in texts if len(t) > budget]
    order = np.argsort([-len(t) for t in texts])
    same = True
    for start in range(0, len(texts), embedder.encoder_batch):
        batch = [texts[i] for i in order[start:start + embedder.encoder_batch]]
        same &= bool(embedder.features(batch)["input_ids"].equal(
            embedder.model.preprocess(batch)["input_ids"]))
    short = embedder.model.preprocess([cut_text(t, budget) for t in longer])["attention_mask"]
    fell_short = int((short.sum(dim=1) < tokens).sum()) if longer else 0
    return {"budget_chars": budget, "documents": len(texts), "cut": len(longer),
            "tokenized_whole_again": fell_short, "ids_identical": same}


def measure(name: str, shards: Path, routes: dict, chunk: int, seed: int) -> dict:
    texts = shard_table(shards).column("text").to_pylist()
    vectors, rates = {}, {}
    for route, embedder in routes.items():
        start = time.perf_counter()
        vectors[route] = embed_all(embedder, texts, chunk)
        rates[route] = len(texts) / (time.perf_counter() - start)
        print(f"{name}: {route} {rates[route]:.1f} documents/s", flush=True)
    reference = vectors["fp32 (reference)"]
    vectors["random unit vectors"] = unit_rows(np.random.default_rng(seed).standard_normal(
        reference.shape).astype(np.float32))
    rows = []
    for route, kind in ROUTES.items():
        own = vectors[route]
        rows.append({"family": name, "route": route, "kind": kind, "documents": len(texts),
                     "origin_free_recall": (1.0 if kind == "reference"
                                            else origin_free_recall(reference, own)),
                     "linear_cka": linear_cka(reference, own),
                     "min_cosine": float(np.min(np.sum(reference * own, axis=1))),
                     "docs_per_s": rates.get(route)})
    return {"rows": rows, "cut": {"family": name, **cut_record(routes["fp32 (reference)"],
                                                                texts)}}


def verdict(rows: list[dict]) -> tuple[str, str | None]:
    """The plan's rule: (text, the chosen precision or None)."""
    def worst(route):
        return min(r["origin_free_recall"] for r in rows if r["route"] == route)

    harmless = [r for r in rows if r["kind"] == "harmless"]
    bad = [r for r in rows if r["kind"] == "known-bad"]
    if not all(BAND[0] <= r["origin_free_recall"] <= BAND[1] for r in harmless) or \
            any(r["origin_free_recall"] > BAD_CEILING for r in bad):
        return "the yardstick failed in this run (a harmless variant or the known-bad)", None
    scores = {c: worst(c) for c in CANDIDATES}
    passing = [c for c in CANDIDATES if scores[c] >= BAND[0]]
    lines = [f"{c}: origin-free neighbour recall {scores[c]:.3f} at worst "
             f"({'passes' if c in passing else 'fails'})" for c in CANDIDATES]
    if not passing:
        return "\n".join(lines + ["neither passes: the GPU route stays fp32"]), None
    best = max(passing, key=lambda c: scores[c])
    if len(passing) == 2 and abs(scores["bf16"] - scores["fp16"]) <= TIE:
        best = "bf16"
    return "\n".join(lines + [f"the GPU route: --precision {best}"]), best


def table(rows: list[dict], cuts: list[dict]) -> str:
    lines = ["| family | route | kind | documents | origin-free neighbour recall | linear CKA | "
             "lowest cosine to fp32 | embedding documents/s (this CPU) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        speed = f"{r['docs_per_s']:,.1f}" if r["docs_per_s"] else "-"
        lines.append(f"| {r['family']} | {r['route']} | {r['kind']} | {r['documents']} | "
                     f"{r['origin_free_recall']:.3f} | {r['linear_cka']:.4f} | "
                     f"{r['min_cosine']:.4f} | {speed} |")
    lines += ["", "| family | documents | budget (characters) | cut | tokenized whole again | "
              "token ids the whole texts' |", "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {c['family']} | {c['documents']} | {c['budget_chars']} | {c['cut']} | "
              f"{c['tokenized_whole_again']} | {'yes' if c['ids_identical'] else 'NO'} |"
              for c in cuts]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--family_seeds", type=int, nargs=3, default=[2, 1, 3],
                        metavar=("POOL", "BBC", "DOCS"),
                        help="bench-static's families' seeds (default: plans 3 and 4's, "
                             "%(default)s)")
    parser.add_argument("--bbc_limit", type=int, default=1000,
                        help="BBC articles drawn (default: %(default)s)")
    parser.add_argument("--chunk", type=int, default=256, help="prepare's rows per call")
    parser.add_argument("--seed", type=int, default=0, help="the random vectors' seed")
    parser.add_argument("--work", type=Path, help="empty scratch folder (default: temporary)")
    parser.add_argument("--results", type=Path, help="write rows.json and table.md here")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.chunk < 1:
        raise UserError(f"--chunk must be at least 1, got {args.chunk}")
    with work_folder(args.work) as work:
        routes, rows, cuts = embedders(), [], []
        for name, shards in families(work, args.families, None, args.bbc_limit,
                                     tuple(args.family_seeds)).items():
            measured = measure(name, shards, routes, args.chunk, args.seed)
            rows += measured["rows"]
            cuts.append(measured["cut"])
            print(table(rows, cuts), flush=True)
    text, chosen = verdict(rows)
    print(f"\nVerdict (plan.md):\n{text}")
    if args.results:
        args.results.mkdir(parents=True, exist_ok=True)
        write_text_atomic(json.dumps({"rows": rows, "cut": cuts, "chosen": chosen}, indent=1)
                          + "\n", args.results / "rows.json")
        write_text_atomic(f"{table(rows, cuts)}\n\nVerdict:\n{text}\n", args.results / "table.md")


if __name__ == "__main__":
    main()

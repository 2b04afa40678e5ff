"""`make bench-static`: prepare's static embedding model (model2vec, distilled from
all-MiniLM-L6-v2) against the transformer it came from (reproduce/results/static-embedding/plan.md).

On the demo pool and a BBC slice, both built offline, side by side in one process: documents/s of
each model over the same documents (medians of --repeats interleaved passes, prepare's chunk of
256), how far each document's static neighbours are its transformer neighbours, and the joint
objective (Pair_simi, lamb 0.5, scored on the transformer's vectors with the project's Report) of
the selection `pipeline select --method datamask` makes at select's defaults from each model's
prepared rows, as a share of the transformer's. On a shared machine read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datamask.data import ID_COLUMN, read_dataset
from datamask.errors import UserError
from datamask.report import Report

from reproduce.pipeline.bbc import write_bbc_fineweb
from reproduce.pipeline.common import parquet_files
from reproduce.pipeline.prepare import Embedder, HeuristicQuality, prepare
from reproduce.pipeline.select import run_select
from reproduce.pipeline.static import STATIC, Distillation, StaticEmbedder
from reproduce.pool.build import build_pool

TRANSFORMER = "transformer (torch fp32)"
STATIC_ROW = "static (model2vec, 256 dims)"
LAMB = 0.5
METRIC = "Pair_simi"  # the learner's default metric: the verdict's objective
NEIGHBOURS = 10


def embed_all(embedder, texts: list[str], chunk: int) -> np.ndarray:
    """As prepare embeds: `chunk` documents per call."""
    return np.concatenate([embedder(texts[i:i + chunk]) for i in range(0, len(texts), chunk)])


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """Each row's k nearest other rows by cosine (rows are unit length or zero)."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def neighbour_agreement(reference: np.ndarray, other: np.ndarray, k: int) -> dict:
    """The 10-NN overlap, and the reference-cosine to each document's `other` neighbours as a
    share of that to its reference neighbours (1: the same neighbourhoods, as close)."""
    ref_nn, other_nn = nearest(reference, k), nearest(other, k)
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(ref_nn, other_nn)])
    rows = np.arange(len(reference))[:, None]
    sims = reference @ reference.T
    return {"overlap": float(overlap),
            "cosine_share": float(sims[rows, other_nn].mean() / sims[rows, ref_nn].mean())}


def selection_mask(folder: Path, ids: np.ndarray) -> np.ndarray:
    table = pq.read_table(folder / "selection.parquet", columns=[ID_COLUMN, "selected"])
    chosen = dict(zip(table.column(ID_COLUMN).to_pylist(), table.column("selected").to_pylist()))
    return np.array([chosen[int(i)] for i in ids], dtype=bool)


def corpora(work: Path, names: list[str], pool: Path | None, bbc_limit: int) -> dict[str, Path]:
    """{name: FineWeb shard folder}: the demo pool (built unless given) and a BBC slice."""
    found = {}
    if "pool" in names:
        if pool is None:
            pool = work / "pool"
            build_pool(pool, 0, heldout_chars=40_000, task_articles=60, max_mb_per_domain=0.5)
        found["pool"] = pool / "fineweb"
    if "BBC" in names:
        write_bbc_fineweb(work / "bbc", work / "bbc-tasks", limit=bbc_limit, seed=0)
        found["BBC"] = work / "bbc"
    return found


def measure(name: str, shards: Path, models: dict, work: Path, args) -> list[dict]:
    """One corpus: a row per model (speed, neighbours, objective share against the transformer)."""
    files = parquet_files([str(shards)])
    texts = pa.concat_tables([pq.read_table(f, columns=["text"]) for f in files]) \
        .column("text").to_pylist()
    seconds = {m: [] for m in models}
    vectors = {}
    for _ in range(args.repeats):
        for model, embedder in models.items():
            start = time.perf_counter()
            vectors[model] = embed_all(embedder, texts, args.chunk)
            seconds[model].append(time.perf_counter() - start)
    scorer = HeuristicQuality()
    masks, report, data = {}, None, None
    for i, (model, embedder) in enumerate(models.items()):
        prepared = work / f"{name}-prepared-{i}"
        prepare([str(shards)], prepared, embedder, scorer, chunk=args.chunk, progress=False)
        seeds = args.seeds if model == TRANSFORMER else args.seeds[:1]
        for seed in seeds:
            out = work / f"{name}-select-{i}-{seed}"
            method = "datamask" if seed == args.seeds[0] else f"datamask:seed={seed}"
            run_select([str(prepared)], out, method, args.select_ratio)
            if data is None:  # the transformer's rows, the first model's: every score's ground
                data = read_dataset(parquet_files([str(prepared)]))
                report = Report(data, args.select_ratio, LAMB)
            masks[model, seed] = report(selection_mask(out, data.ids))
    base = masks[TRANSFORMER, args.seeds[0]]
    # a random selection's mean joint: the floor of the share above random, which stays read as
    # a share where a joint's values can be near zero or negative
    first = selection_mask(work / f"{name}-select-0-{args.seeds[0]}", data.ids)
    floor = report.certificates(first)[f"joint_{METRIC}_random"]
    rows = []
    for model in models:
        for seed in (args.seeds if model == TRANSFORMER else args.seeds[:1]):
            if model == TRANSFORMER and seed == args.seeds[0]:
                agreement = {"overlap": 1.0, "cosine_share": 1.0}
            elif model == TRANSFORMER:
                agreement = {"overlap": float("nan"), "cosine_share": float("nan")}
            else:
                agreement = neighbour_agreement(vectors[TRANSFORMER], vectors[model], NEIGHBOURS)
            scores = masks[model, seed]
            rows.append({
                "corpus": name, "model": model, "seed": seed, "documents": len(texts),
                "docs_per_s": len(texts) / statistics.median(seconds[model]),
                "speedup": statistics.median(seconds[TRANSFORMER])
                / statistics.median(seconds[model]),
                **agreement,
                **{f"share_{m}": scores[f"joint_{m}"] / base[f"joint_{m}"]
                   for m in ("Pair_simi", "Facility", "DiSF")},
                "above_random_Pair_simi": (scores[f"joint_{METRIC}"] - floor)
                / (base[f"joint_{METRIC}"] - floor),
            })
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| corpus | model | select seed | documents | docs/s | x transformer | 10-NN overlap "
             "| neighbour cosine share | Pair_simi share | Facility share | DiSF share "
             "| Pair_simi share above random |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['corpus']} | {r['model']} | {r['seed']} | {r['documents']:,} | "
                     f"{r['docs_per_s']:,.1f} | {r['speedup']:,.1f} | {r['overlap']:.3f} | "
                     f"{r['cosine_share']:.3f} | {r['share_Pair_simi']:.4f} | "
                     f"{r['share_Facility']:.4f} | {r['share_DiSF']:.4f} | "
                     f"{r['above_random_Pair_simi']:.4f} |")
    return "\n".join(lines).replace("nan", "-")


def verdict(rows: list[dict]) -> str:
    """The plan's rule: on every corpus, static >= 100x and its Pair_simi share >= 0.98."""
    static = [r for r in rows if r["model"] == STATIC_ROW]
    failed = [f"{r['corpus']}: {what}" for r in static for what, bad in (
        (f"speed {r['speedup']:.1f}x < 100x", r["speedup"] < 100),
        (f"{METRIC} share {r['share_Pair_simi']:.4f} < 0.98", r["share_Pair_simi"] < 0.98))
        if bad]
    return "PASS" if not failed else "FAIL (" + "; ".join(failed) + ")"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["pool", "BBC"], choices=["pool", "BBC"])
    parser.add_argument("--pool", type=Path, help="a built demo pool (default: build one)")
    parser.add_argument("--bbc_limit", type=int, default=1000,
                        help="BBC articles drawn (default: %(default)s)")
    parser.add_argument("--work", type=Path, help="empty scratch folder (default: temporary)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; medians shown")
    parser.add_argument("--chunk", type=int, default=256, help="prepare's rows per embedding call")
    parser.add_argument("--select_ratio", type=float, default=0.25, help="select's default")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1],
                        help="the learner's seeds for the transformer's selections (the first, "
                             "its default, is the static model's; the others show a seed's noise)")
    parser.add_argument("--extras", action="store_true",
                        help="also the transformer at 64 tokens and a 384-dimension static model")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        if any(work.iterdir()):
            raise UserError(f"--work {work}: not empty; give an empty or new folder")
        models = {TRANSFORMER: Embedder(), STATIC_ROW: StaticEmbedder(STATIC).load()}
        if args.extras:
            models["transformer, 64 tokens"] = Embedder(max_seq_length=64)
            models["static, 384 dims"] = StaticEmbedder(STATIC, settings=Distillation(
                pca_dims=384)).load()
        rows = []
        for name, shards in corpora(work, args.corpora, args.pool, args.bbc_limit).items():
            rows += measure(name, shards, models, work, args)
            print(table(rows), flush=True)
        print(f"\nVerdict (plan.md): {verdict(rows)}")


if __name__ == "__main__":
    main()

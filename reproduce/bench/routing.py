"""What dedup's guests cost and find as the regions multiply: on a bench-dedup work folder's
prepared rows (its planted copies among them), for each region count and guest margin, the rows
routed per row (the pair work against comparing inside regions only) and the planted pairs of one
kind (`--kind`: embedding copies differ from their originals in a random direction, words copies
in one their text sets) at or above the threshold that meet in a region. The cuts are fitted as
dedup fits them (a seeded sample of the rows at unit length), on every row: MinHash's removals
are not taken out, so the counts are of the embedding step alone.

`--cells kmeans` measures another way to cut the same rows, beside dedup's bisection tree: k-means
cells (faiss, fitted on the same sample), each row at home in its nearest centroid's cell and a
guest of every cell of a lower index whose bisector with its own lies within the margin. A pair
at most the margin apart straddles a bisector that both rows lie within the margin of, so it
meets exactly once, in the cell of the lower index, with no guest routed on: one flat round
where the tree routes guests down its cuts. The pair work of either (each region's own rows
times its rows, over n^2) is what a pair task's search scales with.

    python -m reproduce.bench.routing --work runs/bench-dedup-200k --regions 21 100 \\
        --margins 1 0.5 0.25 --results reproduce/results/bench/dedup/routing-200k
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

COMMAND = "bench-dedup-routing"
CELLS = ("tree", "kmeans")
KMEANS_ITERATIONS = 20
CHUNK = 65_536  # rows whose distances to every centroid are held at once


def build_parser() -> argparse.ArgumentParser:
    from reproduce.cli import StageParser
    from reproduce.pipeline.common import POSITIVE

    parser = StageParser(prog="python -m reproduce.bench.routing",
                         description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a bench-dedup work folder whose prepare and copies are done")
    parser.add_argument("--regions", type=POSITIVE, nargs="+", default=[21, 50, 100],
                        help="region counts to cut the rows into (default: %(default)s)")
    parser.add_argument("--margins", type=float, nargs="+", default=[1.0, 0.5, 0.25],
                        help="dedup's --guest_margin values (default: %(default)s)")
    parser.add_argument("--threshold", type=float, default=0.99,
                        help="dedup's --threshold (default: %(default)s)")
    parser.add_argument("--kind", choices=["embedding", "words", "exact"], default="embedding",
                        help="the planted pairs counted, those at or above --threshold "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the cuts' sample's seed")
    parser.add_argument("--cells", nargs="+", choices=CELLS, default=["tree"],
                        help="how the rows are cut into regions: dedup's bisection tree, "
                             "k-means cells with guests across their bisectors (default: "
                             "%(default)s)")
    parser.add_argument("--pair_regions", type=int, default=0,
                        help="at the first region count and margin, time a pair task's search "
                             "in this many of the largest regions, with the bound dedup filters "
                             "pairs by and comparing every pair in full, one after the other "
                             "(default: %(default)s, none)")
    parser.add_argument("--results", type=Path, help="also write results.json and results.md here")
    parser.set_defaults(func=run)
    return parser


def check_flags(args: argparse.Namespace) -> None:
    from datamask.errors import UserError

    for name in ("planted", "copies/plants.json"):
        if not (args.work / name).exists():
            raise UserError(f"--work {args.work}: no {name}; run make bench-dedup with this "
                            f"--work first")
    bad = [m for m in args.margins if not 0 < m <= 1]
    if bad:
        raise UserError(f"--margins {bad[0]}: a margin is a fraction above 0 and at most 1")
    if not 0 < args.threshold <= 1:
        raise UserError(f"--threshold must be above 0 and at most 1, got {args.threshold}")


def planted_rows(work: Path, kind: str, threshold: float):
    """(unit features, the `kind` copies' pairs at cosine `threshold` or above as row indices, how
    many pairs of that kind were planted) of the folder's planted rows."""
    import numpy as np
    import pyarrow.parquet as pq

    from datamask.data import read_dataset
    from reproduce.pipeline.common import parquet_files

    files = parquet_files([str(work / "planted")])
    features = read_dataset(files).features.astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    ids = [i for f in files for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]
    at = {str(i): n for n, i in enumerate(ids)}
    plants = json.loads((work / "copies" / "plants.json").read_text())
    pairs = np.array([(at[p["original"]], at[p["copy"]]) for p in plants["pairs"]
                      if p["kind"] == kind], np.int64).reshape(-1, 2)
    cosine = np.einsum("ij,ij->i", features[pairs[:, 0]], features[pairs[:, 1]])
    return features, pairs[cosine >= threshold], len(pairs)


def kmeans_cells(features, sample, regions: int, margin: float, seed: int):
    """k-means cells fitted on `sample` (faiss), as NeighbourhoodTree.spill's (row index, cell,
    home?) per copy, home copies first: each row at home in its nearest centroid's cell and a
    guest of every lower cell whose bisector with its own is at most `margin` from it."""
    import faiss
    import numpy as np

    kmeans = faiss.Kmeans(features.shape[1], regions, niter=KMEANS_ITERATIONS, seed=seed)
    kmeans.train(np.ascontiguousarray(features[sample]))
    centroids = kmeans.centroids.astype(np.float64)
    apart = np.linalg.norm(centroids[:, None] - centroids[None], axis=2)
    lower = np.tril(np.ones((regions, regions), bool), -1)  # [home, cell]: cell below home
    homes, guests = [], []
    for start in range(0, len(features), CHUNK):
        part = features[start:start + CHUNK].astype(np.float64)
        squared = ((part ** 2).sum(1)[:, None] - 2 * part @ centroids.T
                   + (centroids ** 2).sum(1)[None])
        home = squared.argmin(1)
        beyond = (squared - squared[np.arange(len(part)), home][:, None]) / (2 * apart[home]
                                                                            + 1e-300)
        row, cell = np.nonzero((beyond <= margin) & lower[home])
        homes.append(home)
        guests.append((row + start, cell))
    home = np.concatenate(homes)
    rows = np.concatenate([np.arange(len(features))] + [r for r, _ in guests])
    cells = np.concatenate([home] + [c for _, c in guests])
    own = np.zeros(len(rows), bool)
    own[:len(features)] = True
    return rows, cells, own


def pair_work(blocks, own, rows: int) -> float:
    """Each region's own rows times its rows, over rows^2: what the pair tasks' search scales
    with."""
    import numpy as np

    size = np.bincount(blocks)
    return float(np.bincount(blocks[own], minlength=len(size)) @ size) / rows ** 2


def measure(features, pairs, regions: int, margins: list[float], threshold: float,
            seed: int, pair_regions: int = 0, cells: str = "tree") -> dict:
    """One region count: the pairs a cut separates, per margin the rows routed per row, the
    pair work and the pairs that share no region, and at the first margin the pair search's
    times in the `pair_regions` largest regions."""
    import numpy as np

    from datamask.data import NeighbourhoodTree
    from reproduce.pipeline.dedup import guest_margin, region_sample

    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(len(features), region_sample(len(features), regions), False))
    started = time.time()
    if cells == "tree":
        tree = NeighbourhoodTree.fit(features[sample], regions)
        home = tree.route(features)
        spill = tree.spill
    else:
        def spill(features, margin):
            return kmeans_cells(features, sample, regions, margin, seed)
        home = spill(features, -1.0)[1]
    row = {"cells": cells, "regions": regions, "pairs": len(pairs),
           "fit_route_s": round(time.time() - started, 1),
           "largest_region": int(np.bincount(home).max()),
           "split": int((home[pairs[:, 0]] != home[pairs[:, 1]]).sum()), "margins": []}
    for margin in margins:
        started = time.time()
        rows, blocks, own = spill(features, guest_margin(threshold, margin))
        present = rows * regions + blocks  # a row's copy in a block, as one number
        first, second = pairs[:, 0], pairs[:, 1]
        met = (np.isin(first * regions + home[second], present)
               | np.isin(second * regions + home[first], present))
        row["margins"].append({"margin": margin, "routed_per_row": round(len(rows) / len(home), 2),
                               "pair_work": round(pair_work(blocks, own, len(home)), 4),
                               "pairs_apart": int(len(pairs) - met.sum()),
                               "route_s": round(time.time() - started, 1)})
        if pair_regions and margin == margins[0]:
            row["pair_search"] = pair_times(features, rows, blocks, own, threshold,
                                            pair_regions)
    return row


def pair_times(features, rows, blocks, own, threshold: float, count: int) -> list[dict]:
    """In each of the `count` largest regions, dedup's pair search (similar_pairs) timed with
    its bound and comparing every pair in full (a bound of all the dimensions), one after the
    other, and whether both found the same pairs."""
    import numpy as np

    from reproduce.pipeline.dedup import BOUND_DIMS, similar_pairs

    found = []
    for region in np.argsort(-np.bincount(blocks), kind="stable")[:count]:
        mine = blocks == region
        among = np.ascontiguousarray(features[rows[mine]])
        home = np.flatnonzero(own[mine])
        times, pairs = {}, {}
        for name, dims in (("bound", BOUND_DIMS), ("full", among.shape[1])):
            started = time.perf_counter()
            first, second, _ = similar_pairs(among, home, threshold, bound_dims=dims)
            times[name] = time.perf_counter() - started
            pairs[name] = set(zip(first.tolist(), second.tolist()))
        found.append({"region": int(region), "own_rows": len(home), "rows": len(among),
                      "bound_s": round(times["bound"], 2), "full_s": round(times["full"], 2),
                      "full_over_bound": round(times["full"] / times["bound"], 2),
                      "pairs": len(pairs["bound"]), "same_pairs": pairs["bound"] == pairs["full"]})
        print(f"{COMMAND}: pair search {json.dumps(found[-1])}", flush=True)
    return found


def markdown(out: dict) -> str:
    lines = [f"# `{COMMAND}`: dedup's guests on {out['rows']:,} rows", "",
             f"{out['date']}; {out['machine']['cpu']}; --threshold {out['threshold']}, --seed "
             f"{out['seed']}, {out['rows']:,} rows of {out['work']}, "
             f"{out['rows_by_region'][0]['pairs']:,} of its {out['planted']:,} planted "
             f"{out['kind']} pairs at cosine {out['threshold']} or above.", "",
             "| cells | regions | largest region | pairs a cut separates | guest margin | rows "
             "routed per row | pair work / n^2 | pairs in no common region |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["rows_by_region"]:
        for m in r["margins"]:
            lines.append(f"| {r.get('cells', 'tree')} | {r['regions']} | "
                         f"{r.get('largest_region', 0):,} | {r['split']:,} | {m['margin']:g} | "
                         f"{m['routed_per_row']:,.2f} | {m.get('pair_work', float('nan')):.4f} "
                         f"| {m['pairs_apart']:,} |")
    searched = [r for r in out["rows_by_region"] if r.get("pair_search")]
    for r in searched:
        lines += ["", f"A pair task's search at {r['regions']} regions, guest margin "
                      f"{r['margins'][0]['margin']:g}, with the bound and comparing every pair in "
                      f"full, one after the other in one process:", "",
                  "| region | own rows | rows | bound s | full s | full / bound | pairs | same "
                  "pairs |", "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for p in r["pair_search"]:
            lines.append(f"| {p['region']} | {p['own_rows']:,} | {p['rows']:,} | "
                         f"{p['bound_s']:,.2f} | {p['full_s']:,.2f} | {p['full_over_bound']:.2f} "
                         f"| {p['pairs']:,} | {'yes' if p['same_pairs'] else 'no'} |")
    return "\n".join(lines + [""])


def run(args: argparse.Namespace) -> None:
    from datamask.data import write_json_atomic, write_text_atomic
    from datamask.shared import machine

    check_flags(args)
    features, pairs, planted = planted_rows(args.work, args.kind, args.threshold)
    if max(args.regions) > len(features):
        from datamask.errors import UserError
        raise UserError(f"--regions {max(args.regions)}: more regions than the "
                        f"{len(features)} rows of {args.work / 'planted'}")
    found = []
    for cells in args.cells:
        for regions in args.regions:
            found.append(measure(features, pairs, regions, args.margins, args.threshold,
                                 args.seed, args.pair_regions if regions == args.regions[0]
                                 else 0, cells))
            print(f"{COMMAND}: {json.dumps(found[-1])}", flush=True)
    out = {"work": str(args.work), "rows": len(features), "threshold": args.threshold,
           "kind": args.kind, "planted": planted, "seed": args.seed, "machine": machine(),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "rows_by_region": found}
    text = markdown(out)
    if args.results:
        args.results.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, args.results / "results.json")
        write_text_atomic(text, args.results / "results.md")
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.routing")


if __name__ == "__main__":
    sys.exit(main())

"""What dedup's guests cost and find as the regions multiply: on a bench-dedup work folder's
prepared rows (its planted copies among them), for each region count and guest margin, the rows
routed per row (the pair work against comparing inside regions only) and the planted pairs of one
kind (`--kind`: embedding copies differ from their originals in a random direction, words copies
in one their text sets) at or above the threshold that meet in a region. The cuts are fitted as
dedup fits them (a seeded sample of the rows at unit length), on every row: MinHash's removals
are not taken out, so the counts are of the embedding step alone.

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


def measure(features, pairs, regions: int, margins: list[float], threshold: float,
            seed: int, pair_regions: int = 0) -> dict:
    """One region count: the pairs a cut separates, per margin the rows routed per row and
    the pairs that share no region, and at the first margin the pair search's times in the
    `pair_regions` largest regions."""
    import numpy as np

    from datamask.data import NeighbourhoodTree
    from reproduce.pipeline.dedup import guest_margin, region_sample

    rng = np.random.default_rng(seed)
    size = region_sample(len(features), regions)
    tree = NeighbourhoodTree.fit(features[np.sort(rng.choice(len(features), size, False))],
                                 regions)
    home = tree.route(features)
    row = {"regions": regions, "pairs": len(pairs),
           "split": int((home[pairs[:, 0]] != home[pairs[:, 1]]).sum()), "margins": []}
    for margin in margins:
        started = time.time()
        rows, blocks, own = tree.spill(features, guest_margin(threshold, margin))
        present = rows * regions + blocks  # a row's copy in a block, as one number
        first, second = pairs[:, 0], pairs[:, 1]
        met = (np.isin(first * regions + home[second], present)
               | np.isin(second * regions + home[first], present))
        row["margins"].append({"margin": margin, "routed_per_row": round(len(rows) / len(home), 2),
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
             "| regions | pairs a cut separates | guest margin | rows routed per row | pairs in "
             "no common region |", "|---:|---:|---:|---:|---:|"]
    for r in out["rows_by_region"]:
        for m in r["margins"]:
            lines.append(f"| {r['regions']} | {r['split']:,} | {m['margin']:g} | "
                         f"{m['routed_per_row']:,.2f} | {m['pairs_apart']:,} |")
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
    for regions in args.regions:
        found.append(measure(features, pairs, regions, args.margins, args.threshold, args.seed,
                             args.pair_regions if regions == args.regions[0] else 0))
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

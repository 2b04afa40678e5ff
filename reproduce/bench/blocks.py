"""`make bench-blocks`: what selecting in independent blocks loses against one block.

At corpus scale select cuts the prepared rows into blocks (a seeded permutation, `--block_size`)
and each block is selected alone, so diversity across blocks is never optimised, and a page
repeated in two blocks can be kept twice. This benchmark measures both on real and synthetic rows
with near-copies planted in them. For each input family, each selector spec and each block count B
of --blocks it runs the real select stage (`reproduce.pipeline.select.run_select`, local executor,
block_size = ceil(N / B)), then scores the merged selection on all N rows with the project's
`datamask.report.Report`: the joint objective at --lamb of the selector's own diversity metric
(its `algorithm` option; --metric for a selector that names none), as a share of the same
selector's one-block run, and the planted pairs (an original and its copy) with both rows selected,
beside what a random selection of the same size keeps. Families:
  pool       the prepared rows of a built pool (`make pool`), prepared here (--embedding_model)
  bbc        the prepared rows of the BBC corpus (`reproduce data`'s shards), prepared here
  synthetic  --synthetic_rows rows on the unit sphere in SYNTHETIC_DIM dimensions and
             SYNTHETIC_CLUSTERS clusters of heavy-tailed sizes (datamask.examples.synthetic)
Each family gets --planted of its row count as new rows: a copy of an original drawn at random,
its embedding plus Gaussian noise (--noise per dimension) scaled back to unit length, its quality
copied, a new id. --merge_ratio adds an arm per ratio and --merge_partitions entry, select's
merge round across blocks, at the block counts of --merge_blocks; --partitions neighbourhood adds
every arm again on select's neighbourhood blocks (--partition) instead of random ones;
--dedup_thresholds adds an arm per threshold: `pipeline dedup`'s embedding step on the family's
rows first, then select (random blocks) on the rows its keep-list keeps.
Everything lands in --work; a rerun reuses each finished run's record (records/) and each
prepared family. results.json and results.md go to --work (and --results).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from contextlib import contextmanager, redirect_stderr
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from datamask.data import (
    ID_COLUMN,
    Dataset,
    budget,
    check_ratio,
    check_unique_ids,
    read_column,
    read_dataset,
    write_dataset,
    write_json_atomic,
    write_text_atomic,
)
from datamask.errors import UserError
from datamask.examples.synthetic import synthetic_dataset
from datamask.objectives import DIVERSITY, FacilityLocation
from datamask.paths import check_folder_output, check_paths, leave_as_found
from datamask.report import Report

from reproduce.pipeline.common import (POSITIVE, SEED, atomic_folder, file_stats,
                                       non_negative_number, parquet_files, parse_method,
                                       positive_number)

COMMAND = "bench-blocks"
FAMILIES = ("pool", "bbc", "synthetic")
SYNTHETIC_DIM = 64
SYNTHETIC_CLUSTERS = 200
COPY_SUFFIX = "#planted-copy"  # a copy's string id: its original's id and this
DEFAULT_SELECTORS = ["datamask", "datamask:algorithm=Facility"]
# The learner's Facility on more rows than this starts from equal logits, which the stopping rule
# does not score, so it runs at least five checks of 50 steps, each step the coverage of G = 128
# masks on a 10% subset: 2 G k n d = 4.5e11 flop at 105,000 rows of 64-d and ratio 0.25 (k 2,625
# of n 10,500), over 1e14 flop for one block (docs/benchmarks.md, make bench-blocks).
DEFAULT_MAX_ROWS = [("Facility", 20_000)]


# ---------------------------------------------------------------- the families' rows


def unit_rows(features: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (an all-zero row stays zero)."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return (features / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def synthetic_rows(n_rows: int, seed: int) -> tuple[Dataset, np.ndarray]:
    """The synthetic family before planting: `datamask.examples.synthetic`'s clustered rows (cluster
    weights Pareto(1.2) + 0.05; a cluster's mean quality rises with its size: 1 + 2.5 x its size
    rank + N(0, 0.3^2), each row's that + N(0, 0.4^2), clipped to [0, 5]) in SYNTHETIC_DIM
    dimensions and SYNTHETIC_CLUSTERS clusters, every row scaled to unit length; string ids."""
    data = synthetic_dataset(n_rows, SYNTHETIC_DIM, SYNTHETIC_CLUSTERS, seed=seed)
    strings = np.array([f"synthetic-{seed}-{i}" for i in range(n_rows)], dtype=object)
    return Dataset(data.ids, data.quality, unit_rows(data.features)), strings


def plant_copies(data: Dataset, strings: np.ndarray, rate: float, noise: float,
                 seed: int) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """round(rate x N) (at least 1) near-copies of originals drawn without replacement: the
    original's vector + N(0, noise^2) per dimension, scaled to unit length, its quality, the string
    id `<original>#planted-copy` and prepare's chunk id of that string. (copies, their string
    ids, originals' row positions)."""
    from reproduce.pipeline.prepare import chunk_id

    rng = np.random.default_rng([seed, 7919])
    count = min(len(data), max(1, round(rate * len(data))))
    originals = np.sort(rng.choice(len(data), size=count, replace=False))
    jitter = rng.standard_normal((count, data.dim)).astype(np.float32) * np.float32(noise)
    copy_strings = np.array([f"{s}{COPY_SUFFIX}" for s in strings[originals]], dtype=object)
    ids = np.array([chunk_id(s) for s in copy_strings], dtype=np.int64)
    copies = Dataset(ids, data.quality[originals].copy(),
                     unit_rows(data.features[originals] + jitter))
    return copies, copy_strings, originals


class Family:
    """One family's select inputs (its prepared shards, then the shard of planted copies) and its
    planted pairs as row positions in the rows select reads (files in order, rows in order)."""

    def __init__(self, name: str, files: list[Path], pairs: np.ndarray, config: dict):
        self.name, self.files, self.pairs, self.config = name, files, pairs, config
        self.rows = sum(pq.read_metadata(f).num_rows for f in files)

    def dataset(self) -> Dataset:
        return read_dataset(self.files)


def write_family(name: str, base_files: list[Path], folder: Path, rate: float, noise: float,
                 seed: int, extra: dict) -> Family:
    """folder/planted.parquet beside `base_files` (kept as they are), and folder/family.json; both
    reused while the base files and settings are unchanged."""
    config = {"family": name, "inputs": file_stats(base_files), "planted": rate, "noise": noise,
              "seed": seed, **extra}
    record, planted = folder / "family.json", folder / "planted.parquet"
    if record.exists() and planted.exists():
        earlier = json.loads(record.read_text())
        if earlier["config"] == config:
            return Family(name, base_files + [planted], np.array(earlier["pairs"], np.int64),
                          {**config, "copies": len(earlier["pairs"])})
    data = read_dataset(base_files)
    strings = read_column(base_files, "id", "--families")
    copies, copy_strings, originals = plant_copies(data, strings, rate, noise, seed)
    check_unique_ids(np.concatenate([data.ids, copies.ids]), [len(data), len(copies)],
                     [str(base_files[0].parent), str(planted)], ID_COLUMN)
    folder.mkdir(parents=True, exist_ok=True)
    write_dataset(planted, copies,
                  extra={"id": pa.array(copy_strings.tolist(), pa.string())})
    pairs = np.stack([originals, len(data) + np.arange(len(copies))], axis=1)
    write_json_atomic({"config": config, "pairs": pairs.tolist()}, record)
    return Family(name, base_files + [planted], pairs, {**config, "copies": len(pairs)})


def synthetic_family(work: Path, rows: int, rate: float, noise: float, seed: int) -> Family:
    folder = work / "inputs" / "synthetic"
    base = folder / "rows.parquet"
    made = {"rows": rows, "dim": SYNTHETIC_DIM, "clusters": SYNTHETIC_CLUSTERS, "seed": seed}
    stamp = folder / "rows.json"
    if not (base.exists() and stamp.exists() and json.loads(stamp.read_text()) == made):
        data, strings = synthetic_rows(rows, seed)
        folder.mkdir(parents=True, exist_ok=True)
        write_dataset(base, data,
                      extra={"id": pa.array(strings.tolist(), pa.string())})
        write_json_atomic(made, stamp)
    return write_family("synthetic", [base], folder, rate, noise, seed, {"made": made})


def text_shards(name: str, work: Path, pool: Path | None) -> Path:
    """The family's FineWeb shards: the pool's, or the BBC corpus's written once into --work."""
    if name == "pool":
        return pool / "fineweb"
    shards = work / "bbc"
    if not shards.exists():
        from reproduce.pipeline.bbc import write_bbc_fineweb

        with atomic_folder(shards) as tmp:
            write_bbc_fineweb(tmp / "fineweb", tmp / "tasks")
    return shards / "fineweb"


def text_family(name: str, work: Path, shards: Path, embedder, rate: float, noise: float,
                seed: int) -> Family:
    """The family's shards through the real prepare stage (heuristic quality) into
    work/prepared/<name> (prepare itself returns at once when they are up to date), then
    the planted copies."""
    from reproduce.pipeline.prepare import HeuristicQuality, PrepareConfig, prepare

    out = work / "prepared" / name
    print(f"{COMMAND}: {name}: prepare {shards} -> {out} ({embedder.model_name})", flush=True)
    started = time.perf_counter()
    with stage_log(work / "logs" / f"{name}-prepare.log"):
        counts = prepare(PrepareConfig(input=[shards], output=out, no_progress=True),
                         embedder=embedder, scorer=HeuristicQuality())
    print(f"{COMMAND}: {name}: {counts['rows']:,} rows prepared ({counts['embedded']:,} embedded "
          f"now) in {time.perf_counter() - started:.0f} s", flush=True)
    return write_family(name, parquet_files([str(out)]), work / "inputs" / name, rate, noise,
                        seed, {"embedder": embedder.identity})


# ---------------------------------------------------------------- runs and their scores


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


class Arm:
    """A selector spec, select's --partition of the first round's blocks (`cut`), the merge
    round's ratio and partition passed to run_select (None: the plain stage), and the cosine
    threshold of a dedup pass before select (None: none)."""

    def __init__(self, spec: str, metric: str, merge: float | None = None,
                 partition: str | None = None, cut: str = "random",
                 dedup: float | None = None):
        self.spec, self.metric, self.merge, self.partition = spec, metric, merge, partition
        self.cut, self.dedup = cut, dedup

    @property
    def label(self) -> str:
        blocks = "" if self.cut == "random" else f", {self.cut} blocks"
        dedup = "" if self.dedup is None else f", dedup {self.dedup:g}"
        if self.merge is None:
            return self.spec + blocks + dedup
        return f"{self.spec}{blocks}, merge {self.merge:g} {self.partition}"


def selector_metric(spec: str, fallback: str) -> str:
    """The diversity metric a spec optimises: its selector's `algorithm` option (given or
    default), else `fallback` (--metric) for selectors that name none."""
    from datamask.selectors import make_selector

    name, params = parse_method(spec)
    return make_selector(name, **params).params.get("algorithm", fallback)


def read_selection(folder: Path, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """selection.parquet's `selected` and `block`, checked to hold the family's rows in order."""
    table = pq.read_table(folder / "selection.parquet", columns=[ID_COLUMN, "selected", "block"])
    if not np.array_equal(table.column(ID_COLUMN).to_numpy(), ids):
        raise UserError(f"{folder}/selection.parquet: its rows are not the family's, in order")
    return (table.column("selected").to_numpy(zero_copy_only=False).astype(bool),
            table.column("block").to_numpy())


def pair_counts(pairs: np.ndarray, selected: np.ndarray, block: np.ndarray) -> dict:
    """Planted pairs split over two blocks (both rows in a block), pairs with both rows selected
    (and of those the split ones), and what a uniformly random selection of the same size keeps
    on average: P x c (c - 1) / (N (N - 1))."""
    n, chosen = len(selected), int(selected.sum())
    placed = (block[pairs[:, 0]] >= 0) & (block[pairs[:, 1]] >= 0)  # -1: removed by a keep-list
    split = placed & (block[pairs[:, 0]] != block[pairs[:, 1]])
    both = selected[pairs[:, 0]] & selected[pairs[:, 1]]
    return {"pairs": len(pairs), "pairs_split": int(split.sum()), "both_selected": int(both.sum()),
            "both_selected_split": int((both & split).sum()),
            "both_selected_random": len(pairs) * chosen * (chosen - 1) / (n * (n - 1))}


def make_report(data: Dataset, select_ratio: float, lamb: float, metrics: list[str],
                cover_rows: int, seed: int) -> Report:
    """The project's Report on all rows; past `cover_rows` rows Facility covers a seeded uniform
    sample of that many rows (an unbiased estimate; the exact one holds k x N similarities per
    mask)."""
    report = Report(data, select_ratio, lamb, seed=seed, metrics=tuple(metrics))
    if "Facility" in report.metrics and len(data) > cover_rows:
        generator = torch.Generator().manual_seed(seed)
        cover = torch.randperm(len(data), generator=generator)[:cover_rows].sort().values
        report.metrics["Facility"] = FacilityLocation(cover=cover)
    return report


def score(report: Report, metric: str, selected: np.ndarray) -> dict:
    """The selection's joint objective on the report's scale (fitted once at the one-block budget
    k, so every B is read on one scale; a B-block selection holds k too), with its raw quality
    and diversity terms."""
    joint = report.joint(metric)
    idx = torch.as_tensor(np.flatnonzero(selected)).unsqueeze(0)
    quality, diversity = joint.terms(report.ground, idx)
    return {"joint": joint.combine(quality, diversity).item(), "quality": quality.item(),
            "diversity": diversity.item()}


@contextmanager
def stage_log(path: Path):
    """A stage's log lines (datatrove's, on stderr) into `path` instead of the terminal, where the
    benchmark's progress lines stay readable; datatrove's default sink back on stderr after."""
    from datatrove.utils.logging import setup_default_logger

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "a") as out, redirect_stderr(out):
            yield
    finally:
        setup_default_logger()


def deduplicated(family: Family, threshold: float, work: Path, seed: int) -> tuple[Path, dict]:
    """`pipeline dedup`'s embedding step over the family's rows at `threshold` (its other settings
    dedup's defaults), its log beside the runs'; (the keep-list's folder, its manifest). dedup
    reads one --prepared folder, so the family's files are hard-linked into one, in their order; a
    rerun with the same rows returns the finished keep-list at once."""
    from reproduce.pipeline.dedup import DedupConfig, run_dedup

    rows = work / "inputs" / family.name / "dedup-input"
    shutil.rmtree(rows, ignore_errors=True)
    with atomic_folder(rows) as tmp:
        for i, path in enumerate(family.files):
            os.link(path, tmp / f"{i:03d}_{path.name}")
    out = work / "dedup" / family.name / f"threshold-{threshold:g}"
    with stage_log(work / "logs" / family.name / f"dedup-{threshold:g}.log"):
        manifest = run_dedup(DedupConfig(prepared=rows, output=out, threshold=threshold,
                                         seed=seed))
    return out, manifest


def run_one(family: Family, arm: Arm, blocks: int, args, folder: Path, log: Path,
            ids: np.ndarray, report_of) -> dict:
    """One select stage run (its log in `log`) and its scores."""
    from reproduce.pipeline.select import SelectConfig, run_select

    block_size = math.ceil(family.rows / blocks)
    keywords = ({} if arm.merge is None
                else {"merge_ratio": arm.merge, "merge_partition": arm.partition})
    if arm.cut != "random":
        keywords["partition"] = arm.cut
    dedup_stats = {}
    if arm.dedup is not None:
        keywords["keep"], manifest = deduplicated(family, arm.dedup, args.work, args.seed)
        dedup_stats = {"dedup_removed": manifest["removed"]["embedding"],
                       "dedup_wall_s": manifest["stage_wall_s"]}
    with stage_log(log):
        started = time.perf_counter()
        summary = run_select(SelectConfig(input=[str(f) for f in family.files], output=folder,
                                          method=arm.spec, select_ratio=args.select_ratio,
                                          block_size=block_size if blocks > 1 else 0,
                                          seed=args.seed, **keywords))
        wall = time.perf_counter() - started
    selected, block = read_selection(folder, ids)
    return {"family": family.name, "selector": arm.spec, "arm": arm.label, "metric": arm.metric,
            "merge_ratio": arm.merge, "merge_partition": arm.partition, "partition": arm.cut,
            "dedup": arm.dedup, **dedup_stats, "B": blocks, "blocks": int(summary["blocks"]),
            "block_rows": block_size if blocks > 1 else family.rows, "rows": family.rows,
            "selected": int(selected.sum()), "select_wall_s": round(wall, 2),
            "selector_time_s": summary["selector_time_s"],
            "slowest_block_s": summary["slowest_block_s"],
            **score(report_of(arm.metric), arm.metric, selected),
            **pair_counts(family.pairs, selected, block)}


def run_config(family: Family, arm: Arm, blocks: int, args) -> dict:
    """What a run's record must match to be reused (random blocks' records name no partition, as
    those written before the partition arms)."""
    return {"family": family.config, "selector": arm.spec, "merge_ratio": arm.merge,
            "merge_partition": arm.partition, "B": blocks,
            "select_ratio": args.select_ratio, "lamb": args.lamb, "seed": args.seed,
            "metric": arm.metric,
            "cover_rows": args.cover_rows if arm.metric == "Facility" else None,
            **({"partition": arm.cut} if arm.cut != "random" else {}),
            **({"dedup": arm.dedup} if arm.dedup is not None else {})}


# ---------------------------------------------------------------- flags


def metric_rows(text: str) -> tuple[str, int]:
    """An argparse type: METRIC=ROWS."""
    metric, eq, rows = text.partition("=")
    if not eq or metric not in DIVERSITY:
        raise argparse.ArgumentTypeError(f"must be METRIC=ROWS with METRIC one of "
                                         f"{', '.join(DIVERSITY)}, got {text!r}")
    try:
        return metric, POSITIVE(rows)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: ROWS {err}") from None


def fraction(text: str) -> float:
    """An argparse type: a number in (0, 1]."""
    value = positive_number(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from reproduce.cli import StageParser

    parser = StageParser(prog="python -m reproduce.bench.blocks",
                         description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/bench-blocks"),
                        help="folder for the prepared families, every run and the results; a rerun "
                             "reuses what is done (default: %(default)s)")
    parser.add_argument("--results", type=Path,
                        help="also write results.json and results.md into this folder")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES),
                        help="input families (default: %(default)s)")
    parser.add_argument("--pool", type=Path, default=Path("runs/pool"),
                        help="a built pool (`make pool`), for the pool family (default: "
                             "%(default)s)")
    parser.add_argument("--embedding_model",
                        help="prepare's --embedding_model for the pool and bbc families "
                             "(default: prepare's, all-MiniLM-L6-v2)")
    parser.add_argument("--max_seq_length", type=POSITIVE, default=128,
                        help="prepare's tokens per document, as the downstream run prepares the "
                             "pool (default: %(default)s)")
    parser.add_argument("--selectors", nargs="+", default=DEFAULT_SELECTORS, metavar="SPEC",
                        help="select --method specs (default: %(default)s)")
    parser.add_argument("--blocks", type=POSITIVE, nargs="+", default=[1, 2, 4, 8, 16, 32],
                        help="block counts B, 1 among them: block_size = ceil(N / B) "
                             "(default: %(default)s)")
    parser.add_argument("--select_ratio", type=float, default=0.25,
                        help="select's --select_ratio (default: %(default)s, select's)")
    parser.add_argument("--lamb", type=float, default=0.5,
                        help="the scored joint objective's weight of quality (default: "
                             "%(default)s)")
    parser.add_argument("--metric", choices=list(DIVERSITY), default="Pair_simi",
                        help="the diversity metric scored for selectors whose options name none "
                             "(random, quality-topk, the greedies) (default: %(default)s)")
    parser.add_argument("--max_rows", type=metric_rows, nargs="*", default=DEFAULT_MAX_ROWS,
                        metavar="METRIC=ROWS",
                        help="skip a selector of METRIC on a family of more rows (its one-block "
                             "run is out of reach); the flag alone skips none (default: "
                             "Facility=20000)")
    parser.add_argument("--cover_rows", type=POSITIVE, default=10_000,
                        help="past this many rows Facility is scored on a seeded sample of this "
                             "many covered rows (default: %(default)s)")
    parser.add_argument("--planted", type=fraction, default=0.05,
                        help="near-copies planted, a fraction of each family's rows (default: "
                             "%(default)s)")
    parser.add_argument("--noise", type=non_negative_number, default=0.01,
                        help="a copy's Gaussian noise per dimension before it is scaled back to "
                             "unit length (default: %(default)s)")
    parser.add_argument("--synthetic_rows", type=POSITIVE, default=100_000,
                        help="rows of the synthetic family before planting (default: %(default)s)")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="seed of the synthetic rows, the planting and select's block plan")
    parser.add_argument("--merge_ratio", type=positive_number, nargs="+", default=[],
                        metavar="R", help="an arm per R and --merge_partitions entry: select's "
                                          "merge round (default: none)")
    parser.add_argument("--merge_partitions", nargs="+", default=["neighbourhood"],
                        metavar="P", help="select's --merge_partition for the merge arms "
                                          "(default: %(default)s)")
    parser.add_argument("--partitions", nargs="+", default=["random"], metavar="P",
                        help="an arm per P: select's --partition of the first round's blocks, for "
                             "the plain and the merge arms (default: %(default)s)")
    parser.add_argument("--dedup_thresholds", type=fraction, nargs="+", default=[], metavar="T",
                        help="an arm per T: `pipeline dedup`'s embedding step at cosine "
                             "threshold T on the family's rows, then select on the rows it keeps "
                             "(default: none)")
    parser.add_argument("--dedup_blocks", type=POSITIVE, nargs="+", metavar="B",
                        help="the block counts the dedup arms run at (default: every B of "
                             "--blocks)")
    parser.add_argument("--merge_blocks", type=POSITIVE, nargs="+", metavar="B",
                        help="the block counts (above 1) the merge arms run at (default: every "
                             "B of --blocks above 1)")
    parser.set_defaults(func=run)
    return parser


def check_flags(args: argparse.Namespace) -> list[Arm]:
    """Everything checked before any work; the arms (selector spec, metric, merge ratio)."""
    from reproduce.pipeline.select import PARTITIONS, check_merge_ratio, selector_params

    check_folder_output("--work", args.work)
    if args.results is not None:
        check_folder_output("--results", args.results)
    check_ratio(args.select_ratio)
    if not 0 <= args.lamb <= 1:
        raise UserError(f"--lamb must lie in [0, 1], got {args.lamb}")
    if 1 not in args.blocks:
        raise UserError(f"--blocks {' '.join(map(str, args.blocks))}: give 1 among them, the "
                        f"one-block run every share is of")
    args.blocks = sorted(set(args.blocks))
    if "pool" in args.families:
        from reproduce.bench.corpus import pool_config

        pool_config(args.pool)  # a built pool, or a one-line refusal naming --pool
        check_paths({"--pool": [args.pool]}, folders={"--work": args.work})
    for ratio in args.merge_ratio:
        check_merge_ratio(args.select_ratio, ratio)
    for flag, given in (("--merge_partitions", args.merge_partitions),
                        ("--partitions", args.partitions)):
        for partition in given:
            if partition not in PARTITIONS:
                raise UserError(f"{flag}: each must be one of {', '.join(PARTITIONS)}, got "
                                f"{partition!r}")
    args.partitions = sorted(set(args.partitions), key=lambda p: p != "random")  # random first
    args.merge_blocks = sorted(set(args.merge_blocks or [b for b in args.blocks if b > 1]))
    if not set(args.merge_blocks) <= set(args.blocks) - {1}:
        raise UserError(f"--merge_blocks {' '.join(map(str, args.merge_blocks))}: each must be a "
                        f"B of --blocks above 1")
    args.dedup_blocks = sorted(set(args.dedup_blocks or args.blocks))
    if not set(args.dedup_blocks) <= set(args.blocks):
        raise UserError(f"--dedup_blocks {' '.join(map(str, args.dedup_blocks))}: each must be a "
                        f"B of --blocks")
    arms = []
    for spec in args.selectors:
        name, params = parse_method(spec)
        selector_params(name, params)  # an unknown selector or option: refused now
        metric = selector_metric(spec, args.metric)
        for cut in args.partitions:
            arms.append(Arm(spec, metric, cut=cut))
            arms += [Arm(spec, metric, r, p, cut) for r in args.merge_ratio
                     for p in args.merge_partitions]
        arms += [Arm(spec, metric, dedup=t) for t in sorted(set(args.dedup_thresholds))]
    return arms


def family_rows(name: str, args, work: Path) -> int:
    """The family's rows after planting, known before any embedding or selection."""
    if name == "synthetic":
        n = args.synthetic_rows
    else:
        shards = text_shards(name, work, args.pool)
        n = sum(pq.read_metadata(f).num_rows for f in parquet_files([str(shards)], "--pool"))
    return n + min(n, max(1, round(args.planted * n)))


def check_budgets(rows: dict[str, int], blocks: list[int], select_ratio: float) -> None:
    """Every block of every run selects at least one row (select's own check, made up front)."""
    for name, n in rows.items():
        for b in blocks:
            smallest = n // math.ceil(n / math.ceil(n / b)) if b > 1 else n
            try:
                budget(select_ratio, smallest)
            except UserError:
                raise UserError(f"--select_ratio {select_ratio} of the {smallest}-row blocks of "
                                f"the {name} family at --blocks {b} selects zero rows; raise the "
                                f"ratio or drop that block count") from None


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> None:
    from datamask.shared import machine
    from reproduce.pipeline.common import Progress

    arms = check_flags(args)
    work = args.work
    started = time.time()
    load = {"start": os.getloadavg()}
    embedder = None
    with leave_as_found([work]):  # a refusal here leaves no BBC shards behind
        rows = {name: family_rows(name, args, work) for name in args.families}
        check_budgets(rows, args.blocks, args.select_ratio)
        if {"pool", "bbc"} & set(args.families):
            from reproduce.pipeline.embedders import make_embedder

            embedder = make_embedder(args.embedding_model, max_seq_length=args.max_seq_length)
    limits = dict(args.max_rows or [])

    plan, skipped = [], []
    for name in args.families:
        for arm in arms:
            limit = limits.get(arm.metric)
            if limit is not None and rows[name] > limit:
                if arm.merge is None:
                    skipped.append({"family": name, "selector": arm.spec, "rows": rows[name],
                                    "why": f"--max_rows {arm.metric}={limit}"})
                continue
            # one block is one block whatever the partition: run once, by the first arm
            plan += [(name, arm, b) for b in args.blocks
                     if (arm.merge is None or b in args.merge_blocks)
                     and (arm.dedup is None or b in args.dedup_blocks)
                     and (b > 1 or arm.cut == args.partitions[0] or arm.dedup is not None)]
    print(f"{COMMAND}: {len(plan)} select runs over {', '.join(args.families)} "
          f"({', '.join(f'{n}: {r:,} rows' for n, r in rows.items())}) in {work}"
          + "".join(f"; skipped {s['selector']} on {s['family']} ({s['why']})" for s in skipped),
          flush=True)
    progress = Progress("runs", len(plan), COMMAND)
    records = []
    for name in args.families:
        todo = [(arm, b) for family_name, arm, b in plan if family_name == name]
        if not todo:
            continue
        if name == "synthetic":
            family = synthetic_family(work, args.synthetic_rows, args.planted, args.noise,
                                      args.seed)
        else:
            family = text_family(name, work, text_shards(name, work, args.pool), embedder,
                                 args.planted, args.noise, args.seed)
        reports: dict[str, Report] = {}
        data = None

        def report_of(metric: str) -> Report:
            nonlocal data
            if metric not in reports:
                if data is None:
                    data = family.dataset()
                reports[metric] = make_report(data, args.select_ratio, args.lamb, [metric],
                                              args.cover_rows, args.seed)
            return reports[metric]

        ids = np.concatenate([pq.read_table(f, columns=[ID_COLUMN]).column(ID_COLUMN).to_numpy()
                              for f in family.files])
        for arm, b in todo:
            what = f"{name}, {arm.label}, B={b}"
            folder = work / "select" / name / slug(arm.label) / f"B{b}"
            path = work / "records" / name / slug(arm.label) / f"B{b}.json"
            config = run_config(family, arm, b, args)
            earlier = json.loads(path.read_text()) if path.exists() else None
            if earlier and earlier["config"] == config and (folder / "selection.parquet").exists():
                records.append(earlier["result"])
                progress.tick(f"{what} (done before)", worked=False)
                continue
            log = work / "logs" / name / slug(arm.label) / f"B{b}.log"
            try:
                result = run_one(family, arm, b, args, folder, log, ids, report_of)
            except UserError as err:  # the selector refuses blocks this small: said, not fatal
                skipped.append({"family": name, "selector": arm.label, "B": b,
                                "rows": rows[name], "why": str(err)})
                progress.tick(f"{what}: refused ({err})")
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic({"config": config, "result": result}, path)
            records.append(result)
            progress.tick(f"{what}: {result['selected']:,} selected, joint "
                          f"{result['joint']:.4f}, {result['both_selected']} of "
                          f"{result['pairs']} pairs both kept, {result['select_wall_s']:.1f} s")
    load["end"] = os.getloadavg()
    out = {"flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                     if k != "func"},
           "machine": machine(), "load_average": load,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "wall_s_this_run": round(time.time() - started, 1),
           "rows": rows, "runs": with_shares(records), "skipped": skipped}
    text = markdown(out)
    for folder in [work] + ([args.results] if args.results else []):
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, folder / "results.json")
        write_text_atomic(text, folder / "results.md")
    print(text, flush=True)


def with_shares(records: list[dict]) -> list[dict]:
    """Each run with its joint objective as a share of its selector's one-block run on the same
    family (the plain arm's B=1: the merge, partition and dedup arms are read against it too)."""
    one = {(r["family"], r["selector"]): r["joint"] for r in records
           if r["B"] == 1 and r["merge_ratio"] is None and r.get("dedup") is None}
    return [{**r, "share_of_one_block": r["joint"] / one[r["family"], r["selector"]]}
            for r in records]


def merge_verdict(runs: list[dict] | None, blocks: int, screening: list[str],
                  wall_family: str, tie: float, wall_limit: float) -> dict | None:
    """At `blocks` blocks, the merge arm the plan's rule picks on the screening families (wall
    time within `wall_limit` of one round's on `wall_family`, then the highest smallest share,
    shares within `tie` tied, then fewer planted pairs kept, the smaller ratio, neighbourhood
    first; else the smallest wall ratio), and one round and that arm in every family and
    selector; None where the runs hold no merge arm there. Runs on random blocks only (records
    from before the partition arms name none)."""
    runs = [r for r in runs or () if r["B"] == blocks and r.get("partition", "random") == "random"]
    one = {(r["family"], r["selector"]): r for r in runs
           if r["merge_ratio"] is None and r.get("dedup") is None}
    arms = {}
    for r in runs:
        if r["merge_ratio"] is not None:
            arms.setdefault((r["merge_ratio"], r["merge_partition"]), {})[
                (r["family"], r["selector"])] = r
    if not (one and arms):
        return None

    def wall(cells: dict) -> float:
        return max(r["select_wall_s"] / one[cell]["select_wall_s"]
                   for cell, r in cells.items() if cell[0] == wall_family)

    def screened(cells: dict) -> list[dict]:
        return [r for cell, r in cells.items() if cell[0] in screening]

    eligible = {arm: cells for arm, cells in arms.items() if wall(cells) <= wall_limit}
    if eligible:
        best = max(min(r["share_of_one_block"] for r in screened(c)) for c in eligible.values())
        tied = [arm for arm, c in eligible.items()
                if min(r["share_of_one_block"] for r in screened(c)) >= best - tie]
        chosen = min(tied, key=lambda arm: (sum(r["both_selected"] for r in screened(arms[arm])),
                                            arm[0], arm[1] != "neighbourhood"))
    else:
        chosen = min(arms, key=lambda arm: wall(arms[arm]))
    cells = arms[chosen]
    rows = [{"family": cell[0], "selector": cell[1], "one": one[cell], "merged": r,
             "wall": r["select_wall_s"] / one[cell]["select_wall_s"]}
            for cell, r in cells.items()]
    return {"arm": f"{chosen[0]:g} {chosen[1]}", "eligible": len(eligible), "arms": len(arms),
            "rows": rows, "worst_share": min(r["share_of_one_block"] for r in cells.values()),
            "pairs": sum(r["both_selected"] for r in cells.values()), "wall": wall(cells),
            "blocks": blocks}


PARTITION_GOALS = {"Facility": 0.95, "Pair_simi": 0.99, "DiSF": 0.99}  # share at the most blocks
PARTITION_TIE = 0.01  # neighbourhood blocks become a metric's default only when this much better


def partition_verdict(runs: list[dict]) -> list[dict]:
    """Per diversity metric, at the largest B run on both partitions: one round's smallest share
    over the families on random and on neighbourhood blocks, the default the plan's rule picks
    (neighbourhood where it keeps at least PARTITION_TIE more, else random, select's default) and
    whether the pick meets the metric's PARTITION_GOALS share on every family."""
    plain = [r for r in runs if r["merge_ratio"] is None and r.get("dedup") is None]
    out = []
    for metric in dict.fromkeys(r["metric"] for r in plain):
        mine = [r for r in plain if r["metric"] == metric]
        both = ({r["B"] for r in mine if r.get("partition", "random") == "random"}
                & {r["B"] for r in mine if r.get("partition") == "neighbourhood"})
        if not both:
            continue
        blocks = max(both)
        worst = {cut: min(r["share_of_one_block"] for r in mine
                          if r["B"] == blocks and r.get("partition", "random") == cut)
                 for cut in ("random", "neighbourhood")}
        pick = ("neighbourhood" if worst["neighbourhood"] >= worst["random"] + PARTITION_TIE
                else "random")
        goal = PARTITION_GOALS.get(metric)
        out.append({"metric": metric, "blocks": blocks, **worst, "default": pick, "goal": goal,
                    "met": goal is not None and worst[pick] >= goal})
    return out


def markdown(out: dict) -> str:
    flags = out["flags"]
    lines = ["# `make bench-blocks`: what selecting in blocks loses", "",
             f"{out['date']}; {out['machine']['cpu']}, {out['machine']['cores']} cores; load "
             f"average {out['load_average']['start'][0]:.1f} at the start, "
             f"{out['load_average']['end'][0]:.1f} at the end; {out['wall_s_this_run']:,.0f} s "
             f"this run. --select_ratio {flags['select_ratio']}, --lamb {flags['lamb']}, "
             f"--planted {flags['planted']}, --noise {flags['noise']}, --seed {flags['seed']}, "
             f"--max_seq_length {flags['max_seq_length']}, --embedding_model "
             f"{flags['embedding_model'] or 'all-MiniLM-L6-v2 (prepare default)'}.", "",
             "Joint: the selector's metric's joint objective on all rows (Report's scale: 0 is a "
             "random selection's mean); share: of the same selector's one-block run. Asked: "
             "budget(select_ratio, rows), the count select must select whatever B. Pairs: "
             "planted (original, copy) pairs; split: the two rows in different blocks; both "
             "kept: both selected (of which split), beside a random selection's mean of the same "
             "size. Wall: the select stage's, one local worker (blocks one after another); "
             "selector: the blocks' selector time summed.", ""]
    for family in dict.fromkeys(r["family"] for r in out["runs"]):
        runs = [r for r in out["runs"] if r["family"] == family]
        lines += [f"## {family} ({runs[0]['rows']:,} rows, {runs[0]['pairs']:,} planted pairs)",
                  "", "| selector | metric | B | block rows | asked | selected | joint | share | "
                  "quality | diversity | pairs split | both kept (split) | random keeps | wall s | "
                  "selector s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                  "---:|---:|---:|"]
        for r in runs:
            lines.append(
                f"| {r['arm']} | {r['metric']} | {r['B']} | {r['block_rows']:,} | "
                f"{budget(flags['select_ratio'], r['rows']):,} | {r['selected']:,} | "
                f"{r['joint']:.4f} | {r['share_of_one_block']:.4f} | {r['quality']:.4f} | "
                f"{r['diversity']:.5f} | {r['pairs_split']:,} | "
                f"{r['both_selected']:,} ({r['both_selected_split']:,}) | "
                f"{r['both_selected_random']:,.1f} | {r['select_wall_s']:,.1f} | "
                f"{r['selector_time_s']:,.1f} |")
        lines.append("")
    verdicts = partition_verdict(out["runs"])
    if verdicts:
        lines += ["## The first round's partition, by the plan's rule", "",
                  "| metric | B | random blocks, smallest share | neighbourhood blocks, smallest "
                  "share | default | goal | met |", "|---|---:|---:|---:|---|---:|---|"]
        lines += [f"| {v['metric']} | {v['blocks']} | {v['random']:.4f} | "
                  f"{v['neighbourhood']:.4f} | {v['default']} | {v['goal'] or '-'} | "
                  f"{'yes' if v['met'] else 'no'} |" for v in verdicts]
        lines.append("")
    for s in out["skipped"]:
        at = f" at B={s['B']}" if "B" in s else ""
        lines.append(f"Skipped: {s['selector']} on {s['family']}{at} ({s['rows']:,} rows; "
                     f"{s['why']}).")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "python -m reproduce.bench.blocks")


if __name__ == "__main__":
    sys.exit(main())

"""`make bench-defaults`: do `datamask select`'s defaults keep the best greedy's gain in its time,
family by family (reproduce/results/defaults/plan.md)?

    python -m reproduce.bench.defaults [--families synth-32d-30c pool ...] [--metrics ...]
        [--lambs 0 0.5] [--pool runs/pool/prepared] [--bbc runs/pipeline-demo/prepared]
        [--set start_optimizer=lazy Pair_simi:give_up=4 ...] [--repeats 3]
        [--ratios 0.1 0.3] [--skip DiSF:joint-greedy]
        [--output reproduce/results/defaults/screen]

For each family, size, ratio, lamb and metric, select at its defaults (with --set's overrides) and each
reference greedy run back to back in this process on the same rows; `datamask.report.Report`
scores every selection on the run's joint objective over all rows, beside a random selection's.
With --repeats N, select and each greedy run N times in turn, and each time is the median of
its runs (a shared machine's time moves between runs of one computation). A cell passes when
select gains at least 0.99 of the best greedy's gain over random, in at most that greedy's time
from 20,000 rows up and at most its time plus one second below. Beside the
verdict: how near the optimum select's start and written selection are (the share of the room
between a random selection and the certificate's upper bound, or "no bound") and the time of the
whole select call seen from here. --skip leaves a reference greedy out (its cells are then held
against the greedies that ran, and say so). Printed as a table; with --output also written as
defaults.json and defaults.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from datamask.data import Dataset, read_dataset, write_text_atomic
from datamask.examples.synthetic import synthetic_dataset
from datamask.report import Report
from datamask.selectors import make_selector
from datamask.shared import machine
from eval.tables import markdown

RATIO = 0.1
KEEP = 0.99  # share of the best greedy's gain a default must keep
GRACE_S = 1.0  # below this many rows select may take the greedy's time plus GRACE_S
TIMED_FROM = 20_000
DENSE_ROWS = 20_000  # largest input whose dense facility kernel the lazy greedies build here
SYNTHETIC = {  # family -> (dim, clusters, sizes); the first two are the defaults' screen
    "synth-32d-30c": (32, 30, (3_000, 20_000)), "synth-384d-64c": (384, 64, (20_000, 100_000)),
    "synth-64d-24c": (64, 24, (3_000, 20_000)), "synth-768d-100c": (768, 100, (3_000, 20_000)),
    "synth-384d-16c": (384, 16, (20_000, 100_000)), "synth-128d-40c": (128, 40, (3_000, 20_000)),
    # held out from every round up to DiSF's sampled start (defaults/disf-sampled-start/plan.md)
    "synth-48d-36c": (48, 36, (3_000, 20_000)), "synth-192d-12c": (192, 12, (3_000, 20_000))}
# the shapes users bring from the paper: 768-d unit rows (E5-base's), integer quality scores
PAPER = {"paper-768d-30c": (768, 30, (20_000,)),
         "paper-768d-60c": (768, 60, (20_000,))}  # held out from Facility's start-only round
PREPARED = ("pool", "bbc")  # real text: a folder of prepared rows (--pool, --bbc)


def references(metric: str, lamb: float, n: int) -> list[tuple[str, dict]]:
    """The reference greedies of plan.md for (metric, lamb) at n rows."""
    if lamb == 0:
        return {"Pair_simi": [("pair-greedy", {})],
                "Facility": [("facility-greedy", {"optimizer": "lazy"}) if n <= DENSE_ROWS
                             else ("facility-knn-greedy", {"optimizer": "lazy"})],
                "DiSF": [("disf-greedy-fast", {})]}[metric]
    joint = ("joint-greedy", {"algorithm": metric, "lamb": lamb,
                              **({"optimizer": "lazy"} if metric == "Facility" else {})})
    if metric == "Facility" and n > DENSE_ROWS:
        return []
    return [joint, ("disf-greedy-fast", {})] if metric == "DiSF" else [joint]


def paper_rows(n: int, dim: int, clusters: int, seed: int) -> Dataset:
    """A PAPER family's rows: the synthetic clusters, each row scaled to unit length, each
    quality score rounded to a whole number (0 to 5), as a classifier's integer scores."""
    data = synthetic_dataset(n, dim, clusters, seed=seed)
    features = data.features / np.linalg.norm(data.features, axis=1, keepdims=True)
    return Dataset(ids=data.ids, quality=np.rint(data.quality), features=features)


def datasets(args) -> list[tuple[str, object]]:
    """(family, dataset) for each family and size asked for."""
    out = []
    for family in args.families:
        if family in SYNTHETIC or family in PAPER:
            make = synthetic_dataset if family in SYNTHETIC else paper_rows
            dim, clusters, sizes = {**SYNTHETIC, **PAPER}[family]
            out += [(family, make(n, dim, clusters, seed=args.seed))
                    for n in (args.sizes or sizes)]
        else:
            folder = getattr(args, family)
            files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                           if f.endswith(".parquet"))
            out.append((family, read_dataset(files)))
    return out


@dataclass(frozen=True)
class Settings:
    """What every cell of one bench run shares: --set's overrides per metric, --skip's
    reference greedies left out, the seed and --repeats."""

    overrides: dict[str, dict]
    skip: tuple[str, ...] = ()  # METRIC:NAME
    seed: int = 0
    repeats: int = 1

    def references(self, metric: str, lamb: float, n: int) -> tuple[list, list[str]]:
        """The reference greedies a cell runs, and those --skip leaves out."""
        specs = references(metric, lamb, n)
        left_out = [name for name, _ in specs if f"{metric}:{name}" in self.skip]
        return [s for s in specs if s[0] not in left_out], left_out


def cell(family: str, data, metric: str, lamb: float, ratio: float, report: Report,
         random_value: dict, settings: Settings) -> dict:
    """Select at its defaults and each reference greedy on `data`, `repeats` times in turn
    (select, then each greedy, then again); each one's time and gain on the joint are the
    medians of its runs (a seeded run repeats its selection, unless a time budget ends it at
    another step, so each distinct selection is scored once)."""
    objective, seed = f"joint_{metric}", settings.seed
    greedy_specs, left_out = settings.references(metric, lamb, len(data))
    runs = {name: [] for name in ["datamask", *(name for name, _ in greedy_specs)]}
    outer = []  # select's whole call: the scale fit and the untimed scoring included
    for _ in range(settings.repeats):
        began = time.perf_counter()
        runs["datamask"].append(make_selector(
            "datamask", algorithm=metric, lamb=lamb, seed=seed, device="cpu",
            **settings.overrides[metric]).select(data, ratio))
        outer.append(time.perf_counter() - began)
        for name, options in greedy_specs:
            runs[name].append(make_selector(name, device="cpu", seed=seed, **options).select(
                data, ratio))
    scored = {}  # a selection's bytes -> its gain over random

    def gain_of(run) -> float:
        key = np.ascontiguousarray(run.selected).tobytes()
        if key not in scored:
            scored[key] = report(run.selected)[objective] - random_value[objective]
        return scored[key]

    seconds = {name: [run.wall_time_s for run in repeated] for name, repeated in runs.items()}
    gains = {name: [gain_of(run) for run in repeated] for name, repeated in runs.items()}
    gain = float(np.median(gains["datamask"]))
    greedies = [(name, float(np.median(seconds[name])), float(np.median(gains[name])))
                for name, _ in greedy_specs]
    row = {"family": family, "rows": len(data), "ratio": ratio, "metric": metric, "lamb": lamb,
           "select_s": float(np.median(seconds["datamask"])),
           "select_call_s": float(np.median(outer)), **runs["datamask"][0].run}
    if left_out:
        row["greedies_not_run"] = left_out
    if settings.repeats > 1:
        row.update(repeats=seconds, repeat_gains=gains)
    if greedies:
        name, wall, best = max(greedies, key=lambda g: g[2])
        grace = 0.0 if len(data) >= TIMED_FROM else GRACE_S
        row.update(greedy=name, greedy_s=wall, gain=gain, greedy_gain=best,
                   gain_ratio=gain / best, time_ratio=row["select_s"] / wall,
                   passes=bool(gain >= KEEP * best and row["select_s"] <= wall + grace))
    return row


def gain_ratio_text(ratio, greedy_gain) -> str:
    """A cell's gain ratio as shown: "greedy below random" where the best greedy gained nothing
    over random, whose ratio says nothing (the verdict still says whether select gained)."""
    if pd.isna(ratio):
        return "-"
    return "greedy below random" if greedy_gain is not None and greedy_gain <= 0 else f"{ratio:.3f}"


def ratios(cells: pd.DataFrame) -> pd.Series:
    """Each cell's select ratio: RATIO in runs made before the bench took --ratios."""
    return cells.get("ratio", pd.Series(RATIO, cells.index)).fillna(RATIO)


def read_cells(folder: Path, *parts: str) -> pd.DataFrame:
    """The cells of the runs written in `folder` (or its `parts`) and their family folders, each
    with its select ratio."""
    runs = [run for part in parts or ("",) for pattern in ("defaults.json", "*/defaults.json")
            for run in sorted(Path(folder, part).glob(pattern))]
    cells = pd.DataFrame([row for run in runs for row in json.loads(run.read_text())["rows"]])
    if not cells.empty:
        cells["ratio"] = ratios(cells)
    return cells


def shown_cells(frame: pd.DataFrame) -> list[dict]:
    """Bench cells as shown: the gain ratio's words where the greedy lost to random, each
    certificate's share ("no bound" where a run had none, "-" where made before them)."""
    none = pd.Series(None, frame.index)
    frame = frame.assign(gain_text=[gain_ratio_text(r, g) for r, g in zip(
        frame.gain_ratio, frame.get("greedy_gain", none))])
    for which in ("start", "written"):
        frame[f"{which}_share"] = [
            f"{v:.4f}" if pd.notna(v) else "no bound" if isinstance(r, str) else "-"
            for v, r in zip(frame.get(f"share_above_random_{which}", none),
                            frame.get("no_bound_reason", none))]
    return frame.to_dict("records")


def share(value) -> str:
    """A certificate's share above random, or "no bound" where the run had none."""
    return "no bound" if value is None or pd.isna(value) else f"{value:.4f}"


def metric_overrides(items: list[str], metrics: list[str]) -> dict[str, dict]:
    """--set's KEY=VALUE (every metric) and METRIC:KEY=VALUE (that metric only), per metric;
    a value that reads as a number or boolean becomes one."""
    found = {metric: {} for metric in metrics}
    for item in items:
        key, value = item.split("=", 1)
        value = json.loads(value) if value[:1].isdigit() or value in ("true", "false") else value
        scope, _, key = key.rpartition(":")
        for metric in ([scope] if scope else metrics):
            if metric in found:
                found[metric][key] = value
    return found


def table(rows: list[dict]) -> str:
    frame = pd.DataFrame(rows)
    shown = pd.DataFrame({
        "family": frame.family, "rows": frame.rows.map("{:,}".format),
        "ratio": ratios(frame).map("{:g}".format),
        "metric": frame.metric, "lamb": frame.lamb.map("{:g}".format),
        "greedy": [g if not isinstance(skipped, list) else f"{g} ({', '.join(skipped)} not run)"
                   for g, skipped in zip(frame.get("greedy", pd.Series("-", frame.index)),
                                         frame.get("greedies_not_run",
                                                   pd.Series(None, frame.index)))],
        "gain ratio": [gain_ratio_text(r, g) for r, g in zip(
            frame.get("gain_ratio", pd.Series(np.nan, frame.index)),
            frame.get("greedy_gain", pd.Series(None, frame.index)))],
        "select s": frame.select_s.map("{:.3g}".format),
        "greedy s": frame.get("greedy_s", np.nan).map(lambda s: "-" if pd.isna(s)
                                                       else f"{s:.3g}"),
        "steps": frame.steps_run, "stop": frame.stop_reason, "written at": frame.written_step,
        "written / start": [f"{w / s:.4f}" if s else "-"
                            for w, s in zip(frame.objective_written, frame.objective_start)],
        "start share": frame.get("share_above_random_start", pd.Series([None] * len(frame))).map(
            share),
        "written share": frame.get("share_above_random_written",
                                   pd.Series([None] * len(frame))).map(share),
        "passes": frame.get("passes", "-")})
    return markdown(shown, right=("rows", "gain ratio", "select s", "greedy s", "steps",
                                  "written at", "written / start", "start share",
                                  "written share"))


def positive_int(value: str) -> int:
    """argparse type for a count of at least 1 (--repeats)."""
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(SYNTHETIC)[:2],
                        choices=[*SYNTHETIC, *PAPER, *PREPARED])
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="rows of the synthetic families (default: each family's own)")
    parser.add_argument("--metrics", nargs="+", default=["Pair_simi", "Facility", "DiSF"],
                        choices=["Pair_simi", "Facility", "DiSF"])
    parser.add_argument("--lambs", type=float, nargs="+", default=[0.0, 0.5])
    parser.add_argument("--ratios", type=float, nargs="+", default=[RATIO],
                        help="select ratios (default: %(default)s)")
    parser.add_argument("--skip", nargs="*", default=[], metavar="METRIC:GREEDY",
                        help="reference greedies not to run, e.g. DiSF:joint-greedy (its naive "
                             "greedy takes hours at 20,000 rows of 768-d)")
    parser.add_argument("--pool", default="runs/pool/prepared",
                        help="prepared rows of the pool (make pool)")
    parser.add_argument("--bbc", default="runs/pipeline-demo/prepared",
                        help="prepared rows of the BBC corpus (make pipeline-prepare)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="select options to override, e.g. start_optimizer=lazy; "
                             "METRIC:KEY=VALUE for one metric only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=positive_int, default=1,
                        help="time select and each greedy this many times, in turn, and take "
                             "each one's median (default: %(default)s)")
    parser.add_argument("--output", default=None,
                        help="folder for defaults.json and defaults.md (default: print only)")
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    overrides = metric_overrides(args.set, args.metrics)
    settings = Settings(overrides, tuple(args.skip), args.seed, args.repeats)
    warm = synthetic_dataset(300, 16, 4, seed=args.seed)  # first calls pay for torch's set-up
    for metric in args.metrics:  # at the cells' first lamb, which an override may need
        make_selector("datamask", algorithm=metric, lamb=args.lambs[0], seed=args.seed,
                      device="cpu", **overrides[metric]).select(warm, RATIO)
    rows = []
    for (family, data), ratio, lamb in itertools.product(datasets(args), args.ratios, args.lambs):
        # only the metrics run: each one's scale is fitted on its own seeded masks, the same
        # values as in a report of all three, without Facility's N x k kernels when not asked
        report = Report(data, ratio, lamb, seed=args.seed, metrics=tuple(args.metrics))
        random_value = report(make_selector("random", seed=args.seed).select(
            data, ratio).selected)
        for metric in args.metrics:
            rows.append(cell(family, data, metric, lamb, ratio, report, random_value, settings))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    timed = f", each time the median of {args.repeats} runs" if args.repeats > 1 else ""
    text = (f"select's defaults{' with ' + ' '.join(args.set) if args.set else ''} against the "
            f"best reference greedy{timed}, seed {args.seed}, "
            f"{torch.get_num_threads()} torch threads\n\n" + table(rows))
    print("\n" + text)
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        record = {"argv": sys.argv[1:] if argv is None else argv, "set": overrides,
                  "machine": machine(), "rows": rows}
        for name, content in (("defaults.json", json.dumps(record, indent=1)),
                              ("defaults.md", text)):
            write_text_atomic(content, os.path.join(args.output, name))
    return rows


if __name__ == "__main__":
    main()

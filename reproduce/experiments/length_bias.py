"""`make length-bias`: do quality selections pick long documents and diversity selections short
ones (reproduce/results/length-bias/plan.md)?

    python -m reproduce.experiments.length_bias [--corpora pool bbc] [--pool runs/pool/prepared]
        [--bbc runs/pipeline-demo/prepared] [--seeds 0 1 2 3 4] [--ratio 0.1]
        [--selections quality-topk pair-greedy ...] [--output reproduce/results/length-bias]

Each selection runs through the registry on every row of each corpus of prepared rows, once per
seed where the selector takes one, and is measured by its length ratio: the mean `text_length`
(characters) of its rows over the corpus's mean. A uniformly random selection of k of N rows has
a ratio of mean 1 and sd CV * sqrt((N - k) / ((N - 1) k)); 1.96 of those is the corpus's chance
band, against which each selection is called long, short or within chance.

`length-bias.json` schema (records.LengthBiasResult): experiment ("length-bias"), machine, config
(the flags), corpora (one LengthCorpus each: folder, rows, rows selected, mean length, CV, the
chance band's half-width), runs (one LengthRun per corpus, selection and seed: the length ratio,
the mean length, wall seconds), summary (one LengthSummary per corpus and selection: the seeds,
how many distinct selections they made, the ratio's min, mean and max)."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os

import numpy as np
import pyarrow.parquet as pq

from datamask.data import Dataset, budget, read_dataset
from datamask.selectors import selector_class
from datamask.shared import machine
from reproduce.pipeline.common import METHODS, parse_method

from .common import experiment_main
from .records import LengthBiasResult, LengthCorpus, LengthRun, LengthSummary, Machine

LENGTH_COLUMN = "text_length"  # prepare's: the document's length in characters
Z = 1.96  # the chance band's half-width in standard deviations of a random selection's ratio
PAPER = {"FineWeb-Edu": 1.47, "UltraFineWeb": 1.14}  # its quality selections' length ratios
QUALITY = "quality-topk"  # the quality selection the rule judges
DIVERSITY = ("pair-greedy", "facility-greedy", "disf-greedy-fast")  # the diversity greedies judged
# label -> selector spec (the downstream experiment's where it has one), the judged ones first
SELECTIONS = {
    QUALITY: METHODS[QUALITY], **{name: name for name in DIVERSITY},
    "random": METHODS["random"],
    **{label: METHODS[label] for label in ("datamask-Pair_simi", "datamask-Facility",
                                            "datamask-DiSF", "datamask-paper", "joint-greedy",
                                            "quality-threshold", "semdedup", "cluster-quota")},
    "mmr": "mmr", "knn-density": "knn-density"}
CORPORA = {"pool": ("runs/pool/prepared", "the web-like pool (make pool, then prepare)"),
           "bbc": ("runs/pipeline-demo/prepared", "the BBC corpus (make pipeline-prepare)")}


def role(selection: str) -> str:
    return "quality" if selection == QUALITY else "diversity" if selection in DIVERSITY \
        else "reported"


def prepared_rows(folder: str) -> tuple[Dataset, np.ndarray]:
    """A prepared folder's rows and their `text_length`, both in file order then row order."""
    files = sorted(glob.glob(os.path.join(folder, "*.parquet")))
    lengths = [pq.read_table(f, columns=[LENGTH_COLUMN])[LENGTH_COLUMN].to_numpy() for f in files]
    return read_dataset(files), np.concatenate(lengths).astype(np.float64)


def chance_half_width(lengths: np.ndarray, k: int) -> float:
    """Z standard deviations of a uniformly random k-row selection's length ratio (sampling
    without replacement from the corpus)."""
    n = len(lengths)
    cv = lengths.std() / lengths.mean()
    return float(Z * cv * np.sqrt((n - k) / ((n - 1) * k)))


def against_chance(ratios, half_width: float) -> str:
    """'long' when every ratio is above the chance band, 'short' when every one is below it."""
    ratios = np.asarray(ratios)
    if (ratios > 1 + half_width).all():
        return "long"
    if (ratios < 1 - half_width).all():
        return "short"
    return "within chance"


def runs_of(spec: str, seeds: list[int]) -> list[tuple[int | None, object]]:
    """(seed, selector) per seed where the selector takes one, else one (None, selector); on the
    CPU where it takes a device."""
    name, params = parse_method(spec)
    options = {f.name for f in dataclasses.fields(selector_class(name).Options)}
    if "device" in options:
        params["device"] = "cpu"
    if "seed" not in options:
        return [(None, selector_class(name)(**params))]
    return [(seed, selector_class(name)(**params, seed=seed)) for seed in seeds]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    for name, (folder, what) in CORPORA.items():
        parser.add_argument(f"--{name}", default=folder, help=f"prepared rows of {what}")
    parser.add_argument("--selections", nargs="+", default=list(SELECTIONS),
                        choices=list(SELECTIONS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="seeds of every selector that takes one")
    parser.add_argument("--ratio", type=float, default=0.1, help="select_ratio")
    parser.add_argument("--output", default="runs/experiments/length-bias")
    return parser


def parse(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in args.corpora:
        folder = getattr(args, name)
        files = sorted(glob.glob(os.path.join(folder, "*.parquet")))
        if not files:
            parser.error(f"--{name} {folder}: no prepared Parquet files ({CORPORA[name][1]})")
        missing = [f for f in files if LENGTH_COLUMN not in pq.read_schema(f).names]
        if missing:
            parser.error(f"--{name} {missing[0]}: no '{LENGTH_COLUMN}' column (not written by "
                         "the pipeline's prepare stage)")
    if not 0 < args.ratio < 1:
        parser.error(f"--ratio {args.ratio}: must be in (0, 1)")
    return args


def run(args) -> LengthBiasResult:
    corpora, runs, summary = [], [], []
    for name in args.corpora:
        folder = getattr(args, name)
        data, lengths = prepared_rows(folder)
        k = budget(args.ratio, len(data))
        mean, half = float(lengths.mean()), chance_half_width(lengths, k)
        corpora.append(LengthCorpus(name=name, folder=folder, rows=len(data), selected=k,
                                    mean_length=mean, cv=float(lengths.std() / mean),
                                    chance_half_width=half))
        for label in args.selections:
            ratios, masks = [], []
            for seed, selector in runs_of(SELECTIONS[label], args.seeds):
                selection = selector.select(data, args.ratio)
                masks.append(selection.selected)
                chosen = float(lengths[selection.selected].mean())
                ratios.append(chosen / mean)
                runs.append(LengthRun(corpus=name, selection=label, seed=seed, ratio=ratios[-1],
                                      mean_length=chosen, wall_s=selection.wall_time_s))
                print(f"{name} {label} seed {seed}: ratio {ratios[-1]:.3f} "
                      f"({selection.wall_time_s:.1f} s)", flush=True)
            summary.append(LengthSummary(
                corpus=name, selection=label, role=role(label), seeds=len(ratios),
                distinct=len({m.tobytes() for m in masks}), ratio_min=min(ratios),
                ratio_mean=float(np.mean(ratios)), ratio_max=max(ratios),
                against_chance=against_chance(ratios, half)))
    return LengthBiasResult(experiment="length-bias", machine=Machine(**machine("cpu")),
                            config=vars(args), corpora=corpora, runs=runs, summary=summary)


def percent(ratio: float) -> str:
    return f"{100 * ratio:.0f}%"


def band(corpus: LengthCorpus) -> str:
    """The corpus's chance band, as percentages of its mean length."""
    return f"{percent(1 - corpus.chance_half_width)}-{percent(1 + corpus.chance_half_width)}"


def spread(s: LengthSummary) -> str:
    """The ratio over the seeds: one figure where they made one selection, else min / mean / max."""
    if s.distinct == 1:
        return percent(s.ratio_mean)
    return f"{percent(s.ratio_min)} / {percent(s.ratio_mean)} / {percent(s.ratio_max)}"


def markdown(result: LengthBiasResult) -> str:
    c = result.config
    lines = [f"# Length bias: each selection's mean `text_length` over its corpus's mean, "
             f"select_ratio {c['ratio']:g}", "",
             f"{result.machine.line()}. Length in characters (prepare's `text_length`). "
             f"Seeds {', '.join(map(str, c['seeds']))} where a selector takes one: the ratio "
             "as min / mean / max over them, one figure where they made one selection. "
             f"Chance band: 1 +- {Z} sd of a uniformly random selection's ratio; `long` or "
             "`short`: every seed beyond it.", ""]
    for corpus in result.corpora:
        lines += [f"## {corpus.name} ({corpus.rows:,} rows, {corpus.selected:,} selected; mean "
                  f"{corpus.mean_length:,.0f} characters, CV {corpus.cv:.2f}; chance band "
                  f"{band(corpus)})",
                  "", "| selection | role | seeds (distinct) | length ratio | against chance |",
                  "|---|---|---:|---:|---|"]
        lines += [f"| {s.selection} | {s.role} | {s.seeds} ({s.distinct}) | {spread(s)} | "
                  f"{s.against_chance} |" for s in result.summary if s.corpus == corpus.name]
        lines.append("")
    return "\n".join(lines)


main = experiment_main(parse, run, markdown)

if __name__ == "__main__":
    main()

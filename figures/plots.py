"""`make figures`: draw every figure whose results file exists; say which were skipped and why.

    python -m figures [--results runs/experiments] [--timing DIR] [--pipeline runs/pipeline-demo]
        [--output runs/experiments/figures]

It reads the results root's question folders as the Make targets write them: timing/timing.json
(or --timing, one timing run's folder, e.g. a scale run), ablation-<knob>/ablation-<knob>.json
and ablation-direct/ablation-direct.json.

1 curves.png: the learner's whole-input objective against step and against wall time, with each
  greedy's level (timing.json, largest N where a greedy finished). 2 ablation-<knob>.png: objective
  against wall time per value, mean +- std over seeds, and ablation-<knob>-values.png: the final
  objective against the value beside the joint greedy's (each ablation-<knob>.json there);
  ablation-direct.png: each method's objective and time (ablation-direct.json). 3 timing.png: wall
  time against N, log-log, measured and extrapolated (or killed at the budget, then extrapolated)
  marked apart (timing.json); 3-anytime-<metric>-<N>.png: every selector's objective against wall
  time on the same axes (figures/anytime.py). 5 length-bias.png: each selection's mean length
  over its corpus's, per corpus, the seeds' range as a bar and the chance band shaded
  (length-bias/length-bias.json). 4, 6, 7: from the pipeline demo's files (figures/pipeline.py).
"""

from __future__ import annotations

import argparse
import glob
import os

import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

from reproduce.experiments.length_bias import PAPER
from reproduce.experiments.records import (DirectResult, LengthBiasResult, SweepResult,
                                           TimingResult, of_metric, read_result)

from . import anytime, pipeline, save


ROLE_COLORS = {"learner": "C0", "fast": "C1", "reference": "C3", "scalable": "C2"}


def curves(timing: TimingResult):
    """Figure 1: per metric, at the largest N where the learner and a greedy were measured."""
    metrics = timing.metrics
    fig, axes = plt.subplots(len(metrics), 2, figsize=(11, 3.4 * len(metrics)), squeeze=False)
    for row, metric in zip(axes, metrics):
        runs = of_metric(timing.runs, metric)
        learned = {r.n for r in runs if r.role == "learner" and r.curve}  # not in blocks
        n = max(r.n for r in runs if r.role != "learner" and r.status == "measured"
                and r.n in learned)
        learner = next(r for r in runs if r.n == n and r.role == "learner")
        steps = [p.step for p in learner.curve]
        seconds = [p.elapsed_s for p in learner.curve]
        values = [p.objective for p in learner.curve]
        for ax, x, label in ((row[0], steps, "learner step"), (row[1], seconds, "wall time (s)")):
            ax.plot(x, values, "o-", ms=3, color="C0", label="DATAMASK (lamb 0)")
            ax.axhline(learner.random_objective, color="grey", ls=":", label="random selection")
            for i, greedy in enumerate(r for r in runs if r.n == n and r.role != "learner"
                                       and r.status == "measured"):
                ax.axhline(greedy.objective, color=f"C{i + 1}", ls="--",
                           label=f"{greedy.label} ({greedy.wall_s:.3g} s)")
                if ax is row[1]:
                    ax.plot([greedy.wall_s], [greedy.objective], "s", color=f"C{i + 1}")
            ax.set_xlabel(label)
            ax.set_ylabel(f"{metric} on all N rows (higher is better)")
            ax.set_title(f"{metric}, N = {n}: objective vs {label.split(' (')[0]}")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def ablation(result: SweepResult):
    """Figure 2 (and the other knobs): objective vs wall time, mean +- std band over seeds; the
    seeds evaluate at the same steps, so points are averaged index by index."""
    knob, metrics = result.knob, result.metrics
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, value in enumerate(result.config["values"]):
            group = [r.curve for r in of_metric(result.runs, metric) if r.value == value]
            length = min(len(c) for c in group)
            t = np.mean([[p.elapsed_s for p in c[:length]] for c in group], axis=0)
            y = np.array([[p.objective for p in c[:length]] for c in group])
            mean, std = y.mean(axis=0), y.std(axis=0)
            ax.plot(t, mean, "-", color=f"C{i}", label=f"{knob} = {value}")
            ax.fill_between(t, mean - std, mean + std, color=f"C{i}", alpha=0.2)
        ax.axhline(0, color="grey", ls=":", lw=1, label="random selection (~0)")
        for greedy in (g for g in of_metric(result.greedy, metric)
                       if knob != "lamb"):  # one lamb, one level (the lamb sweep: -values fig)
            ax.axhline(greedy.objective, color="black", ls="--", lw=1,
                       label=f"joint greedy ({greedy.wall_s:.2g} s)")
        ax.set_xlabel("learner wall time (s)")
        ax.set_ylabel(f"joint_{metric} on all N rows (std units)")
        ax.set_title(f"{metric}: {knob} ablation ({len(result.config['seeds'])} seeds, "
                     "band = ±1 std)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


NUMERIC_KNOBS = {"G": "log", "partial": "log", "steps": "log", "lamb": "linear"}


def ablation_values(result: SweepResult):
    """Each knob's value against the final objective (mean +- std over seeds), the joint greedy's
    level beside it; for lamb also the selection's mean quality and diversity metric, the
    trade-off the paper's lamb sweep shows."""
    knob, metrics = result.knob, result.metrics
    rows = 2 if knob == "lamb" else 1
    fig, axes = plt.subplots(rows, len(metrics), figsize=(5 * len(metrics), 3.8 * rows),
                             squeeze=False)
    for column, metric in enumerate(metrics):
        summary = of_metric(result.summary, metric)
        values = [s.value for s in summary]
        x = values if knob in NUMERIC_KNOBS else list(range(len(values)))
        ax = axes[0][column]
        ax.errorbar(x, [s.objective_mean for s in summary],
                    yerr=[s.objective_std for s in summary], fmt="o-", capsize=3, color="C0",
                    label="DATAMASK, final")
        ax.plot(x, [s.start_mean for s in summary], "x:", color="grey",
                label="DATAMASK, after step 1")
        greedy = {g.lamb: g for g in of_metric(result.greedy, metric)}
        if knob == "lamb":
            ax.plot(x, [greedy[v].objective for v in values if v in greedy], "s--",
                    color="C1", label="joint greedy")
        elif greedy:
            level = next(iter(greedy.values()))
            ax.axhline(level.objective, color="C1", ls="--",
                       label=f"joint greedy ({level.wall_s:.2g} s)")
        if knob in NUMERIC_KNOBS:
            ax.set_xscale(NUMERIC_KNOBS[knob])
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        else:
            ax.set_xticks(x, values, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel(knob)
        ax.set_ylabel(f"joint_{metric} on all N rows (std units)")
        ax.set_title(f"{metric}: final objective vs {knob}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        if rows == 2:
            ax = axes[1][column]
            ax.plot(x, [s.means["quality"] for s in summary], "o-", color="C2",
                    label="mean quality")
            ax.set_ylabel("mean quality of the selection", color="C2")
            twin = ax.twinx()
            twin.plot(x, [s.means[metric] for s in summary], "s-", color="C3",
                      label=metric)
            twin.set_ylabel(f"{metric} of the selection (higher = more diverse)", color="C3")
            ax.set_xlabel("lamb (weight of quality)")
            ax.set_title(f"{metric} runs: quality and diversity vs lamb", fontsize=10)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def direct_plot(result: DirectResult):
    """ablation-direct: every method's joint objective (mean +- std over seeds) per metric, its
    selection time written beside the bar."""
    metrics, methods = result.metrics, result.methods
    height = 0.45 * len(methods) + 1.5
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), height), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        rows = {s.method: s for s in of_metric(result.summary, metric)}
        y = np.arange(len(methods))[::-1]
        means = [rows[m].objective_mean for m in methods]
        ax.barh(y, means, xerr=[rows[m].objective_std for m in methods], capsize=3,
                color=["C0" if m == "datamask" else "C1" if m == "joint-greedy" else "C7"
                       for m in methods])
        ax.set_yticks(y, methods)
        for yi, m in zip(y, methods):
            ax.annotate(f"  {rows[m].wall_s_mean:.2g} s",
                        (max(rows[m].objective_mean, 0), yi), va="center", fontsize=7)
        ax.axvline(0, color="grey", lw=1)
        ax.set_xlabel(f"joint_{metric} on all N rows (std units; random ~ 0)")
        ax.set_title(f"{metric}: learner vs one-shot selectors", fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def length_bias(result: LengthBiasResult):
    """Figure 5: each selection's mean length as % of its corpus's, one panel per corpus; the
    bar is the seeds' mean, the line their range, the shading the chance band of a random
    selection, the dotted lines the paper's quality selections."""
    fig, axes = plt.subplots(1, len(result.corpora), figsize=(7 * len(result.corpora), 4.5),
                             squeeze=False, sharey=True)
    colours = {"quality": "C3", "diversity": "C0", "reported": "grey"}
    for ax, corpus in zip(axes[0], result.corpora):
        rows = list(result.of(corpus.name).values())
        x = np.arange(len(rows))
        mean = np.array([100 * s.ratio_mean for s in rows])
        ax.bar(x, mean, color=[colours[s.role] for s in rows])
        ax.vlines(x, [100 * s.ratio_min for s in rows], [100 * s.ratio_max for s in rows],
                  color="black", lw=1.5)
        ax.axhspan(100 * (1 - corpus.chance_half_width), 100 * (1 + corpus.chance_half_width),
                   color="black", alpha=0.12, label="random selections' chance band")
        ax.axhline(100, color="black", ls="--", lw=1)
        for i, (name, ratio) in enumerate(PAPER.items()):
            ax.axhline(100 * ratio, color="C3", ls=":", lw=1.2 + i * 0.6,
                       label=f"paper, quality: {name} {100 * ratio:.0f}%")
        ax.set_xticks(x, [s.selection for s in rows], rotation=60, ha="right", fontsize=8)
        ax.set_title(f"{corpus.name}: {corpus.rows:,} rows, mean {corpus.mean_length:,.0f} "
                     "characters", fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("mean text_length of the selection (% of the corpus's)")
    fig.suptitle(f"Length bias at select_ratio {result.config['ratio']:g} (red: the quality "
                 "selection, blue: the diversity greedies, grey: reported)", fontsize=10)
    fig.tight_layout()
    return fig


def timing_plot(timing: TimingResult):
    """Figure 3: measured times joined by solid lines, extrapolated ones hollow and dashed."""
    metrics = timing.metrics
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        runs = of_metric(timing.runs, metric)
        for i, (label, role) in enumerate(dict.fromkeys((r.label, r.role) for r in runs)):
            color = ROLE_COLORS[role] if role != "scalable" else f"C{4 + i}"
            mine = sorted((r.n, r.wall_s, r.status) for r in runs if r.label == label)
            fit = timing.fits[metric].get(label)
            name = label + (f" (fit N^{fit.exponent:.2f})" if fit else "")
            measured = [(n, t) for n, t, s in mine if s == "measured"]
            ax.plot(*zip(*measured), "o-", color=color, label=f"{name}, measured")
            extra = [(n, t) for n, t, s in mine if s != "measured"]  # extrapolated or killed
            if extra:
                ax.plot(*zip(*(measured[-1:] + extra)), "--", color=color)
                ax.plot(*zip(*extra), "o", mfc="none", color=color,
                        label=f"{label}, extrapolated")
        ax.set_xscale("log")
        ax.set_yscale("log")
        sizes = sorted({r.n for r in runs})
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("rows N")
        ax.set_ylabel("selector wall time (s)")
        ax.set_title(f"{metric}: wall time vs N")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="runs/experiments")
    parser.add_argument("--timing", default=None,
                        help="the folder of the timing run to draw (default: RESULTS/timing)")
    parser.add_argument("--pipeline", default="runs/pipeline-demo")
    parser.add_argument("--output", default="runs/experiments/figures")
    args = parser.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    written = []
    timing_folder = args.timing or os.path.join(args.results, "timing")
    timing = read_result(timing_folder, "timing")
    if timing:
        written += save(curves(timing), args.output, "1-curves")
        written += save(timing_plot(timing), args.output, "3-timing")
        for metric, n in anytime.panels(timing):
            written += save(anytime.anytime(timing, metric, n), args.output,
                            f"3-anytime-{metric}-{n}")
    for path in sorted(glob.glob(os.path.join(args.results, "ablation-*", "ablation-*.json"))):
        experiment = os.path.basename(path)[:-len(".json")]
        result = read_result(os.path.dirname(path), experiment)
        if isinstance(result, SweepResult):  # named as the experiment: ablation-<knob>
            written += save(ablation(result), args.output, f"2-{experiment}")
            written += save(ablation_values(result), args.output, f"2-{experiment}-values")
    direct = read_result(os.path.join(args.results, "ablation-direct"), "ablation-direct")
    if direct:
        written += save(direct_plot(direct), args.output, "2-ablation-direct")
    if not timing:
        print(f"figures: no {timing_folder}/timing.json; figures 1 and 3 skipped")
    bias = read_result(os.path.join(args.results, "length-bias"), "length-bias")
    if bias:
        written += save(length_bias(bias), args.output, "5-length-bias")
    else:
        print(f"figures: no {args.results}/length-bias/length-bias.json; figure 5 skipped")
    rows = pipeline.load(args.pipeline)
    if rows:
        written += save(pipeline.embeddings(rows), args.output, "4-embeddings")
        written += save(pipeline.quality_redundancy(rows), args.output, "6-quality-redundancy")
    else:
        print(f"figures: no prepared rows and selections under {args.pipeline}; 4 and 6 "
              "skipped")
    table = os.path.join(args.pipeline, "tables", "table2.csv")
    if os.path.exists(table):
        written += save(pipeline.table2(table), args.output, "7-table2")
    else:
        print(f"figures: no {table}; figure 7 skipped")
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()

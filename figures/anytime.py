"""Figure 3-anytime-<metric>-<N>: every selector of one timing run on the same axes, the
objective on all N rows against wall time (timing.json, one figure per metric and size).

A run with a per-step clock is a curve: the learner's read-off every few steps, a greedy's first
t picks (fewer than k rows: what stopping it then would give, so a greedy's curve ends at its
selection). A run without one (the DiSF greedies) is its final point; an extrapolated or killed
run is a hollow marker at its predicted time on the random selection's level, as it has no
objective. The dotted line is a random selection's objective; the axis starts half the best gain
over random below it, where a greedy's first few picks may fall off.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from reproduce.experiments.records import TimingResult, TimingRun, of_metric

MARKERS = {"learner": "o", "fast": "s", "reference": "D", "scalable": "^"}


def panels(timing: TimingResult) -> list[tuple[str, int]]:
    """(metric, N) of every figure: those where at least one run has an objective."""
    return sorted({(r.metric, r.n) for r in timing.runs if r.objective is not None})


def anytime(timing: TimingResult, metric: str, n: int):
    runs = [r for r in of_metric(timing.runs, metric) if r.n == n]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        color, marker = f"C{i}", MARKERS.get(run.role, "o")
        label = f"{run.label} ({_status(run)})"
        if run.curve:
            ax.plot([p.elapsed_s for p in run.curve], [p.objective for p in run.curve],
                    marker=marker, ms=3, color=color, label=label)
        elif run.objective is not None:
            ax.plot([run.wall_s], [run.objective], marker, color=color, label=label)
        else:
            ax.plot([run.wall_s], [run.random_objective], marker, mfc="none", color=color,
                    label=label)
    random = runs[0].random_objective
    ax.axhline(random, color="grey", ls=":", label="random selection")
    # a greedy's first few picks score far below random: keep the axis on the range that
    # separates the selectors, from half the best gain over random below the random level
    values = [p.objective for r in runs for p in r.curve or []] + [
        r.objective for r in runs if r.objective is not None]
    top = max(values)
    if top > random:
        ax.set_ylim(random - 0.5 * (top - random), top + 0.05 * (top - random))
        ax.text(0.01, 0.01, "points below: a greedy's first picks, the learner's first steps",
                fontsize=7, transform=ax.transAxes)
    ax.set_xscale("log")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel(f"{metric} on all N rows (higher is better)")
    ax.set_title(f"{metric}, N = {n:,}: objective vs wall time")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _status(run: TimingRun) -> str:
    if run.status == "measured":
        return f"{run.wall_s:.3g} s"
    return f"~{run.wall_s:.3g} s, {run.status}"

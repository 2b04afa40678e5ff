"""`make findings`: one report of what holds on this data, claim by claim, from the results files.

    python -m reproduce.experiments.findings [--results runs/experiments]
        [--figures runs/experiments/figures]

It reads timing.json, ablation-<knob>.json (each knob of sweep.KNOBS) and ablation-direct.json,
whichever exist, as their records (records.py), and writes findings.md beside them: every number
in it is read from those files, and a claim whose file is missing says so instead of a verdict.
Each claim is tested by a stated rule, so that a rerun on other data can flip it:

- the learner's time against the reference greedy's (timing), and its objective against each
  greedy's (gain ratio >= 0.95 counts as "as good");
- the learning rate: the best setting per metric, and the useful range (settings whose mean final
  objective is within one seed std of the best's and above the first-step objective); whether the
  highest rate ends below the best (freezes early) and the lowest barely moves (gain under 10% of
  the best's gain over the first step); the best setting over all metrics (lowest mean rank),
  which `datamask select`'s default should be;
- G: the smallest stable G (sweep.smallest_stable), and whether any G below 128 is unstable;
- the exact Plackett-Luce log-probability against the simple one: objective and time ratios;
- one-shot selectors against the learner: the best one-shot per metric and its gap;
- lamb, partial, init and steps: the best value and the range of objectives;
- the learner variants beyond the paper (credit, update, cover_sample, patience, probes; #17): each
  value's gain ratio against the joint greedy per metric, and the learning rate's rule: the value
  with the lowest mean rank over the metrics wins, ties to the paper's value (listed first). A
  stopping rule can only lose objective, so patience has its own rule: of the windows that keep at
  least KEEPS (99%) of the never-stopping run's mean objective on every metric, the one with the
  fewest mean steps wins; none keeping it, 0 (off) stays. DiSF's probes likewise: of the probe
  counts keeping 99% of the exact score's objective, the one with the fewest mean seconds wins;
- downstream (`make downstream`, downstream/tables/table2.json): the verdict of eval/verdict.py's
  rule, fixed before any downstream result (the control separated or not, each method against
  random, the paper's ordering).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from datamask.data import atomic_output
from datamask.errors import UserError
from datamask.learner import DIVERSITY_METRICS
from eval.tables import markdown
from eval.verdict import verdict_markdown

from .common import lr_setting
from .records import (DirectResult, SweepResult, SweepRun, SweepSummary, TimingResult, TimingRun,
                      Value, best_of, of_metric)
from .records import read_result
from .sweep import KNOBS, VARIANT_KNOBS, ratio_and_steps
from .timing import comparison, learner_steps, measured, steps_taken, written_at

AS_GOOD = 0.95  # gain ratio from which the learner counts as good as a greedy
KEEPS = 0.99  # share of the never-stopping run's objective a stopping rule must keep to win


def missing(experiment: str) -> list[str]:
    """The file and the Make target share the experiment's name (timing's target says what it
    reproduces)."""
    target = "reproduce-timing" if experiment == "timing" else experiment
    return [f"Not measured: no `{experiment}.json` (run `make {target}`).", ""]


def figure(figures: str, results: str, name: str) -> list[str]:
    """A Markdown image line with a path relative to findings.md, if the figure exists."""
    path = os.path.join(figures, f"{name}.png")
    if not os.path.exists(path):
        return []
    return [f"![{name}]({os.path.relpath(path, results)})", ""]


def verdict(holds: bool) -> str:
    return "**holds**" if holds else "**does not hold**"


def section(heading: str | None, experiment: str, result, claims: Callable) -> list[str]:
    """`heading`, then `claims(result)`, or a line that says the experiment was not run."""
    lines = [heading, ""] if heading else []
    return lines + (missing(experiment) if result is None else claims(result) + [""])


def timing_claims(timing: TimingResult) -> list[str]:
    paper = timing.paper
    lines = [f"Paper: DiSF at N = {paper.n:,} on a {paper.device}: the learner took "
              f"{paper.time_ratio:.2%} of the greedy's time.", ""]
    lines += markdown(pd.DataFrame(
        [{"metric": c.metric, "N": f"{c.n:,}", "greedy": c.greedy,
          "greedy status": c.greedy_status, "learner / greedy time": f"{c.time_ratio:.3g}",
          "gain ratio": "-" if c.gain_ratio is None else f"{c.gain_ratio:.3f}"}
         for c in timing.comparisons]),
        right=("N", "learner / greedy time", "gain ratio")).splitlines() + [""]
    disf_reference = [c for c in of_metric(timing.comparisons, "DiSF")
                      if c.greedy_role == "reference"]
    if disf_reference:
        largest = best_of(disf_reference, key=lambda c: c.n)
        lines.append(f"- Claim: on DiSF the learner takes a small fraction of the reference greedy's "
                     f"time. At N = {largest.n:,} it took {largest.time_ratio:.2%} "
                     f"({largest.greedy_status} greedy time; paper {paper.time_ratio:.2%}): "
                     f"{verdict(largest.time_ratio < 0.1)} (rule: under 10%).")
    for metric in timing.metrics:
        measured = [c for c in of_metric(timing.comparisons, metric) if c.gain_ratio is not None]
        if not measured:
            continue
        good = [c for c in measured if c.gain_ratio >= AS_GOOD]
        lines.append(f"- Claim: on {metric} the learner's objective is as good as the greedies' "
                     f"(gain ratio >= {AS_GOOD}): {len(good)} of {len(measured)} measured "
                     f"comparisons; {verdict(len(good) == len(measured))}. Gain ratios: "
                     + ", ".join(f"{c.greedy} N={c.n:,}: {c.gain_ratio:.2f}"
                                 for c in measured) + ".")
        cross = timing.crossover.get(metric)
        faster = [c.n for c in of_metric(timing.comparisons, metric)
                  if c.greedy_role == "fast" and c.time_ratio < 1]
        lines.append(f"- {metric}: the learner is faster than the fast greedy at "
                     + ("N = " + ", ".join(f"{n:,}" for n in faster) if faster
                        else "none of the sizes")
                     + "; " + (f"crossover: from N = {cross:,} on." if cross else
                               "no crossover (no N from which it stays faster)."))
    return lines


def useful_range(rows: list[SweepSummary]) -> tuple[SweepSummary, list[SweepSummary]]:
    """The best row by mean objective, and the rows within one seed std of it that also ended
    above their first-step objective."""
    best = best_of(rows)
    floor = best.objective_mean - max(best.objective_std, 1e-12)
    return best, [s for s in rows if s.objective_mean >= floor and s.objective_mean > s.start_mean]


def lr_claims(result: SweepResult) -> list[str]:
    default = lr_setting()
    lines = [f"Settings as schedule:max_lr:min_lr; N = {result.config['n']:,}, "
              f"{result.config['steps']} steps, seeds {result.config['seeds']}. "
              f"`datamask select` default: {default}.", ""]
    table, claims, in_range = [], [], []
    for metric in result.metrics:
        rows = of_metric(result.summary, metric)
        best, useful = useful_range(rows)
        max_lr = {s.value: float(s.value.split(":")[1]) for s in rows}
        highest = best_of(rows, key=lambda s: max_lr[s.value])
        lowest = min(rows, key=lambda s: max_lr[s.value])
        greedy = next(iter(of_metric(result.greedy, metric)), None)
        table.append({"metric": metric, "best": best.value,
                      "its objective": f"{best.objective_mean:.3f} +- {best.objective_std:.3f}",
                      "useful range (within 1 std of the best)": ", ".join(s.value for s in useful),
                      "highest max_lr": f"{highest.objective_mean:.3f} ({highest.value})",
                      "lowest max_lr": f"{lowest.objective_mean:.3f} ({lowest.value})",
                      "joint greedy": f"{greedy.objective:.3f}" if greedy else "-"})
        best_gain = best.objective_mean - best.start_mean
        lowest_gain = lowest.objective_mean - lowest.start_mean
        frozen = highest.objective_mean < best.objective_mean - best.objective_std
        claims.append(
            f"- {metric}: too high a rate ends below the best, by more than one std "
            f"({highest.value}: {highest.objective_mean:.3f} vs "
            f"{best.objective_mean:.3f}): {verdict(frozen)}; too low a rate barely moves "
            f"from its first step ({lowest.value}: gain {lowest_gain:.3f} vs the best's "
            f"{best_gain:.3f}; rule: under 10%): "
            + (verdict(lowest_gain < 0.1 * best_gain) if best_gain > 0
               else "not testable (the best setting did not gain over its first step)") + ".")
        in_range.append(default in {s.value for s in useful})
    overall = overall_best(result)
    lines += markdown(pd.DataFrame(table), right=("its objective", "highest max_lr",
                                                  "lowest max_lr", "joint greedy")).splitlines()
    lines += ["", *claims,
              f"- The default {default} is in the useful range for "
              f"{sum(in_range)} of {len(in_range)} metrics.",
              f"- Best setting over all metrics (lowest mean rank of the final objective): "
              f"{overall}; `datamask select`'s default "
              + ("is that setting." if overall == default else f"({default}) is not.")]
    return lines


def overall_best(result: SweepResult) -> Value:
    """The value with the lowest mean rank (1 = best objective, equal objectives ranked in the
    order listed) across the metrics; ties go to the value listed first."""
    rows = [s for s in result.summary if s.metric in result.metrics]
    summary = pd.DataFrame(rows)
    rank = summary.groupby("metric")["objective_mean"].rank(ascending=False, method="first")
    return rows[rank.groupby(summary["value"]).transform("mean").idxmin()].value


def steps_claims(result: SweepResult) -> list[str]:
    table = pd.DataFrame(
        [{"metric": s.metric, "steps": f"{s.value:g}",
          "objective": f"{s.objective_mean:.3f} +- {s.objective_std:.3f}",
          "wall s": f"{s.wall_s_mean:.3g}"} for s in result.summary])
    return ["Steps (n_epochs) against the final objective and wall time:", "",
            *markdown(table, right=("steps", "objective", "wall s")).splitlines()]


def g_claims(result: SweepResult) -> list[str]:
    lines = []
    for metric in result.metrics:
        rows = of_metric(result.summary, metric)
        unstable = [s.value for s in rows if not s.stable]
        # the paper's claim separates G: unstable somewhere below 128, stable from 128 on
        holds = any(g < 128 for g in unstable) and all(g < 128 for g in unstable)
        smallest = result.smallest_stable[metric]
        lines.append(f"- {metric}: smallest stable G "
                     f"{'none' if smallest is None else f'{smallest:g}'}; paper's claim that G "
                     f"below 128 diverges (unstable below 128, stable from 128 on): "
                     f"{verdict(holds)}"
                     + (f" (unstable: {', '.join(f'{g:g}' for g in unstable)})" if unstable
                        else "")
                     + "; objective by G: " + ", ".join(
                         f"{s.value:g}: {s.objective_mean:.3f}" for s in rows) + ".")
    return lines


def logprob_claims(result: SweepResult) -> list[str]:
    lines = []
    for metric in result.metrics:
        rows = {s.value: s for s in of_metric(result.summary, metric)}
        simple, exact = rows.get("simple"), rows.get("exact")
        if not (simple and exact):
            continue
        gap = exact.objective_mean - simple.objective_mean
        noise = max(simple.objective_std, exact.objective_std)
        lines.append(f"- {metric}: exact {exact.objective_mean:.3f} vs simple "
                     f"{simple.objective_mean:.3f} (difference {gap:+.3f}, seed std "
                     f"{noise:.3f}); time exact / simple "
                     f"{exact.wall_s_mean / simple.wall_s_mean:.2f}. Claim: the "
                     f"simplification costs nothing (difference within one std): "
                     f"{verdict(gap <= noise)}.")
    return lines


def direct_claims(result: DirectResult, learner_label: str = "datamask") -> list[str]:
    lines = []
    for metric in result.metrics:
        rows = {s.method: s for s in of_metric(result.summary, metric)}
        learner = rows.get(learner_label)
        if learner is None:
            continue
        best = best_of(s for m, s in rows.items() if m not in (learner_label, "joint-greedy"))
        close = best.objective_mean >= learner.objective_mean - learner.objective_std
        greedy = rows.get("joint-greedy")
        lines.append(f"- {metric}: learner {learner.objective_mean:.3f} in "
                     f"{learner.wall_s_mean:.3g} s; best one-shot {best.method} "
                     f"{best.objective_mean:.3f} in {best.wall_s_mean:.3g} s"
                     + (f"; joint greedy {greedy.objective_mean:.3f} in "
                        f"{greedy.wall_s_mean:.3g} s" if greedy else "")
                     + f". Claim: a one-shot method comes within one seed std of the learner: "
                     f"{verdict(close)}.")
    return lines


def lamb_claims(result: SweepResult) -> list[str]:
    """Objectives at different lamb are different functions: the claim is the trade-off itself."""
    lines = [f"lamb (paper: {result.paper}; quality goes up and diversity down with lamb):", ""]
    for metric in result.metrics:
        rows = sorted(of_metric(result.summary, metric), key=lambda s: s.value)
        low, high = rows[0].means, rows[-1].means
        holds = high["quality"] > low["quality"] and low[metric] > high[metric]
        lines.append(f"- {metric}: lamb {rows[0].value:g} -> {rows[-1].value:g}: mean quality "
                     f"{low['quality']:.3f} -> {high['quality']:.3f}, {metric} "
                     f"{low[metric]:.4g} -> {high[metric]:.4g}: "
                     f"{verdict(holds)}.")
    return lines


def knob_claims(result: SweepResult) -> list[str]:
    knob = result.knob
    lines = [f"{knob} (paper: {result.paper}):", ""]
    for metric in result.metrics:
        values = np.array([s.objective_mean for s in of_metric(result.summary, metric)])
        lines.append(f"- {metric}: best {knob} = {result.best[metric]}; final objective from "
                     f"{values.min():.3f} to {values.max():.3f} across values.")
    return lines


def variant_claims(result: SweepResult) -> list[str]:
    """One variant knob: gain ratio and steps per value and metric, and the rank rule's verdict."""
    paper_value = result.config["values"][0]
    table = []
    for s in result.summary:
        ratio, steps = ratio_and_steps(result, s)
        table.append({"metric": s.metric, "value": str(s.value),
                      "objective": f"{s.objective_mean:.3f} +- {s.objective_std:.3f}",
                      "gain ratio": ratio, "wall s": f"{s.wall_s_mean:.3g}", "steps": steps})
    lines = [f"`--{result.knob}` ({result.paper}; {paper_value} is the paper's):", "",
             *markdown(pd.DataFrame(table),
                       right=("objective", "gain ratio", "wall s", "steps")).splitlines()]
    if result.knob in COST_CUTTERS:
        cost, which, baseline = COST_CUTTERS[result.knob]
        overall = cheapest_keeping(result, cost)
        rule = (f"Fewest mean {which} among the values keeping >= {KEEPS:.0%} of the "
                f"{baseline}'s objective on every metric")
    else:
        overall = overall_best(result)
        rule = f"Lowest mean rank over {', '.join(result.metrics)}"
    lines += ["", f"- {rule}: {overall}; "
              + ("the paper's value stays." if overall == paper_value
                 else f"**{overall} wins** over the paper's {paper_value}.")]
    return lines


def cheapest_keeping(result: SweepResult, cost: str):
    """The verdict of a knob that can only lose objective to save time (the stopping rule,
    DiSF's probes): the value (the first listed is the exact, never-stopping one) with the least
    mean `cost` (the runs' 'steps_taken' or 'wall_s'), over all metrics and seeds, among those
    whose mean objective is at least KEEPS of the first value's on every metric (objectives are
    gains over a random selection); that value itself when no other keeps it."""
    exact, *cheaper = result.config["values"]
    objective = {(s.metric, s.value): s.objective_mean for s in result.summary}
    kept = [value for value in cheaper
            if all(objective[m, value] >= KEEPS * objective[m, exact] for m in result.metrics)]
    spent = {value: np.mean([getattr(r, cost) for r in result.runs if r.value == value])
             for value in kept}
    return min(kept, key=lambda value: spent[value]) if kept else exact


# knobs that trade objective for time -> (what they save, its words, what they are held against)
COST_CUTTERS = {"patience": ("steps_taken", "steps", "never-stopping run"),
                "probes": ("wall_s", "seconds", "exact score")}


SCALE_GOALS = "scale-goals"  # issue 17's goal runs, each a timing run in its own folder
PAIR_GOAL, FACILITY_GOAL = 0.99, 0.95  # the issue's gain-ratio goals

# the comparisons where every metric ran in one timing run: folder, what it is, sizes reported
ONE_RUN_COMPARISONS = (
    ("onerun-1m", "Every metric at N = 1,000,000 in one run", (1_000_000,)),
    ("timing-scale", "`make reproduce-timing-scale TIMING_BUDGET=1800 TIMING_REPEATS=1` whole",
     (20_000, 100_000, 1_000_000)))


def scale_goal_timing(results: str, folder: str | None) -> TimingResult | None:
    """The timing run in `scale-goals/<folder>/`; None where it is absent or no folder is named."""
    return folder and read_result(os.path.join(results, SCALE_GOALS, folder), "timing")


def timing_run(result: TimingResult | None, metric: str, n: int, label: str) -> TimingRun | None:
    """The measured run of `label` at (metric, n) in a timing result, if there is one."""
    return next((r for r in measured(result.runs if result else [], metric, label)
                 if r.n == n), None)


def goal_verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def scale_goal_claims(results: str) -> list[str]:
    """Issue 17's goals, each from the runs `scale-goals/plan.md` fixed before they ran (a run
    whose folder is missing says so): Pair_simi's gain at 20k and 100k (`scale-pair2000`),
    DiSF's final time against `disf-greedy-fast` at 100k and 1M, Facility's gain against the
    lazy greedy at 20k, and the cost of a Facility learner step against the sparse greedies'
    whole run at 100k, carried to 1M (the step by N², each greedy by its own fitted law); then
    every metric from one run, at 1M (`onerun-1m`) and at 20k-1M (`timing-scale`)."""
    folder = os.path.join(results, SCALE_GOALS)
    run = {name: read_result(os.path.join(folder, name), "timing")
           for name in ("disf-stop", "disf-1m", "disf-1m-greedy", "facility-20k/default",
                        "facility-20k/cover", "facility-100k", "pair-1m", "disf-probes",
                        "disf-chunks-100k", "disf-chunks-1m",
                        *(name for name, _, _ in ONE_RUN_COMPARISONS))}
    run["scale-pair2000"] = read_result(os.path.join(results, "scale-pair2000"), "timing")
    lines = [f"Plans and verdict rules: `{SCALE_GOALS}/plan.md`, written before the runs.", ""]
    for n in (20_000, 100_000):
        lines.append(gain_goal_claim(run, "scale-pair2000", "Pair_simi", n, "pair-greedy",
                                     PAIR_GOAL))
    lines += at_scale_claims(run["pair-1m"], "Pair_simi", "pair-1m")
    for n, name, greedy_name in ((100_000, "disf-stop", "disf-stop"),
                                 (1_000_000, "disf-1m", "disf-1m-greedy"),
                                 (100_000, "disf-probes", "disf-probes"),
                                 (100_000, "disf-chunks-100k", "disf-chunks-100k"),
                                 (1_000_000, "disf-chunks-1m", "disf-chunks-1m")):
        learner = timing_run(run[name], "DiSF", n, "datamask")
        greedy = timing_run(run[greedy_name], "DiSF", n, "disf-greedy-fast")
        if not (learner and greedy):
            folders = dict.fromkeys((name, greedy_name))  # one folder or two, in order
            lines.append(f"- DiSF at N = {n:,}: not measured ("
                         + ", ".join(f"`{folder}/`" for folder in folders) + ").")
            continue
        probes = learner.params.get("probes")
        versus = comparison(learner, greedy)  # across two runs at 1M: the greedy ran alone
        ratio, passed = versus.time_ratio, versus.time_to_greedy_objective_s
        lines.append(f"- DiSF at N = {n:,}" + (f" with `--probes {probes}`" if probes else "")
                     + f" (`{name}/`): the learner ends in {learner.wall_s:.4g} s "
                     f"({steps_taken(learner)} steps), {ratio:.2f}x `disf-greedy-fast`'s "
                     f"{greedy.wall_s:.4g} s, at gain ratio {versus.gain_ratio:.2f}; final "
                     f"time <= the greedy's at a better objective: "
                     f"{goal_verdict(ratio <= 1 and versus.gain_ratio > 1)}. Its curve "
                     + ("never reaches the greedy's objective." if passed is None else
                        f"is past the greedy's objective at {passed:.4g} s "
                        f"({passed / greedy.wall_s:.0%} of the greedy's time)."))
    for name in ("disf-stop", "disf-chunks-100k"):  # exact; 64 probes with the CPU chunk cap
        lines += disf_steps_claims(run[name], name)
    for name in ("facility-20k/default", "facility-20k/cover"):
        greedy = timing_run(run[name], "Facility", 20_000, "facility-greedy lazy")
        if greedy and name.endswith("default"):
            lines.append(f"- Facility at N = 20,000, the room a learner has: a random selection "
                         f"covers {greedy.random_objective:.4f}, the lazy greedy "
                         f"{greedy.objective:.4f}; the whole gain is "
                         f"{(greedy.objective - greedy.random_objective) / greedy.objective:.2%} "
                         "of the objective.")
        lines.append(gain_goal_claim(run, name, "Facility", 20_000, "facility-greedy lazy",
                                     FACILITY_GOAL))
        lines += pace_claims(run[name], name, "Facility", 20_000, "facility-greedy lazy",
                             FACILITY_GOAL)
    lines += facility_step_claims(run["facility-100k"])
    for name, what, sizes in ONE_RUN_COMPARISONS:
        lines += ["", f"{what} (`{name}/`, no goal of its own, the goal runs' verdicts stand):",
                  ""]
        for n in sizes:
            for metric in ("DiSF", "Facility", "Pair_simi"):
                lines += at_scale_claims(run[name], metric, name, n)
    return lines + [""]


def gain_goal_claim(run: dict, name: str, metric: str, n: int, label: str, goal: float) -> str:
    """A gain-ratio goal: the learner of run `name` against its greedy `label` at (metric, n)."""
    learner = timing_run(run[name], metric, n, "datamask")
    greedy = timing_run(run[name], metric, n, label)
    outcome = "not measured."
    if learner and greedy:
        gain = comparison(learner, greedy).gain_ratio
        outcome = (f"{gain:.3f} at {steps_taken(learner)} steps ({learner.wall_s:.4g} s against "
                   f"{greedy.wall_s:.3g} s), {goal_verdict(gain >= goal)}.")
    return f"- {metric} at N = {n:,} (`{name}/`): learner >= {goal} of `{label}`'s gain: {outcome}"


def pace_claims(result: TimingResult | None, folder: str, metric: str, n: int, label: str,
                goal: float, window: int = 500) -> list[str]:
    """Why a learner ends short of a gain goal: its gain ratio (against `label`, read off its
    curve) `window` steps before its last step and at it, and, at that pace, the steps and
    seconds still needed: a curve still rising is short of steps, a flat one of a better
    update."""
    learner, greedy = timing_run(result, metric, n, "datamask"), timing_run(result, metric, n,
                                                                            label)
    if not (learner and greedy and learner.curve):
        return []
    last = learner.curve[-1]
    before = next(p for p in learner.curve if p.step >= last.step - window)
    gain = [comparison(replace(learner, objective=p.objective), greedy).gain_ratio
            for p in (before, last)]
    line = (f"- {metric} at N = {n:,}, why (`{folder}/`): gain ratio {gain[0]:.3f} at step "
            f"{before.step}, {gain[1]:.3f} at step {last.step}")
    pace = (gain[1] - gain[0]) / (last.step - before.step)
    if gain[1] >= goal or pace <= 0:
        return [line + "."]
    more = (goal - gain[1]) / pace
    return [line + f": still rising; at that pace {goal} takes ~{more:,.0f} more steps "
            f"(~{more * last.elapsed_s / last.step:,.0f} s more, against the greedy's whole "
            f"{greedy.wall_s:.3g} s)."]


def disf_steps_claims(result: TimingResult | None, folder: str) -> list[str]:
    """Why DiSF's final time falls behind as N grows: the steps the stopping rule let each run
    take, and the seconds each step cost."""
    learners = sorted((r for r in (result.runs if result else [])
                       if r.metric == "DiSF" and r.role == "learner" and r.status == "measured"),
                      key=lambda r: r.n)
    if not learners:
        return []
    return [f"- DiSF, why (`{folder}/`): steps to the stopping rule's plateau and seconds a "
            "step, by N: "
            + "; ".join(f"{r.n:,}: {steps_taken(r)} steps, {r.wall_s / steps_taken(r):.3g} s"
                        for r in learners) + "."]


def at_scale_claims(result: TimingResult | None, metric: str, folder: str,
                    n: int = 1_000_000) -> list[str]:
    """The learner against each greedy at `n` in one timing run (no goal: the issue asks for the
    comparison): gain ratio where the greedy ran, time ratio, and when the learner's curve
    reached the greedy's final objective; where the learner was not run, its extrapolated time
    and each greedy's measured time and objective."""
    runs = [r for r in (result.runs if result else []) if (r.metric, r.n) == (metric, n)]
    learner = next((r for r in runs if r.role == "learner"), None)
    if learner is None:
        return [f"- {metric} at N = {n:,}: not measured (`{folder}/`)."]
    if learner.status != "measured":
        lines = [f"- {metric} at N = {n:,} (`{folder}/`): the learner was not run, its time "
                 f"extrapolated to ~{learner.wall_s:.3g} s."]
        for r in runs:
            if r.role != "learner":
                done = (f"{r.wall_s:.4g} s, objective {r.objective:.5g} (random "
                        f"{r.random_objective:.5g})" if r.status == "measured"
                        else f"{r.status}, ~{r.wall_s:.3g} s")
                lines.append(f"  `{r.label}`: {done}.")
        return lines
    lines = [f"- {metric} at N = {n:,} (`{folder}/`): the learner takes {learner.wall_s:.4g} s "
             f"({steps_taken(learner)} steps)."]
    for c in (c for c in result.comparisons if (c.metric, c.n) == (metric, n)):
        if c.gain_ratio is None:
            lines.append(f"  `{c.greedy}`: {c.greedy_status}, learner / greedy time "
                         f"{c.time_ratio:.3g}.")
            continue
        reached = ("never reached" if c.time_to_greedy_objective_s is None
                   else f"reached after {c.time_to_greedy_objective_s:.3g} s")
        lines.append(f"  `{c.greedy}`: gain ratio {c.gain_ratio:.3f}, learner / greedy time "
                     f"{c.time_ratio:.3g}; its objective {reached}.")
    return lines


def carried_step(learner: TimingRun, target: int) -> float:
    """One learner step's seconds at `target` rows, carried from its run by N^2 (a dense
    Facility step's work: every sampled row against every covered row)."""
    return learner.wall_s / steps_taken(learner) * (target / learner.n) ** 2


def facility_step_claims(result: TimingResult | None, n: int = 100_000,
                         target: int = 1_000_000) -> list[str]:
    """One Facility learner step at `n` against each sparse greedy's whole run there, and both
    carried to `target` rows: the step by (target / n)^2, the greedy by its fitted power law."""
    learner = timing_run(result, "Facility", n, "datamask")
    if learner is None:
        return [f"- Facility at N = {target:,}: not measured (`facility-100k/`)."]
    step = learner.wall_s / steps_taken(learner)
    lines = [f"- Facility at N = {target:,}, why the learner is not compared there: at N = {n:,} "
             f"one learner step takes {step:.3g} s, carried to {target:,} by N^2 "
             f"{carried_step(learner, target):.3g} s."]
    for label in ("facility-knn-greedy lazy", "facility-knn-greedy stochastic"):
        greedy, fit = timing_run(result, "Facility", n, label), result.fits["Facility"].get(label)
        if greedy and fit:
            lines.append(f"  `{label}`: {greedy.wall_s:.3g} s for its whole run at {n:,}, "
                         f"~{fit.predict(target):.3g} s at {target:,} (N^{fit.exponent:.2f}): "
                         f"{fit.predict(target) / carried_step(learner, target):.1f} learner steps "
                         "in its time.")
    return lines


STOP_LOSS = 0.005  # issue 30: no metric gives up more than 0.5% of its fixed-steps objective
STOP_FOLDER = "ablation-stop"  # `make ablation-stop`: one sweep per size, in n<N>/
STOP_DISF_D1 = "disf-init-greedy"  # scale-goals run 20: DiSF alone from lever D1's start, n<N>/
STOP_COMMAND = ("python -m reproduce.experiments.sweep --knob stop --seeds 0 1 2 --n <N> --dim 32 "
                "--clusters 30 --steps 2000")  # make ablation-stop's, one size
STOP_D1_COMMAND = (f"{STOP_COMMAND} --metrics DiSF --init greedy --output "
                   f"reproduce/results/{STOP_FOLDER}/{STOP_DISF_D1}/n<N>")
# lever S2 (scale-goals/plan.md runs 23-24): the stall tested on the checks' own read-offs
STALL_LEVER = "stall-on-checks"  # ablation-stop/<it>/n<N>/: run 23, every metric
STALL_FLAG = "--stall_on checks"
STALL_COMMAND = (f"{STOP_COMMAND} {STALL_FLAG} --output "
                 f"reproduce/results/{STOP_FOLDER}/{STALL_LEVER}/n<N>")


def stop_kept(results: str, lever: bool | None = None) -> tuple[list[dict], float | None, tuple]:
    """`make ablation-stop`'s table (per size and metric the rule's mean objective over the fixed
    steps', and its mean wall time over theirs, and the sweep it comes from), the worst objective
    kept (None: not run) and the two `--stop_every` values compared (fixed, rule). Once lever D1
    is DiSF's default, DiSF's rows are run 20's, at that default; once lever S2 is select's
    default (or with `lever` True), every row is run 23's (`STALL_LEVER/`)."""
    lever = stall_lever_adopted(results) if lever is None else lever
    folder = os.path.join(results, STOP_FOLDER, STALL_LEVER) if lever else os.path.join(
        results, STOP_FOLDER)
    sizes = sorted((int(name[1:]), name) for name in (os.listdir(folder)
                   if os.path.isdir(folder) else []) if re.fullmatch(r"n\d+", name))
    table, worst, values = [], None, ()
    adopted = not lever and disf_lever_adopted(results)
    prefix = f"{STALL_LEVER}/" if lever else ""
    for n, name in sizes:
        sweeps = {metric: name for metric in DIVERSITY_METRICS}
        if adopted and os.path.isdir(os.path.join(folder, STOP_DISF_D1, name)):
            sweeps["DiSF"] = f"{STOP_DISF_D1}/{name}"
        read = {sweep: read_result(os.path.join(folder, sweep), "ablation-stop")
                for sweep in set(sweeps.values())}  # each sweep's file once
        for metric, sweep in sweeps.items():
            result = read[sweep]
            rows = {(s.metric, s.value): s for s in result.summary}
            values = fixed, rule = result.config["values"]  # the first listed never stops
            if (metric, rule) not in rows:
                continue
            kept = rows[metric, rule].objective_mean / rows[metric, fixed].objective_mean
            worst = kept if worst is None else min(worst, kept)
            time = rows[metric, rule].wall_s_mean / rows[metric, fixed].wall_s_mean
            table.append({"rows": f"{n:,}", "metric": metric, "objective kept": f"{kept:.4f}",
                          "time": f"{time:.2f}", "sweep": f"`{prefix}{sweep}/`"})
    return table, worst, values


def stop_claims(results: str) -> list[str]:
    """The stopping rule against fixed steps (`make ablation-stop`), and the issue's bound."""
    lever = stall_lever_adopted(results)
    table, worst, values = stop_kept(results, lever)
    if worst is None:
        return missing("ablation-stop")
    fixed, rule = values
    source = (f"`{STALL_LEVER}/`: every metric at select's defaults since lever S2, "
              f"scale-goals/plan.md run 23: `{STALL_COMMAND}`" if lever else
              f"`{STOP_DISF_D1}/`: DiSF alone from lever D1's greedy start, scale-goals/plan.md "
              f"run 20: `{STOP_D1_COMMAND}`")
    return [f"The stopping rule (`--stop_every {rule:g}`) against fixed steps (`--stop_every "
            f"{fixed:g}`) (`{STOP_FOLDER}/`; objective and time: the rule's means over the fixed "
            "steps'):", "",
            *markdown(pd.DataFrame(table), right=("rows", "objective kept", "time")).splitlines(),
            "", f"({source}.)",
            "", f"- No metric gives up more than {STOP_LOSS:.1%} of its fixed-steps objective: "
            f"{goal_verdict(worst >= 1 - STOP_LOSS)} (worst kept {worst:.4f}).", ""]


FACILITY_LEVERS = "facility-levers"  # issue 30, section 2: its plan.md fixed the rule
# label, folder, the value of the folder's knob the lever is (the baseline is L0)
LEVERS = (("L0 baseline (select's defaults)", "stop", 50.0),
          ("L6 fixed steps", "stop", 0.0), ("L1 partial 1, row credit", "credit-p1", "row"),
          ("L2 partial 1, mask credit", "credit-p1", "mask"),
          ("L3 cover sample 0.04", "cover_sample", 0.04), ("L4 G 512", "G", 512.0),
          ("L5 lr linear:30:3", "lr", "linear:30:3"),
          ("L7 row credit, cover sample 0.04", "credit-row-cover", "row"),
          ("L8 init greedy", "init-greedy", "greedy"))


def lever_runs(folder: str, value) -> list[tuple[float, SweepRun]] | None:
    """(gain ratio, run) per seed of one lever's runs, the ratio being the objective over the
    lazy greedy's (random's mean is 0 on this scale); None when its folder holds no results."""
    files = glob.glob(os.path.join(folder, "ablation-*.json"))
    if not files:
        return None
    result = read_result(folder, os.path.splitext(os.path.basename(files[0]))[0])
    greedy = result.greedy[0].objective
    return [(r.objective / greedy, r) for r in result.runs if r.value == value]


def lever_ratios(folder: str, value) -> list[float] | None:
    runs = lever_runs(folder, value)
    return None if runs is None else [ratio for ratio, _ in runs]


def screen_bar(base: list[float]) -> float:
    """Rule 1 of plan.md: a lever must beat the baseline's median by its seed range."""
    return float(np.median(base)) + (max(base) - min(base))


def confirmed(base: list[float], lever: list[float], base_20k: float | None,
              lever_20k: float | None) -> bool:
    """Rule 3 of plan.md: above rule 1's bar at 3,000 rows and above the baseline at 20,000."""
    return (np.median(lever) > screen_bar(base) and None not in (base_20k, lever_20k)
            and lever_20k > base_20k)


# addendum 2's round: L9 against the default it would replace, both in each invocation
START_LEVER, START_FOLDER, START_VALUE, START_BASE = ("L9 best from start", "best-from-start",
                                                      "start", "check")


def start_round(root: str) -> dict | None:
    """Addendum 2's runs, per value (`check`, `start`): the (gain ratio, run) of each seed at
    3,000 rows and of seed 0 at 20,000 (None: not run); None when the screen did not run."""
    screen = {value: lever_runs(os.path.join(root, START_FOLDER), value)
              for value in (START_BASE, START_VALUE)}
    if not screen[START_VALUE]:
        return None
    confirm = {value: (lever_runs(os.path.join(root, "confirm-20k", START_FOLDER), value)
                       or [None])[0] for value in (START_BASE, START_VALUE)}
    return {"screen": screen, "confirm": confirm}


def start_ratios(outcome: dict, value: str) -> tuple[list[float], float | None]:
    """One value's gain ratios in addendum 2's round: per seed at 3,000 rows, and at 20,000."""
    confirm = outcome["confirm"][value]
    return [ratio for ratio, _ in outcome["screen"][value]], confirm and confirm[0]


def start_default(outcome: dict) -> str:
    """The `--best_from` value that rule 3 leaves as Facility's default after addendum 2."""
    (base, base_20k), (lever, at_20k) = (start_ratios(outcome, v) for v in (START_BASE,
                                                                           START_VALUE))
    return START_VALUE if confirmed(base, lever, base_20k, at_20k) else START_BASE


def start_lever_claims(root: str) -> list[str]:
    """Addendum 2 of plan.md: `--best_from start` against `check` (round 2's default) at 3,000
    rows, seeds 0-2, then at 20,000, seed 0; adopted as `auto` if above both bars."""
    outcome = start_round(root)
    if outcome is None:
        return [f"- {START_LEVER} (addendum 2): not run (no `{START_FOLDER}/`).", ""]
    screen, confirm = outcome["screen"], outcome["confirm"]
    (base, base_20k), (lever, at_20k) = (start_ratios(outcome, v) for v in (START_BASE,
                                                                           START_VALUE))
    written = ", ".join(str(run.best_step) for _, run in screen[START_VALUE])
    lines = [f"- {START_LEVER} (addendum 2, against the default `--best_from {START_BASE}`, "
             f"`{START_FOLDER}/`): at 3,000 rows {', '.join(f'{r:.3f}' for r in lever)} "
             f"(median {np.median(lever):.3f}) against {', '.join(f'{r:.3f}' for r in base)} "
             f"(median {np.median(base):.3f}, bar {screen_bar(base):.3f}); written at step "
             f"{written} (0: the greedy's picks, unimproved)."]
    if confirm[START_VALUE] and confirm[START_BASE]:
        lines.append(f"- At 20,000 rows, seed 0: {START_LEVER} {at_20k:.3f} (written at step "
                     f"{confirm[START_VALUE][1].best_step}) against {base_20k:.3f}.")
    else:
        lines.append(f"- At 20,000 rows: no result (killed at the plan's 10 minutes, or not "
                     "run): not confirmed.")
    if start_default(outcome) == START_VALUE:
        met = min(np.median(lever), at_20k) >= FACILITY_GOAL
        lines.append(f"- Rule 3: {START_LEVER} becomes Facility's default (`--best_from auto`). "
                     f"Facility >= {FACILITY_GOAL} of the lazy greedy's gain at 3,000 and 20,000 "
                     f"rows: {goal_verdict(met)} ({np.median(lever):.3f} and {at_20k:.3f}).")
    else:
        lines.append(f"- Rule 3: {START_LEVER} is not confirmed; `--best_from {START_BASE}` "
                     "stays.")
    return lines + [""]


def facility_lever_claims(results: str) -> list[str]:
    """The screen at 3,000 rows and the confirm at 20,000 of plan.md, by its rule."""
    root = os.path.join(results, FACILITY_LEVERS)
    if not os.path.isdir(root):
        return missing(f"{FACILITY_LEVERS}/")
    screen = {label: lever_ratios(os.path.join(root, folder), value)
              for label, folder, value in LEVERS}
    screen = {label: ratios for label, ratios in screen.items() if ratios}
    base = screen[LEVERS[0][0]]
    bar = screen_bar(base)
    table = [{"lever": label, "gain ratio per seed": ", ".join(f"{r:.3f}" for r in ratios),
              "median": f"{np.median(ratios):.3f}"} for label, ratios in screen.items()]
    winner = max(screen, key=lambda label: np.median(screen[label]))
    lines = [f"Facility's levers at 3,000 x 32-d rows, lamb 0, seeds 0-2 (`{FACILITY_LEVERS}/`, "
             "rule in its plan.md; gain ratio over the lazy greedy):", "",
             *markdown(pd.DataFrame(table), right=("median",)).splitlines(), "",
             f"- Screen: {winner} has the highest median"
             + (f", above the baseline's median + seed range ({bar:.3f})."
                if np.median(screen[winner]) > bar else ", not above the baseline's median + seed "
                f"range ({bar:.3f}): the baseline stays.")]
    confirm = os.path.join(root, "confirm-20k")
    folders = {label: (folder, value) for label, folder, value in LEVERS}
    at_20k = {}
    for label in dict.fromkeys([LEVERS[0][0], winner, LEVERS[-1][0]]):
        folder, value = folders[label]
        ratios = lever_ratios(os.path.join(confirm, "baseline" if label == LEVERS[0][0]
                                           else folder), value)
        at_20k[label] = ratios[0] if ratios else None
        lines.append(f"- At 20,000 rows, seed 0, {label}: "
                     + (f"gain ratio {ratios[0]:.3f}." if ratios else
                        "no result (killed at the plan's 10 minutes, or not run): not confirmed."))
    # rule 3 (and the addendum's L8): a candidate above the bar at 3,000 and above the baseline
    # at 20,000 becomes Facility's default; the goal needs both ratios at FACILITY_GOAL
    base_20k = at_20k[LEVERS[0][0]]
    adopted = [label for label in (winner, LEVERS[-1][0])
               if label in screen and confirmed(base, screen[label], base_20k, at_20k.get(label))]
    if adopted:
        best = max(adopted, key=lambda label: np.median(screen[label]))
        met = min(np.median(screen[best]), at_20k[best]) >= FACILITY_GOAL
        lines.append(f"- Rule 3: {best} becomes Facility's default (it beats the baseline at "
                     f"3,000 and at 20,000 rows). Facility >= {FACILITY_GOAL} of the lazy "
                     f"greedy's gain at 3,000 and 20,000 rows: {goal_verdict(met)} "
                     f"({np.median(screen[best]):.3f} and {at_20k[best]:.3f}).")
    else:
        lines.append("- Rule 3: no lever is confirmed; the baseline stays. Facility >= "
                     f"{FACILITY_GOAL} of the lazy greedy's gain: {goal_verdict(False)}.")
    return lines + start_lever_claims(root)


# issue 30's Pair_simi runs (scale-goals/plan.md runs 15 and 16): select's rule from equal logits,
# then lever P1, the greedy start select's --init auto now takes for Pair_simi
PAIR_RULE = ("python -m reproduce.experiments.timing --sizes 1000 2000 5000 20000 100000 "
             "--metrics Pair_simi --steps 2000 --stop_every 50 --repeats 1 --budget_s 300")
PAIR_BASE, PAIR_LEVER, PAIR_SIZES = "pair-rule", "pair-init-greedy", (5_000, 20_000, 100_000)


def pair_lever_claims(results: str) -> list[str]:
    """Lever P1 (plan.md run 16) against run 15 at each size, by the addendum's rule: P1 becomes
    Pair_simi's `--init auto` if its gain ratio is at least PAIR_GOAL and at least run 15's at
    every size."""
    run = {name: scale_goal_timing(results, name) for name in (PAIR_BASE, PAIR_LEVER)}
    rows, adopted = [], True
    for n in PAIR_SIZES:
        base, lever = ((timing_run(run[name], "Pair_simi", n, "datamask"),
                        timing_run(run[name], "Pair_simi", n, "pair-greedy"))
                       for name in (PAIR_BASE, PAIR_LEVER))
        if not (all(base) and all(lever)):
            return [f"- Pair_simi's lever P1 (`{PAIR_LEVER}/` against `{PAIR_BASE}/`): not "
                    f"measured at {n:,} rows.", ""]
        gains = [comparison(*pair).gain_ratio for pair in (base, lever)]
        adopted &= gains[1] >= max(PAIR_GOAL, gains[0])
        rows.append(f"{n:,}: {gains[1]:.3f} against {gains[0]:.3f}, {lever[0].wall_s:.3g} s "
                    f"against {base[0].wall_s:.3g} s, written at step {lever[0].best_step}")
    return [f"- Pair_simi's lever P1, a greedy start (`{PAIR_LEVER}/`, `--init greedy`, against "
            f"`{PAIR_BASE}/`, `--init same`; plan.md run 16): gain ratio against `pair-greedy` "
            "and the learner's time by rows, " + "; ".join(rows) + " (0: the greedy's picks). "
            + (f"By the plan's rule P1 becomes Pair_simi's `--init auto`; the target of "
               f"{PAIR_GOAL} at every size is met." if adopted else
               "By the plan's rule the default stays."), ""]


@dataclass(frozen=True)
class TimingTarget:
    """One of issue 30's timing targets (section 4): the learner of the run in `folder` against
    the greedy `label` (of `greedy_folder` where the greedy ran apart: plan.md run 14b), its gain
    ratio at least `least` (strictly above it where `above`), its final time at most the
    greedy's where `timed`; `data` names data other than the timing runs'."""
    metric: str
    n: int
    folder: str
    label: str
    least: float
    command: str
    above: bool = False
    timed: bool = False
    greedy_folder: str | None = None
    data: str = ""


TIMING = "python -m reproduce.experiments.timing"
DISF_RULE = "--metrics DiSF --steps 2000 --stop_every 50 --probes 64 --repeats 1"
DISF_TARGETS = (  # at select's defaults before lever D1: from equal logits (plan.md 12, 13, 14b)
    TimingTarget("DiSF", 100_000, "disf-rule-100k", "disf-greedy-fast", 2.0,
                 f"{TIMING} --sizes 1000 2000 20000 100000 {DISF_RULE} --budget_s 300",
                 timed=True),
    TimingTarget("DiSF", 1_000_000, "disf-rule-1m", "disf-greedy-fast", 2.0,
                 f"{TIMING} --sizes 1000 2000 1000000 {DISF_RULE} --budget_s 60", timed=True,
                 greedy_folder="disf-chunks-1m"),
    TimingTarget("DiSF", 100_000, "disf-rule-40c", "disf-greedy-fast", 1.0,
                 f"{TIMING} --clusters 40 --sizes 1000 2000 100000 {DISF_RULE} --budget_s 300",
                 above=True, timed=True, data=" (40 clusters)"))
PAIR_TARGETS = tuple(TimingTarget("Pair_simi", n, PAIR_LEVER, "pair-greedy", PAIR_GOAL,
                                  f"{PAIR_RULE} --init greedy") for n in PAIR_SIZES)
# Facility at 1M (plan.md run 21): the learner in the paper's blocks, against the better of the
# sparse-kNN greedies' objectives in onerun-1m/ (the same rows and scorer): a gain ratio of 1 is
# that objective
FACILITY_1M = TimingTarget(
    "Facility", 1_000_000, "facility-blocks-1m", "facility-knn-greedy stochastic", 1.0,
    f"{TIMING} --sizes 1000 2000 1000000 --metrics Facility --steps 2000 --stop_every 50 "
    "--learner_blocks Facility=20000 --repeats 1 --budget_s 60", greedy_folder="onerun-1m",
    data=", its learner in 20,000-row blocks")
# lever B1 (plan.md run 25): run 21's command with the blocks cut by neighbourhood
FACILITY_1M_NEIGHBOURHOOD = replace(
    FACILITY_1M, folder="facility-neighbourhood-1m",
    command=f"{FACILITY_1M.command} --block_plan neighbourhood",
    data=", its learner in 20,000-row blocks by neighbourhood")
# lever B2 (plan.md run 26): run 25's command with each block started from the exact greedy
FACILITY_1M_LAZY_START = replace(
    FACILITY_1M_NEIGHBOURHOOD, folder="facility-lazy-start-1m",
    command=f"{FACILITY_1M_NEIGHBOURHOOD.command} --start_optimizer lazy",
    data=", its learner in 20,000-row blocks by neighbourhood, each from the lazy greedy's picks")
# lever D1 (plan.md runs 17-19): the same commands from the greedy start, each in its own folder
DISF_LEVER = {"disf-rule-100k": "disf-init-greedy", "disf-rule-40c": "disf-init-greedy-40c",
              "disf-rule-1m": "disf-1m-fixed-start"}  # run 22: run 19's command, QualityGains fixed
DISF_1M_BEFORE_FIX = "disf-init-greedy-1m"  # run 19, quoted beside run 22
STALL_DISF = {"disf-init-greedy": "disf-stall-checks",  # lever S2's run 24 (and 1M), by D1's
              "disf-init-greedy-40c": "disf-stall-checks-40c",
              "disf-1m-fixed-start": "disf-stall-checks-1m"}


def disf_lever_target(goal: TimingTarget) -> TimingTarget:
    """A DiSF target as lever D1's run measures it: the same command with `--init greedy`."""
    return replace(goal, folder=DISF_LEVER[goal.folder], command=f"{goal.command} --init greedy")


def disf_lever_adopted(results: str) -> bool | None:
    """Lever D1's rule (plan.md, fixed before runs 17 and 18): a greedy start becomes DiSF's
    `--init auto` if both of its 100k runs meet their targets; None while either is missing."""
    met = [timing_target(results, disf_lever_target(goal))["met"]
           for goal in DISF_TARGETS if goal.n == 100_000]
    return None if None in met else all(met)


def stall_target(goal: TimingTarget) -> TimingTarget:
    """A DiSF target (lever D1's) as lever S2's run measures it: the same command with
    `--stall_on checks`."""
    return replace(goal, folder=STALL_DISF[goal.folder], command=f"{goal.command} {STALL_FLAG}")


def stall_lever_adopted(results: str) -> bool | None:
    """Lever S2's rule (plan.md, fixed before runs 23-24): `--stall_on checks` becomes select's
    default if run 23 keeps at least 1 - STOP_LOSS of every metric's fixed-steps objective at
    every size and run 24 still meets both 100k DiSF targets; None while a run is missing."""
    _, worst, _ = stop_kept(results, lever=True)
    met = [timing_target(results, stall_target(disf_lever_target(goal)))["met"]
           for goal in DISF_TARGETS if goal.n == 100_000]
    if worst is None or None in met:
        return None
    return worst >= 1 - STOP_LOSS and all(met)


def timing_targets(results: str) -> tuple[TimingTarget, ...]:
    """Issue 30's timing targets at select's defaults: DiSF's read lever D1's runs once its rule
    adopted it, and lever S2's where S2 is adopted and its run exists (1M: plan.md says it runs
    only with an hour left; without it the row says it ran under `--stall_on best`)."""
    goals = DISF_TARGETS
    if disf_lever_adopted(results):
        goals = tuple(disf_lever_target(goal) for goal in goals)
        if stall_lever_adopted(results):
            goals = tuple(
                stall_target(goal) if scale_goal_timing(results, STALL_DISF[goal.folder])
                else replace(goal, data=f"{goal.data} (run under `--stall_on best`, before S2)")
                for goal in goals)
    return (*goals, *PAIR_TARGETS, facility_1m_target(results))


def facility_1m_target(results: str) -> TimingTarget:
    """The run the 1M Facility target reads: lever B2's (run 26) where it meets it, else lever
    B1's (run 25) where its rule adopted it, else run 21's (plan.md's rules for runs 25 and 26)."""
    if timing_target(results, FACILITY_1M_LAZY_START)["met"]:
        return FACILITY_1M_LAZY_START
    return FACILITY_1M_NEIGHBOURHOOD if block_lever_adopted(results) else FACILITY_1M


def block_lever_adopted(results: str) -> bool | None:
    """Lever B1's rule (plan.md, fixed before run 25): blocks by neighbourhood become the timing
    experiment's block plan if run 25 meets the 1M Facility target; None before it ran."""
    return timing_target(results, FACILITY_1M_NEIGHBOURHOOD)["met"]


def block_lever_claims(results: str) -> list[str]:
    """Levers B1 (run 25) and B2 (run 26) beside run 21, its random blocks, and the plans'
    verdicts."""
    rows = {goal.folder: timing_target(results, goal)
            for goal in (FACILITY_1M, FACILITY_1M_NEIGHBOURHOOD, FACILITY_1M_LAZY_START)}
    adopted = rows[FACILITY_1M_NEIGHBOURHOOD.folder]["met"]  # block_lever_adopted, read once
    b1 = ("not decided: run 25 is missing" if adopted is None else
          "blocks by neighbourhood become the timing experiment's `--block_plan`, and the 1M "
          "Facility target reads run 25" if adopted else "the block plan stays `random`")
    met = rows[FACILITY_1M_LAZY_START.folder]["met"]
    b2 = ("not decided: run 26 is missing" if met is None else
          "met: the 1M Facility target reads run 26 (`--block_plan neighbourhood "
          "--start_optimizer lazy`); select's start for Facility stays stochastic until a plan "
          "re-measures 3k and 20k" if met else "not met: the target stays run 21's")
    return ["Facility at 1,000,000 rows in blocks, against "
            f"`{FACILITY_1M.greedy_folder}/`'s `{FACILITY_1M.label}` on the same rows and "
            "scorer: run 21, random blocks; lever B1, blocks by neighbourhood (`--block_plan "
            "neighbourhood`: balanced bisection along each part's principal direction, so each "
            "block's learner covers its own region; run 25); lever B2, those blocks each started "
            "from the exact (lazy) greedy's picks (`--start_optimizer lazy`; run 26). Both "
            "levers' rules were fixed in scale-goals/plan.md before they ran.", "",
            *(f"- `{folder}/`: {row['measured']}." for folder, row in rows.items()),
            f"- By B1's rule (a gain ratio of at least {FACILITY_1M.least:g}): {b1}.",
            f"- By B2's rule (the same bound): {b2}.", ""]


def stall_lever_claims(results: str) -> list[str]:
    """Lever S2 against select's rule before it: run 23's objective kept beside `best`'s at each
    size and metric, run 24's DiSF targets beside D1's runs, and the plan's verdict."""
    table, worst, _ = stop_kept(results, lever=True)
    before = {(row["rows"], row["metric"]): row for row in stop_kept(results, lever=False)[0]}
    for row in table:
        old = before.get((row["rows"], row["metric"]))
        row["kept under best"] = old["objective kept"] if old else "-"
        row["time under best"] = old["time"] if old else "-"
    lines = ["Lever S2, the stall tested on the checks' own read-offs (`--stall_on checks`: a run "
             "whose checks still climb, below a better start or not, goes on; the best of the "
             "start and the checks is written either way; scale-goals/plan.md runs 23-24, fixed "
             "before they ran):", ""]
    if worst is None:
        lines += [f"- `{STOP_FOLDER}/{STALL_LEVER}/`: not measured (run 23: `{STALL_COMMAND}`)."]
    else:
        lines += [*markdown(pd.DataFrame(table), right=(
            "rows", "objective kept", "time", "kept under best", "time under best")).splitlines(),
                  "", f"(Run 23: `{STALL_COMMAND}`; worst kept {worst:.4f}.)"]
    for goal in DISF_TARGETS:
        lever = disf_lever_target(goal)
        stall = stall_target(lever)
        row, base = timing_target(results, stall), timing_target(results, lever)
        where = "" if row["met"] is None else f" (`{stall.folder}/`)"  # else named already
        lines.append(f"- DiSF at {goal.n:,} rows{goal.data}, under S2{where}: {row['measured']}; "
                     f"under `best` (`{lever.folder}/`): {base['measured']}.")
    adopted = stall_lever_adopted(results)
    rule = ("not decided: a run is missing" if adopted is None else
            "S2 becomes select's default (`--stall_on checks`)" if adopted else
            "the default stays (`--stall_on best`)")
    return [*lines, f"- By the plan's rule (every metric keeps at least {1 - STOP_LOSS:.3f} at "
            "both sizes, both 100k DiSF targets still met): " + rule + ".", ""]


def disf_lever_claims(results: str) -> list[str]:
    """Lever D1 against runs 12, 13 and 14b (equal logits) at each size both ran, a greedy that
    ran apart (14b's) read from its own folder, and the verdict."""
    lines = []
    for goal in DISF_TARGETS:
        lever = disf_lever_target(goal)
        runs = {folder: scale_goal_timing(results, folder)
                for folder in (goal.folder, lever.folder)}
        if not runs[lever.folder]:
            lines.append(f"- DiSF's lever D1 (`{lever.folder}/`): not measured.")
            continue
        apart = scale_goal_timing(results, goal.greedy_folder)
        sizes = sorted({r.n for r in runs[lever.folder].runs if r.metric == "DiSF"})
        cells = []
        for n in sizes:
            pair = {folder: (timing_run(run, "DiSF", n, "datamask"),
                             timing_run(run, "DiSF", n, goal.label)
                             or timing_run(apart, "DiSF", n, goal.label))
                    for folder, run in runs.items()}
            if not all(pair[lever.folder]):
                continue
            new = comparison(*pair[lever.folder])
            cell = (f"{n:,}: gain {new.gain_ratio:.3f}, time {new.time_ratio:.2f}x"
                    f"{written_at(pair[lever.folder][0])}")
            if all(pair[goal.folder]):
                old = comparison(*pair[goal.folder])
                cell += f" (from equal logits: {old.gain_ratio:.3f}, {old.time_ratio:.2f}x)"
            cells.append(cell)
        lines.append(f"- DiSF's lever D1 on the data of `{goal.folder}/`{goal.data} "
                     f"(`{lever.folder}/`), against `{goal.label}`"
                     + (f" (at {goal.n:,} rows `{goal.greedy_folder}/`'s)" if apart else "")
                     + " by rows: " + "; ".join(cells) + ".")
    at_1m = next(goal for goal in DISF_TARGETS if goal.n == 1_000_000)
    before = timing_run(scale_goal_timing(results, DISF_1M_BEFORE_FIX), "DiSF", at_1m.n,
                        "datamask")
    greedy = timing_run(scale_goal_timing(results, at_1m.greedy_folder), "DiSF", at_1m.n,
                        at_1m.label)
    if before and greedy:
        versus = comparison(before, greedy)
        lines.append(f"- At 1,000,000 rows before the `QualityGains` fix (run 19, "
                     f"`{DISF_1M_BEFORE_FIX}/`, the same command): gain {versus.gain_ratio:.3f}, "
                     f"time {versus.time_ratio:.2f}x ({before.wall_s:.4g} s); run 22 above "
                     "replaces it.")
    adopted = disf_lever_adopted(results)
    rule = ("not decided: a run is missing" if adopted is None else
            "D1 becomes DiSF's `--init auto`, and the DiSF targets below read its runs"
            if adopted else "the default stays (equal logits)")
    return ["DiSF's lever D1, a greedy start (`--init greedy`: the stochastic greedy's picks on "
            "the run's objective, their time counted, scored as the best to beat; plan.md runs "
            "17-20, fixed before they ran). Gain: over random, as a share of the greedy's; time: "
            "the learner's final time over the greedy's; written at step 0: the greedy's picks.",
            "", *lines, f"- By the plan's rule (both 100k targets met): {rule}.", ""]


def timing_target(results: str, goal: TimingTarget) -> dict:
    """One timing target's row: what the learner measured against its greedy, and the verdict."""
    def run_of(folder: str, label: str) -> TimingRun | None:
        return timing_run(scale_goal_timing(results, folder), goal.metric, goal.n, label)

    learner = run_of(goal.folder, "datamask")
    greedy = run_of(goal.greedy_folder or goal.folder, goal.label)
    bound = f"{'above' if goal.above else 'at least'} {goal.least:g}x `{goal.label}`'s gain"
    target = (f"{goal.metric} at {goal.n:,} rows: "
              + ("final time at most the greedy's, " if goal.timed else "") + bound + goal.data
              + (f" (the greedy's run: `{goal.greedy_folder}/`)" if goal.greedy_folder else ""))
    row = {"target": target, "measured": f"not measured (`{goal.folder}/`)",
           "verdict": "not measured", "command": f"`{goal.command} --output {goal.folder}`",
           "met": None}
    if learner and greedy:
        versus = comparison(learner, greedy)
        gain_ok = versus.gain_ratio > goal.least if goal.above else versus.gain_ratio >= goal.least
        met = gain_ok and (not goal.timed or versus.time_ratio <= 1)
        row.update(measured=f"gain {versus.gain_ratio:.3f}, time {versus.time_ratio:.2f}x "
                            f"({learner.wall_s:.4g} s, {learner_steps(learner)}, against "
                            f"{greedy.wall_s:.4g} s)",
                    verdict=goal_verdict(met), met=met)
        if goal.timed and versus.time_ratio > 1:
            row["measured"] += at_greedy_time(learner, greedy)
    return row


def at_greedy_time(learner: TimingRun, greedy: TimingRun) -> str:
    """Where a learner slower than its greedy stood when the greedy ended: the gain ratio of the
    last point of its curve by then, and that point's share of the learner's final gain, which is
    what a stopping rule ending in the greedy's time would have kept at most at those points."""
    points = [p for p in learner.curve if p.elapsed_s <= greedy.wall_s]
    if not points:  # a greedy start that alone outlasts the greedy
        first = learner.curve[0]
        return (f"; by the greedy's time it had no read-off yet (its first, step {first.step}, "
                f"came at {first.elapsed_s:.4g} s)")
    point = points[-1]
    then = comparison(replace(learner, objective=point.objective), greedy).gain_ratio
    final = comparison(learner, greedy).gain_ratio
    return (f"; by the greedy's time (step {point.step}, {point.elapsed_s:.4g} s) gain "
            f"{then:.3f}, {then / final:.3f} of its final gain")


def issue30_target_claims(results: str) -> list[str]:
    """Issue 30's section 4, one row a target: the timing runs of scale-goals/plan.md (12-19, 14b),
    Facility's adopted lever (plan.md addendum 2) and the stopping rule's ablation."""
    rows = [timing_target(results, target) for target in timing_targets(results)]
    outcome = start_round(os.path.join(results, FACILITY_LEVERS))
    facility = {"target": f"Facility at 3,000 and 20,000 rows: at least {FACILITY_GOAL} of the "
                          "lazy greedy's gain", "measured": "not measured",
                "verdict": "not measured",
                "command": "`make ablation-best_from`, then facility-levers/plan.md addendum 2's "
                           "confirm at 20,000"}
    if outcome and outcome["confirm"][start_default(outcome)]:  # the default's runs
        at_3k, at_20k = start_ratios(outcome, start_default(outcome))
        at_3k = float(np.median(at_3k))
        facility.update(measured=f"{at_3k:.3f} and {at_20k:.3f}",
                        verdict=goal_verdict(min(at_3k, at_20k) >= FACILITY_GOAL))
    rows.insert(-1, facility)  # before Facility at 1M
    stall_adopted = stall_lever_adopted(results)
    _, worst, _ = stop_kept(results, stall_adopted)
    rows.append({"target": f"every metric keeps at least {1 - STOP_LOSS:.3f} of its fixed-steps "
                           "objective under the stopping rule",
                 "measured": "not measured" if worst is None else f"worst kept {worst:.4f}",
                 "verdict": "not measured" if worst is None
                 else goal_verdict(worst >= 1 - STOP_LOSS),
                 "command": f"`{STALL_COMMAND}`" if stall_adopted
                 else "`make ablation-stop`"
                 + (f"; DiSF: `{STOP_D1_COMMAND}`" if disf_lever_adopted(results) else "")})
    return ["Issue 30's targets (section 4; the runs' plans: `scale-goals/plan.md` runs 12-26 "
            "and 14b, `facility-levers/plan.md`, `ablation-stop/plan.md`; gain: the learner's "
            "gain over random over the greedy's; time: the learner's final wall time, its "
            "stopping rule's checks counted, over the greedy's):", "",
            *markdown(pd.DataFrame(rows).drop(columns="met")).splitlines(), ""]


def json_or_none(path: str) -> dict | None:
    """A committed table's JSON, or None where the run that writes it has not been committed."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def downstream_claims(results: str) -> list[str]:
    """The downstream verdict as eval/verdict.py's rule states it, from the committed table."""
    table = json_or_none(os.path.join(results, "downstream", "tables", "table2.json"))
    if table is None:
        return ["Not measured: no `downstream/tables/table2.json` (run `make downstream`).", ""]
    text = verdict_markdown(table["verdict"]).split("\n", 2)[2]  # without its own heading
    lines = ["Point C, the first design (`make downstream DS_FLAGS=`), from "
             "`downstream/tables/table2.md` (rule in `eval/verdict.py`):", "", text]
    figure_path = os.path.join(results, "downstream", "figures", "downstream.png")
    if os.path.exists(figure_path):
        lines += [f"![downstream]({os.path.relpath(figure_path, results)})", ""]
    return lines


SECOND_DESIGN = os.path.join("downstream", "V512-d64")  # issue 29's full run, at the sweep's pick
NOISE_CUT = 3  # issue 29: the primary metric's paired sd at most a third of point C's
JUNK_GOAL = 0.25  # issue 29: the smallest resolved junk dose at most this


def second_design_claims(results: str) -> list[str]:
    """The full run of proxy-plan.md section 6: each arm's verdict, the mix-or-choice table and
    issue 29's goals against point C's committed table."""
    folder = os.path.join(results, SECOND_DESIGN)
    free = json_or_none(os.path.join(folder, "tables", "table2.json"))
    if free is None:
        return [f"Not measured yet: no `{SECOND_DESIGN}/tables/table2.json` (run `make "
                "downstream`, then copy the run as its README says).", ""]
    stratified = json_or_none(os.path.join(folder, "tables-stratified", "table2.json"))
    primary = free["verdict"]["primary"]
    lines = [f"From `{SECOND_DESIGN}/` (proxy-plan.md section 6; primary metric `{primary}`).",
             ""]
    for arm, table in (("Free arm", free), ("Stratified arm", stratified)):
        if table is not None:
            lines += [f"{arm}:", "",
                      *(f"- {line}" for line in table["verdict"]["lines"]), ""]
    arms_path = os.path.join(folder, "arms.md")
    if os.path.exists(arms_path):
        with open(arms_path) as f:
            lines += f.read().split("\n", 2)[2].strip().splitlines() + [""]
    with open(os.path.join(results, "downstream", "tables", "table2.json")) as f:
        point_c = json.load(f)["power"]["bpb macro"]["paired_sd"]
    noise = free["snr"][primary]["noise"]
    junk = free["verdict"]["calibration"]["smallest_resolved"].get("junk")
    null = free["verdict"]["calibration"]["null"]
    goals = [(f"pooled paired sd of `{primary}` at most a third of point C's ({point_c:.4f} / "
              f"{NOISE_CUT} = {point_c / NOISE_CUT:.4f})", noise <= point_c / NOISE_CUT,
              f"{noise:.4f}"),
             (f"smallest resolved junk dose at most {JUNK_GOAL}",
              junk is not None and junk <= JUNK_GOAL, "none" if junk is None else f"{junk:g}"),
             ("the null unresolved", not null["resolved"],
              f"{null['difference']['mean']:+.4f} [{null['difference']['low']:+.4f}, "
              f"{null['difference']['high']:+.4f}]"),
             ("both arms committed", stratified is not None,
              "yes" if stratified is not None else "stratified arm missing")]
    lines += ["Issue 29's goals:", ""]
    lines += [f"- {goal}: {goal_verdict(met)} ({value})." for goal, met, value in goals]
    return lines + [""]


README_BEGIN = "<!-- BEGIN generated by `make findings`: headline -->"
HERE = "here (2 CPU cores)"
# the paper's Table 2 (arXiv 2512.24265): average accuracy 44.9 -> 48.1 on 1.5B dense models
PAPER_DOWNSTREAM = "+3.2 points average accuracy (1.5B dense, FineWeb-Mask against FineWeb)"
README_END = "<!-- END generated -->"


def headline(results: str, link: str = "reproduce/results") -> str:
    """The front page's table: the paper's headline claims beside what this box measured, each
    read from its results file (`link`: that folder as the page links it)."""
    rows = []
    folder = next(goal.folder for goal in timing_targets(results)  # select's default's run
                  if (goal.metric, goal.n, goal.data) == ("DiSF", 100_000, ""))
    disf = scale_goal_timing(results, folder)
    learner, fast = (timing_run(disf, "DiSF", 100_000, label)
                     for label in ("datamask", "disf-greedy-fast"))
    ref = next((r for r in disf.runs if (r.metric, r.n, r.label)  # measured or extrapolated
                == ("DiSF", 100_000, "disf-greedy")), None) if disf else None
    source = f"[{folder}]({link}/{SCALE_GOALS}/{folder}/timing.md)"
    if learner and fast and ref:
        fit = disf.fits["DiSF"]["disf-greedy"]
        extrapolated = ("" if ref.status == "measured" else
                        f", extrapolated as N^{fit.exponent:.2f} from "
                        + " and ".join(f"{n:,}" for n in fit.sizes) + " rows")
        rows.append({"claim": "DiSF selection time at 100,000 rows, DATAMASK (select's "
                              "defaults) over the greedy DiSF of the paper's code",
                     "paper": f"{disf.paper.time_ratio:.2%} (GPU)",
                     HERE: f"{learner.wall_s / ref.wall_s:.1%} ({learner.wall_s:.0f} s against "
                           + ("~" if ref.status != "measured" else "")
                           + f"{ref.wall_s:,.0f} s{extrapolated})",
                     "source": source})
        versus = comparison(learner, fast)
        rows.append({"claim": "the same, over this project's fast DiSF greedy (same picks, rank-1 "
                              "updates)", "paper": "-",
                     HERE: f"{versus.time_ratio:.2f}x the time, {versus.gain_ratio:.2f}x its "
                           "gain over random" + written_from(learner.best_step),
                     "source": source})
    pair = scale_goal_timing(results, PAIR_LEVER)
    learner, greedy = (timing_run(pair, "Pair_simi", 100_000, label)
                       for label in ("datamask", "pair-greedy"))
    if learner and greedy:
        versus = comparison(learner, greedy)
        rows.append({"claim": "Pair_simi at 100,000 rows: DATAMASK's gain over random, as a "
                              "share of the greedy's", "paper": "-",
                     HERE: f"{versus.gain_ratio:.3f} in {versus.time_ratio:.2f}x the greedy's "
                           "time" + written_from(learner.best_step),
                     "source": f"[{PAIR_LEVER}]({link}/{SCALE_GOALS}/{PAIR_LEVER}/timing.md)"})
    outcome = start_round(os.path.join(results, FACILITY_LEVERS))
    if outcome and outcome["confirm"][start_default(outcome)]:  # the default's run
        at_20k, run = outcome["confirm"][start_default(outcome)]
        rows.append({"claim": "Facility at 20,000 rows: the same share, against the lazy greedy",
                     "paper": "-", HERE: f"{at_20k:.3f}" + written_from(run.best_step),
                     "source": f"[facility-levers]({link}/{FACILITY_LEVERS}/verdict.md)"})
    arms = [(arm, json_or_none(os.path.join(results, SECOND_DESIGN, folder, "table2.json")))
            for arm, folder in (("free", "tables"), ("stratified", "tables-stratified"))]
    verdicts = [(arm, {m.split("@")[0]: v for m, v in table["verdict"]["vs_random"].items()
                       if m.startswith("datamask-")}) for arm, table in arms if table]
    if verdicts:
        rows.append({"claim": "a model trained on DATAMASK's selection against one trained on "
                              "random's", "paper": PAPER_DOWNSTREAM,
                     HERE: "; ".join(
                         f"{arm} arm: " + ", ".join(f"{m.removeprefix('datamask-')} {v}"
                                                    for m, v in by_method.items())
                         for arm, by_method in verdicts) + " (a 0.1M-parameter proxy, bits "
                                                            "per byte, before the greedy "
                                                            "starts of levers P1 and D1)",
                     "source": f"[V512-d64]({link}/{SECOND_DESIGN}/README.md)"})
    if not rows:
        return "Nothing measured yet: run the experiments, then `make findings`.\n"
    return markdown(pd.DataFrame(rows))


def written_from(step: int | None) -> str:
    """Where the written selection came from, when the run recorded it."""
    if step is None:
        return ""
    return " (the greedy start's picks)" if step == 0 else f" (written at step {step})"


def fill_readme(path: str, results: str) -> None:
    """Rewrite the front page's generated block with `headline`, the rest of the page as it was;
    a page without the block is refused by name, and nothing is written."""
    with open(path) as f:
        page = f.read()
    before, begin, rest = page.partition(README_BEGIN)
    block, end, after = rest.partition(README_END)
    if not (begin and end):
        raise UserError(f"{path}: no generated block ({README_BEGIN} ... {README_END})")
    with atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            f.write(before + begin + "\n" + headline(results) + end + after)


def report(results: str, figures: str) -> str:
    ablations = {knob: read_result(results, f"ablation-{knob}") for knob in KNOBS}
    lines = ["# Findings: what holds on this data", "",
             "Generated by `make findings` from the results files under "
             f"`{results}`; no number here is typed by hand. Rules for each verdict are in "
             "`reproduce/experiments/findings.py`.", ""]
    timing = read_result(results, "timing")
    if timing:
        m = timing.machine
        lines += [f"Machine: {m.cpu}, {m.cores} cores, torch {m.torch}, {m.device}.", ""]
    lines += section("## Learner against greedy: time and objective (`make reproduce-timing`)",
                     "timing", timing, timing_claims)
    lines += figure(figures, results, "3-timing") + figure(figures, results, "1-curves")
    lines += section("## Learning rate and schedule (`make ablation-lr`, `make ablation-steps`)",
                     "ablation-lr", ablations["lr"], lr_claims)
    lines += figure(figures, results, "2-ablation-lr-values")
    lines += section(None, "ablation-steps", ablations["steps"], steps_claims)
    lines += section("## Group size G (`make ablation-G`)", "ablation-G", ablations["G"],
                     g_claims)
    lines += figure(figures, results, "2-ablation-G")
    lines += section("## Simplified against exact log-probability (`make ablation-logprob`)",
                     "ablation-logprob", ablations["logprob"], logprob_claims)
    lines += section("## Is the policy gradient needed? One-shot selectors "
                     "(`make ablation-direct`)", "ablation-direct",
                     read_result(results, "ablation-direct"), direct_claims)
    lines += figure(figures, results, "2-ablation-direct")
    lines += ["## The other knobs", ""]
    lines += section(None, "ablation-lamb", ablations["lamb"], lamb_claims)
    lines += figure(figures, results, "2-ablation-lamb-values")
    for knob in ("partial", "init", "scale_on"):
        lines += section(None, f"ablation-{knob}", ablations[knob], knob_claims)
        lines += figure(figures, results, f"2-ablation-{knob}-values")
    lines += ["## Learner variants beyond the paper (`make ablation-variants`)", ""]
    for knob in VARIANT_KNOBS:
        if knob == "best_from" and not ablations[knob]:
            lines += ["`ablation-best_from`: Facility's lever L9, its runs reported with the "
                      "levers under Issue 30 below (`make ablation-best_from` reruns its screen "
                      "here).", ""]
        elif knob != "stop" or ablations[knob]:  # make ablation-stop writes one sweep per size,
            lines += section(None, f"ablation-{knob}", ablations[knob], variant_claims)  # below
    lines += ["## Issue 30: the stopping rule and Facility's levers", ""]
    lines += stop_claims(results) + facility_lever_claims(results)
    lines += (pair_lever_claims(results) + disf_lever_claims(results) + stall_lever_claims(results)
              + block_lever_claims(results))
    lines += issue30_target_claims(results)
    lines += ["## Issue 17's goals at the paper's scale (`scale-goals/`)", ""]
    lines += scale_goal_claims(results)
    lines += ["## Downstream: does a selection train a better model? (`make downstream`)", ""]
    lines += downstream_claims(results)
    lines += ["### The second design (issue 29): the proxy V512-d64, both arms, calibrated", ""]
    lines += second_design_claims(results)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="runs/experiments")
    parser.add_argument("--figures", default=None, help="default: RESULTS/figures")
    parser.add_argument("--readme", default=None,
                        help="also rewrite this page's generated headline block (the front "
                             "page, from the committed results)")
    args = parser.parse_args(argv)
    text = report(args.results, args.figures or os.path.join(args.results, "figures"))
    if args.readme:
        fill_readme(args.readme, args.results)
    os.makedirs(args.results, exist_ok=True)
    path = os.path.join(args.results, "findings.md")
    with atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
    print(path)
    return text


if __name__ == "__main__":
    main()

"""The rules of `make findings`: claims.yaml declares each claim (its question, the paper's
figure, the results folders it reads, the Make target that writes them, the rule in words and
its parameters) and names the function here that applies the rule. That function takes the
results root, the claim's folders in their declared order and its parameters by name; where the
files it needs are missing, the claim is not measured. The rules shared by claims come first.
"""

from __future__ import annotations

import json
import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import yaml

from datamask.errors import UserError
from eval.tables import markdown
from reproduce.bench.defaults import gain_ratio_text

from .common import lr_setting
from .length_bias import DIVERSITY, PAPER, QUALITY, band, percent, spread
from .records import SweepResult, TimingResult, TimingRun, best_of, of_metric, read_result
from .sweep import objective_at, ratio_and_steps, time_to, window_s
from .timing import comparison, learner_steps

KEEPS = 0.99  # share of the exact or never-stopping value's objective a cheaper value must keep
# the variants that trade objective for a cost: the cost (a run's field) and its words
COST_CUTTERS = {"patience": ("steps_taken", "fewest mean steps"),
                "probes": ("wall_s", "fewest mean seconds")}
SCORED_START = ("best-from-start", "start")  # Facility's start as select takes it: folder, value
DECLARATIONS = os.path.join(os.path.dirname(__file__), "claims.yaml")


@dataclass(frozen=True)
class Finding:
    """What a rule found: the figure for the claims table, the verdict, the section's lines."""
    here: str
    verdict: str
    lines: list[str]


class NotMeasured(Exception):
    """The files a rule needs are missing."""


def needed(found):
    """`found`, where it is there (not None, empty or false); else the claim is not measured."""
    if not found:
        raise NotMeasured
    return found


@dataclass(frozen=True)
class Claim:
    question: str
    paper: str  # the paper's figure ("-": a question this project adds)
    evidence: list[str]  # folders under the results root; the first is linked
    target: str  # the Make target that writes the first folder
    rule: str
    decide: str  # the name of the function here that applies the rule
    caveat: str = ""
    figures: list[str] = field(default_factory=list)  # PNGs under the root, shown if there
    parameters: dict = field(default_factory=dict)  # the rule's own: targets, rows, sentences
    commit: str = ""  # where the target has changed since: the commit whose target wrote it

    @property
    def regenerate(self) -> str:
        """The command that writes the first folder again, at its commit where one is named."""
        return f"`make {self.target}`" + (f" at commit {self.commit}" if self.commit else "")

    def finding(self, root: str) -> Finding | None:
        try:
            return globals()[self.decide](root, *self.evidence, **self.parameters)
        except NotMeasured:
            return None


def load_claims(path: str = DECLARATIONS) -> tuple[Claim, ...]:
    """claims.yaml as Claims; a claim naming no function of this module is refused by name."""
    with open(path) as f:
        claims = tuple(Claim(**claim) for claim in yaml.safe_load(f))
    for claim in claims:
        if not callable(globals().get(claim.decide)):
            raise UserError(f"{path}: claim {claim.question!r}: no rule {claim.decide!r}")
    return claims


# ------------------------------------------------------------------ shared rules and readers

def holds(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def tally(verdicts: dict[str, bool], word: Callable[[bool], str] = holds) -> str:
    """One verdict over several metrics or targets: all, none, or which."""
    good = [name for name, ok in verdicts.items() if ok]
    if len(good) in (0, len(verdicts)):
        return word(bool(good))
    return f"{word(True)} for {', '.join(good)} only"


def bullets(verdicts: dict[str, tuple[bool, str]], word=holds) -> list[str]:
    return [f"- {name}: {text}: **{word(ok)}**." for name, (ok, text) in verdicts.items()]


def judged(here: str, verdicts: dict[str, tuple[bool, str]], word=holds) -> Finding:
    """A finding whose verdict is the tally of one verdict per metric or goal, each a bullet."""
    return Finding(here, tally({m: ok for m, (ok, _) in verdicts.items()}, word),
                   bullets(verdicts, word))


def table(rows: list[dict] | dict | pd.DataFrame, right: tuple[str, ...] = ()) -> list[str]:
    return markdown(pd.DataFrame(rows), right=right).splitlines()


def sweep(root: str, folder: str, name: str | None = None) -> SweepResult | None:
    return read_result(os.path.join(root, folder), name or os.path.basename(folder))


def timing(root: str, folder: str) -> TimingResult | None:
    return read_result(os.path.join(root, folder), "timing")


def run_of(result: TimingResult | None, metric: str, n: int, label: str) -> TimingRun | None:
    return next((r for r in result.runs if (r.metric, r.n, r.label) == (metric, n, label)),
                None) if result else None


def table_json(root: str, *parts: str) -> dict | None:
    path = Path(root, *parts)
    return json.loads(path.read_text()) if path.exists() else None


def mean_rank_best(result: SweepResult):
    """The value with the lowest mean rank of the final objective over the metrics; ties go to
    the value listed first."""
    rows = [s for s in result.summary if s.metric in result.metrics]
    frame = pd.DataFrame(rows)
    rank = frame.groupby("metric")["objective_mean"].rank(ascending=False, method="first")
    return rows[rank.groupby(frame["value"]).transform("mean").idxmin()].value


def cheapest_keeping(result: SweepResult, cost: str):
    """The value (the first listed is the exact or never-stopping one) with the least mean
    `cost` among those keeping KEEPS of the first value's objective on every metric."""
    exact, *cheaper = result.config["values"]
    objective = {(s.metric, s.value): s.objective_mean for s in result.summary}
    kept = [v for v in cheaper
            if all(objective[m, v] >= KEEPS * objective[m, exact] for m in result.metrics)]
    spent = {v: np.mean([getattr(r, cost) for r in result.runs if r.value == v]) for v in kept}
    return min(kept, key=spent.get) if kept else exact


def compared(root: str, folder: str, metric: str, n: int, greedy: str,
             greedy_folder: str | None = None) -> tuple[TimingRun, TimingRun] | None:
    """The learner's run and `greedy`'s at (metric, n): the greedy's from the learner's own run
    where it was measured there, else from `greedy_folder`, where it ran apart; None unless both
    are there."""
    learner = run_of(timing(root, folder), metric, n, "datamask")
    other = run_of(timing(root, folder), metric, n, greedy)
    if greedy_folder and not (other and other.status == "measured"):
        other = run_of(timing(root, greedy_folder), metric, n, greedy)
    return (learner, other) if learner and other else None


def gain_target(root: str, folder: str, metric: str, n: int, greedy: str, least: float,
                timed: bool = False, above: bool = False, greedy_folder: str | None = None,
                time_limit: float = 1.0) -> tuple[bool, str] | None:
    """A gain target: the learner's gain over random at least (or, `above`, more than) `least`
    of `greedy`'s and, when `timed`, its final time at most `time_limit` times the greedy's."""
    runs = compared(root, folder, metric, n, greedy, greedy_folder)
    if runs is None:
        return None
    (learner, other), c = runs, comparison(*runs)
    gained = c.gain_ratio > least if above else c.gain_ratio >= least
    return gained and (not timed or c.time_ratio <= time_limit), (
        f"gain {c.gain_ratio:.3f}, time {c.time_ratio:.2f}x ({learner.wall_s:.4g} s, "
        f"{learner_steps(learner)}, against {other.wall_s:.4g} s)")


def sweep_table(result: SweepResult) -> list[str]:
    """A sweep's summary per metric and value: objective, gain ratio, time and steps."""
    return table([{"metric": s.metric, "value": str(s.value),
                   "objective": f"{s.objective_mean:.3f} +- {s.objective_std:.3f}",
                   **dict(zip(("gain ratio", "steps"), ratio_and_steps(result, s))),
                   "wall s": f"{s.wall_s_mean:.3g}"} for s in result.summary],
                 right=("objective", "gain ratio", "steps", "wall s"))


def learner_ratios(folder: str, value) -> list[tuple[float, object]] | None:
    """(gain ratio over the lazy greedy, run) per seed of a Facility sweep's value: random's
    objective is 0 on the sweep's scale, so the ratio is the objectives'."""
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        return None
    result = read_result(folder, files[0].stem)
    return [(r.objective / result.greedy[0].objective, r) for r in result.runs if r.value == value]


def scored_start(folder: str, least: float) -> tuple[bool, str] | None:
    """Facility's start as select takes it, at least `least` of the lazy greedy's gain by its
    median over the 3,000-row seeds and at 20,000 rows; None unless both ran."""
    sub, value = SCORED_START
    screen = learner_ratios(os.path.join(folder, sub), value)
    confirm = learner_ratios(os.path.join(folder, "confirm-20k", sub), value)
    if not (screen and confirm):
        return None
    at_3k, at_20k = float(np.median([ratio for ratio, _ in screen])), confirm[0][0]
    return min(at_3k, at_20k) >= least, f"{at_3k:.3f} at 3,000 rows, {at_20k:.3f} at 20,000"


def per_metric(here: Callable):
    """A claim judged metric by metric on its folder's sweep: the decorated function gives
    (ok, text) from the sweep, a metric's summary rows and the metric; `here(result, holding)`
    the claims table's figure from the sweep and the metrics that hold."""
    def rule(judge: Callable) -> Callable:
        def decide(root: str, folder: str) -> Finding:
            result = needed(sweep(root, folder))
            verdicts = {m: judge(result, of_metric(result.summary, m), m) for m in result.metrics}
            holding = ", ".join(m for m, (ok, _) in verdicts.items() if ok) or "none"
            return judged(here(result, holding), verdicts)
        return decide
    return rule


# ------------------------------------------------------------------ the paper's claims

def selection_time(root: str, folder: str) -> Finding:
    result = timing(root, folder)
    learner, fast, ref = (run_of(result, "DiSF", 100_000, label)
                          for label in ("datamask", "disf-greedy-fast", "disf-greedy"))
    needed(learner and ref)
    share, fit = learner.wall_s / ref.wall_s, result.fits["DiSF"]["disf-greedy"]
    how = "measured" if ref.status == "measured" else (
        f"extrapolated as N^{fit.exponent:.2f} from " + " and ".join(f"{n:,}" for n in fit.sizes)
        + " rows")
    lines = [f"- The learner at select's defaults: {learner.wall_s:.0f} s ({learner_steps(learner)}"
             f"); the greedy DiSF of the paper's code: ~{ref.wall_s:,.0f} s ({how}); "
             f"{share:.2%} of its time: **{holds(share < 0.1)}**."]
    if fast:
        c = comparison(learner, fast)
        lines.append(f"- Against this project's fast DiSF greedy (the same picks by rank-1 "
                     f"updates, {fast.wall_s:.0f} s): {c.time_ratio:.2f}x its time, "
                     f"{c.gain_ratio:.2f}x its gain over random.")
    return Finding(f"{share:.1%} ({learner.wall_s:.0f} s against ~{ref.wall_s:,.0f} s)",
                   holds(share < 0.1), lines)


def objective_targets(root: str, *folders: str, targets: dict) -> Finding:
    """The declared targets, each naming its folder, as a table; a metric holds where every
    target of it that ran is met."""
    rows = []
    for name, target in targets.items():
        if "scored_start" in target:
            row = scored_start(os.path.join(root, target["scored_start"]), target["least"])
        else:
            row = gain_target(root, **target)
        rows += [(name, target["metric"], *row)] if row else []
    frame = pd.DataFrame(needed(rows), columns=["target", "metric", "ok", "measured"])
    return Finding(f"{frame.ok.sum()} of {len(frame)} targets met",
                   tally(frame.groupby("metric", sort=False).ok.all().to_dict()),
                   table(frame.assign(verdict=[f"**{met(ok)}**" for ok in frame.ok])
                         [["target", "measured", "verdict"]]))


@per_metric(lambda result, holding: "smallest stable G: " + ", ".join(
    f"{m} {result.smallest_stable[m] or 'none'}" for m in result.metrics))
def g_stability(result: SweepResult, rows: list, metric: str) -> tuple[bool, str]:
    unstable, smallest = [s.value for s in rows if not s.stable], result.smallest_stable[metric]
    return (any(g < 128 for g in unstable) and all(g < 128 for g in unstable),
            f"smallest stable G {'none' if smallest is None else f'{smallest:g}'}"
            + (f", unstable at {', '.join(f'{g:g}' for g in unstable)}" if unstable else "")
            + "; objective by G " + ", ".join(f"{s.value:g}: {s.objective_mean:.3f}" for s in rows))


@per_metric(lambda result, holding: f"quality up, diversity down for {holding}")
def lamb_tradeoff(result: SweepResult, rows: list, metric: str) -> tuple[bool, str]:
    """Objectives at different lamb are different functions: the claim is the trade itself."""
    low, high = sorted(rows, key=lambda s: s.value)[::len(rows) - 1]
    return (high.means["quality"] > low.means["quality"] and low.means[metric] > high.means[metric],
            f"lamb {low.value:g} -> {high.value:g}: mean quality {low.means['quality']:.3f} -> "
            f"{high.means['quality']:.3f}, {metric} {low.means[metric]:.4g} -> "
            f"{high.means[metric]:.4g}")


@per_metric(lambda result, holding: f"within one std for {holding}")
def logprob_cost(result: SweepResult, rows: list, metric: str) -> tuple[bool, str]:
    simple, exact = ({s.value: s for s in rows}[v] for v in ("simple", "exact"))
    gap = exact.objective_mean - simple.objective_mean
    noise = max(simple.objective_std, exact.objective_std)
    return gap <= noise, (f"exact {exact.objective_mean:.3f} against simple "
                          f"{simple.objective_mean:.3f} (difference {gap:+.3f}, seed std "
                          f"{noise:.3f}; time exact / simple "
                          f"{exact.wall_s_mean / simple.wall_s_mean:.2f})")


@per_metric(lambda result, holding: f"a one-shot within one std for {holding}")
def one_shot(result, rows: list, metric: str) -> tuple[bool, str]:
    by = {s.method: s for s in rows}
    learner, greedy = by["datamask"], by.get("joint-greedy")
    best = best_of(s for m, s in by.items() if m not in ("datamask", "joint-greedy"))
    return (best.objective_mean >= learner.objective_mean - learner.objective_std,
            f"learner {learner.objective_mean:.3f} in {learner.wall_s_mean:.3g} s; best one-shot "
            f"{best.method} {best.objective_mean:.3f} in {best.wall_s_mean:.3g} s"
            + (f"; joint greedy {greedy.objective_mean:.3f} in {greedy.wall_s_mean:.3g} s"
               if greedy else ""))


def reported_knob(root: str, folder: str) -> Finding:
    """A knob the paper reports without a rule this project fixed before its sweep: the best
    value per metric, the range of final objectives and each value's time, no verdict."""
    result = needed(sweep(root, folder))
    lines = []
    for metric in result.metrics:
        rows = of_metric(result.summary, metric)
        values = [s.objective_mean for s in rows]
        times = ", ".join(f"{s.value}: {s.wall_s_mean:.3g} s" for s in rows)
        lines.append(f"- {metric}: best {result.knob} = {result.best[metric]}; final objective "
                     f"from {min(values):.3f} to {max(values):.3f}; time {times}.")
    best = " / ".join(str(result.best[m]) for m in result.metrics)
    return Finding(f"best {result.knob}: {best} ({' / '.join(result.metrics)})",
                   "reported, no rule", lines)


def length_bias(root: str, folder: str, least: float) -> Finding:
    """Per corpus: the quality selection long (at least `least` of the mean length and above the
    chance band), each diversity greedy short (every seed below the band); the claim holds where
    all four parts hold, in part where some do (reproduce/results/length-bias/plan.md)."""
    result = needed(read_result(os.path.join(root, folder), "length-bias"))
    parts, lines, here = {}, [], []
    for corpus in result.corpora:
        by = result.of(corpus.name)
        quality = by.get(QUALITY)
        greedies = {name: by[name].against_chance == "short" if name in by else False
                    for name in DIVERSITY}
        parts["quality long", corpus.name] = bool(
            quality and quality.ratio_mean >= least and quality.against_chance == "long")
        parts["diversity short", corpus.name] = all(greedies.values())
        shown = [by[name] for name in DIVERSITY if name in by]
        here.append(f"{corpus.name}: {QUALITY} {percent(quality.ratio_mean) if quality else '-'}"
                    ", greedies " + ", ".join(percent(s.ratio_mean) for s in shown))
        lines += [f"`{corpus.name}` ({corpus.rows:,} rows, mean {corpus.mean_length:,.0f} "
                  f"characters; a random selection's chance band {band(corpus)}):", "",
                  *table([{"selection": s.selection, "role": s.role,
                           "seeds (distinct)": f"{s.seeds} ({s.distinct})",
                           "length ratio": spread(s), "against chance": s.against_chance}
                          for s in by.values()], right=("seeds (distinct)", "length ratio")), "",
                  f"- {QUALITY} at least {percent(least)} and above the band: "
                  f"**{holds(parts['quality long', corpus.name])}**"
                  + (f" ({percent(quality.ratio_mean)}; the paper: " + ", ".join(
                      f"{name} {percent(ratio)}" for name, ratio in PAPER.items()) + ")."
                     if quality else " (not run)."),
                  "- every seed of each diversity greedy below the band: "
                  + ", ".join(f"{name} {'short' if ok else 'not short'}"
                              for name, ok in greedies.items())
                  + f": **{holds(parts['diversity short', corpus.name])}**.", ""]
    good = [part for part, ok in parts.items() if ok]
    if len(good) == len(parts):
        word = "holds"
    elif good:
        held = {kind: [name for part, name in good if part == kind]
                for kind in ("quality long", "diversity short")}
        word = "holds in part: " + "; ".join(f"{kind} on {', '.join(names)}"
                                             for kind, names in held.items() if names)
    else:
        word = "does not hold"
    return Finding("; ".join(here), word, lines[:-1])


def seed_spread(values: np.ndarray, form: str = ".3g") -> str:
    """Values over seeds as median [min, max]; one not finite (a level not reached) as "-"."""
    shown = (format(v, form) if np.isfinite(v) else "-"
             for v in (np.median(values), values.min(), values.max()))
    return "{} [{}, {}]".format(*shown)


def times_over(later, t_later: float, earlier, t_earlier: float) -> str:
    """Value `later`'s median time over `earlier`'s, where either may not have reached (inf)."""
    if np.isfinite(t_earlier):
        return f"{t_later / t_earlier:.2f}x" if np.isfinite(t_later) else f"{later} not reached"
    return f"only {later} reached" if np.isfinite(t_later) else "neither reached"


def seconds(time: float) -> str:
    return f"{time:.3g} s" if np.isfinite(time) else "not reached"


def level_times(by_value: dict[object, list], compared: list, levels: list[float]):
    """Runs of one metric by value, at equal wall time: the window (their shortest span), the
    reference (the best median objective at its end among the `compared` values), each value's
    objectives at the window's end and, per (value, level), its runs' times to level x
    reference (inf: not reached within the window)."""
    window = window_s([run for runs in by_value.values() for run in runs])
    at = {v: np.array([objective_at(r, window) for r in runs]) for v, runs in by_value.items()}
    reference = max(float(np.median(at[v])) for v in compared)
    times = {(v, level): np.array([time_to(r, level * reference, window) for r in runs])
             for v, runs in by_value.items() for level in levels}
    return window, reference, at, times


def time_to_objective(root: str, folder: str, fixed: str, chain: list[list], levels: list[float],
                      cut: float) -> Finding:
    """An --equal_time sweep (`folder`; its file is named as the fixed-steps sweep of the same
    knob, `fixed`, whose lines follow) judged by the time to objectives: per metric, the window
    is its shortest run's span, the reference the best median objective at the window's end
    among `chain`'s values, and a run's time to `level` x reference its curve's first point
    there. `chain` lists groups of values, each expected to reach a level sooner than the group
    before: a link cuts the time at a level where the later group's faster value (by median over
    seeds) takes at most `cut` x the earlier group's faster value's (a level neither reaches is no
    cut). A metric holds where every link cuts at every level, holds in part where some do, and
    does not hold where none does."""
    result = needed(sweep(root, folder, os.path.basename(fixed)))
    compared = [value for group in chain for value in group]
    rows, lines, words, here = [], [], {}, []
    for metric in result.metrics:
        by_value = {v: [r for r in of_metric(result.runs, metric) if r.value == v]
                    for v in result.config["values"]}
        window, reference, at, times = level_times(by_value, compared, levels)
        median = {key: float(np.median(t)) for key, t in times.items()}
        rows += [{"metric": metric, result.knob: str(v), "steps": group[0].params["n_epochs"],
                  "objective at the window": seed_spread(at[v], ".3f"),
                  **{f"s to {level:.0%}": seed_spread(times[v, level]) for level in levels}}
                 for v, group in by_value.items()]

        def fastest(group: list, level: float):
            return min(group, key=lambda v: median[v, level])
        cuts = []
        for level in levels:
            for earlier, later in zip(chain, chain[1:]):
                before, after = fastest(earlier, level), fastest(later, level)
                t_before, t_after = median[before, level], median[after, level]
                cuts.append((bool(np.isfinite(t_after) and t_after <= cut * t_before),
                             f"to {level:.0%}, {after} against {before}: "
                             f"{times_over(after, t_after, before, t_before)} "
                             f"({seconds(t_after)} against {seconds(t_before)})"))
        words[metric] = ("holds" if all(ok for ok, _ in cuts) else
                         "holds in part" if any(ok for ok, _ in cuts) else "does not hold")
        first, last = fastest(chain[0], levels[-1]), fastest(chain[-1], levels[-1])
        here.append(f"{metric} " + times_over(last, median[last, levels[-1]], first,
                                              median[first, levels[-1]]))
        lines.append(f"- {metric} (window {window:.3g} s, reference {reference:.3f}): "
                     + "; ".join(f"{text} ({'a cut' if ok else 'no cut'})" for ok, text in cuts)
                     + f": **{words[metric]}**.")
    order = " -> ".join("/".join(map(str, group)) for group in chain)
    lines = [f"Median [min, max] over seeds; `-`: not reached in the window. The order claimed: "
             f"{order}; a cut: at most {cut:g} of the earlier's time.", "",
             *table(rows, right=("steps", "objective at the window",
                                 *(f"s to {level:.0%}" for level in levels))), "", *lines]
    with suppress(NotMeasured):
        lines += ["", f"At fixed steps (`{fixed}/`):", "", *reported_knob(root, fixed).lines]
    metrics_of = {}
    for metric, word in words.items():
        metrics_of.setdefault(word, []).append(metric)
    verdict = (next(iter(metrics_of)) if len(metrics_of) == 1 else "; ".join(
        f"{word} for {', '.join(metrics)}" for word, metrics in metrics_of.items()))
    return Finding(f"time to {levels[-1]:.0%}, {'/'.join(map(str, chain[-1]))} against "
                   f"{'/'.join(map(str, chain[0]))}: " + ", ".join(here), verdict, lines)



def arms_lines(root: str, run: str) -> list[str]:
    """The run's arms.md below its title (each method in both arms), or nothing."""
    arms_md = Path(root, run, "arms.md")
    if not arms_md.exists():
        return []
    return arms_md.read_text().split("\n", 2)[2].strip().splitlines() + [""]


def table2_gain(root: str, run: str, first: str) -> Finding:
    """Both arms of the calibrated proxy's run, then the first proxy's verdict by the same rule."""
    arms = {arm: table_json(root, run, folder, "table2.json")
            for arm, folder in (("free", "tables"), ("stratified", "tables-stratified"))}
    needed(arms["free"])
    lines, here, outcomes = [], [], []
    for arm, verdict in ((arm, t["verdict"]) for arm, t in arms.items() if t):
        lines += [f"{arm.capitalize()} arm (primary metric `{verdict['primary']}`):", "",
                  *(f"- {line}" for line in verdict["lines"]), ""]
        ours = {m.split("@")[0].removeprefix("datamask-"): v
                for m, v in verdict["vs_random"].items() if m.startswith("datamask-")}
        here.append(f"{arm}: " + ", ".join(f"{m} {v}" for m, v in ours.items()))
        outcomes += [o["outcome"] for o in verdict["ordering"].values()]
    lines += arms_lines(root, run)
    point_c = table_json(root, first, "table2.json")
    if point_c:
        lines += [f"The first proxy (`{first}/`, a larger model at fewer tokens, before "
                  "calibration), by the same rule:", "",
                  *(f"- {line}" for line in point_c["verdict"]["lines"])]
    word = ("contradicted" if "contradicted" in outcomes else
            "holds" if set(outcomes) == {"holds"} else "unresolved")
    return Finding("; ".join(here), word if word == "holds"
                   else f"not reproduced at this scale ({word})", lines)


# the paper's claim per eligible primary, from datamask-paper's outcome against random (free arm)
CLAIM_WORDS = {"beats random": "holds", "worse than random": "contradicted",
               "unresolved": "unresolved"}


def shown(line: str, arm: str) -> bool:
    """Whether findings shows a verdict line: the free arm's calibration, the claim's bound and
    what the policy gradient adds; the stratified arm's own null and what the policy gradient
    adds there (its other calibration lines repeat the free arm's)."""
    if line.startswith("What the policy gradient adds"):
        return True
    if arm == "free":
        return line.startswith(("Calibration:", "The paper's claim"))
    return "this arm has no calibration rows" in line


def table2_bound(root: str, run: str, earlier: str, paper_row: str, today_row: str) -> Finding:
    """The drawn design: on each primary, each arm's verdict lines and arms.md's table; the
    verdict is `paper_row`'s outcome against random in the free arm on each eligible primary,
    with its bound, `today_row` beside it; the earlier design's datamask rows in one line."""
    free = needed(table_json(root, run, "tables", "table2.json"))
    stratified = table_json(root, run, "tables-stratified", "table2.json")
    verdict = needed(free["verdict"].get("by_primary"))
    words, here = {}, []
    for primary, judged_on in verdict.items():
        eligible = judged_on["calibration"]["eligible"]
        outcomes = judged_on["vs_random"]
        bound = judged_on["bounds"].get(paper_row)
        limit = (f" (gain below {bound['most']:.4f})" if bound and bound["most"] is not None
                 and bound["most"] > 0 and not bound["resolved_better"] else "")
        here.append(f"`{primary}`" + ("" if eligible else " (not eligible)") + ": "
                    f"{paper_row} {outcomes.get(paper_row, 'not run')}{limit}, "
                    f"{today_row} {outcomes.get(today_row, 'not run')}")
        if eligible and paper_row in outcomes:
            words[primary] = CLAIM_WORDS[outcomes[paper_row]]
    lines = []
    for arm, table in (("free", free), ("stratified", stratified)):
        if table:  # each method's outcome is in arms.md's table below
            lines += [f"{arm.capitalize()} arm:", "", *(
                f"- {line}" for line in table["verdict"]["lines"] if shown(line, arm)), ""]
    lines += arms_lines(root, run)
    before = table_json(root, earlier, "tables", "table2.json")
    if before:
        ours = ", ".join(f"{m} {v}" for m, v in before["verdict"]["vs_random"].items()
                         if m.startswith("datamask-"))
        lines.append(f"The earlier design (`{earlier}/`: the learner before its greedy starts, "
                     f"one selection per method, the pool's macro alone), free arm: {ours}.")
    if not words:
        word = "not judged: no primary eligible"
    elif set(words.values()) == {"holds"}:
        word = "holds"
    else:
        word = ("partly reproduced (" if "holds" in words.values() else
                "not reproduced at this scale (") + "; ".join(
            f"{w} on `{p}`" for p, w in words.items()) + ")"
    return Finding("; ".join(here), word, lines)


# ------------------------------------------------------------------ questions this project adds

def by_rows(root: str, folder: str) -> Finding:
    result = needed(timing(root, folder))
    verdicts = {}
    for metric in result.metrics:
        done = [c for c in of_metric(result.comparisons, metric) if c.gain_ratio is not None]
        good = sum(c.gain_ratio >= 0.95 for c in done)
        cross = result.crossover.get(metric)
        verdicts[metric] = (good == len(done), f"gain ratio >= 0.95 in {good} of {len(done)} "
                            "comparisons; faster than the fast greedy "
                            + (f"from N = {cross:,} on" if cross else "at no N from which it "
                               "stays faster"))
    reference = max((c for c in of_metric(result.comparisons, "DiSF")
                     if c.greedy_role == "reference"), key=lambda c: c.n)
    rows = [{"metric": c.metric, "N": f"{c.n:,}", "greedy": c.greedy,
             "greedy time": c.greedy_status, "learner / greedy time": f"{c.time_ratio:.3g}",
             "gain ratio": "-" if c.gain_ratio is None else f"{c.gain_ratio:.3f}"}
            for c in result.comparisons]
    lines = [*table(rows, right=("N", "learner / greedy time", "gain ratio")), "",
             *bullets(verdicts),
             f"- DiSF at N = {reference.n:,}: {reference.time_ratio:.2%} of the reference greedy's "
             f"time ({reference.greedy_status}): **{holds(reference.time_ratio < 0.1)}** under "
             "10%."]
    return Finding(", ".join(f"{m} {'>=' if ok else '<'} 0.95" for m, (ok, _) in verdicts.items()),
                   tally({m: ok for m, (ok, _) in verdicts.items()}), lines)


def stop_sweeps(root: str, folder: str) -> list[tuple[int, SweepResult]]:
    """`make ablation-stop`'s sweeps, (rows, result) from its n<N>/ folders, by rows."""
    path = os.path.join(root, folder)
    names = sorted((int(n[1:]), n) for n in os.listdir(path) if n[1:].isdigit()) \
        if os.path.isdir(path) else []
    return [(n, sweep(root, f"{folder}/{name}", "ablation-stop")) for n, name in names]


def bench_cells(root: str, folder: str, *parts: str) -> pd.DataFrame:
    """The cells of `make bench-defaults` runs: the run in `folder` or one results folder per
    family under it, or under each of its `parts` in turn."""
    runs = [run for part in parts or ("",) for pattern in ("defaults.json", "*/defaults.json")
            for run in sorted(Path(root, folder, part).glob(pattern))]
    return pd.DataFrame([row for run in runs for row in json.loads(run.read_text())["rows"]])


def start_outcomes(root: str, folders: tuple[str, ...]) -> pd.DataFrame:
    """Every committed learner run from a scored greedy start: metric, lamb, rows, whether it ran
    the stopping rule (else fixed steps), whether it wrote a later step than the start, and its
    final objective over the start's (step 0's read-off; runs that kept no curve: NaN)."""
    stop, *timed, facility, bench = folders
    runs = [(c.metric, c.lamb, c.rows, True, c.written_step > 0,
             c.objective_written / c.objective_start)
            for c in bench_cells(root, bench).itertuples()]
    for n, result in stop_sweeps(root, stop):
        runs += [(r.metric, result.config["lamb"], n, r.value != result.config["values"][0],
                  (r.best_step or 0) > 0, r.objective / r.curve[0].objective) for r in result.runs]
    runs += [(r.metric, 0.0, r.n, True, r.best_step > 0, np.nan)
             for result in filter(None, (timing(root, folder) for folder in timed))
             for r in result.runs if r.label == "datamask" and r.best_step is not None]
    sub, value = SCORED_START
    runs += [("Facility", 0.0, 3_000, True, r.best_step > 0, np.nan)
             for _, r in learner_ratios(os.path.join(root, facility, sub), value) or []]
    return pd.DataFrame(runs, columns=["metric", "lamb", "rows", "rule", "later", "ratio"])


def gradient_adds(root: str, *folders: str) -> Finding:
    """Folders: the stopping rule's sweeps, the timing runs at select's defaults, Facility's
    start, `make bench-defaults` at select's defaults."""
    runs = start_outcomes(root, folders)
    needed(not runs.empty)
    rows, adds = [], {}
    for (metric, lamb), group in runs.groupby(["metric", "lamb"], sort=False):
        rule, fixed = group[group.rule], group[~group.rule]
        adds[f"{metric} at lamb {lamb:g}"] = bool(rule.later.any())
        rows.append({"metric": metric, "lamb": f"{lamb:g}",
                     "rows": ", ".join(f"{n:,}" for n in sorted(set(group.rows))),
                     "written later than the start": f"{rule.later.sum()} of {len(rule)}",
                     "written / start": "-" if rule.ratio.isna().all()
                     else f"{rule.ratio.mean():.4f}",
                     "fixed 2,000 steps / start": f"{fixed.ratio.mean():.4f}" if len(fixed)
                     else "-"})
    rule = runs[runs.rule]
    return Finding(f"a later step is written in {rule.later.sum()} of {len(rule)} runs",
                   tally(adds, lambda ok: "adds" if ok else "adds nothing"),
                   table(rows, right=("written / start", "fixed 2,000 steps / start")))


def start_against_equal(root: str, *folders: str, greedies: dict) -> Finding:
    """Folders: pairs of timing runs (from equal logits, from the greedy start) on the same rows,
    then the run holding the greedy at 1,000,000 rows."""
    *pairs, greedy_1m = folders
    rows = []
    for equal, start in zip(pairs[::2], pairs[1::2]):
        result = timing(root, start)
        learners = [r for r in result.runs if r.label == "datamask"] if result else []
        for r in learners:
            far = greedy_1m if r.n >= 1_000_000 else None
            runs = [compared(root, f, r.metric, r.n, greedies[r.metric], far)
                    for f in (equal, start)]
            if None in runs:
                continue
            before, after = (comparison(*pair) for pair in runs)
            rows.append({"run": f"{r.metric} at {r.n:,} rows"
                                + (" (40c)" if start.endswith("-40c") else ""),
                         "greedy": greedies[r.metric],
                         **{f"{name}: gain, time": f"{c.gain_ratio:.3f}, {c.time_ratio:.2f}x"
                            for name, c in (("equal logits", before), ("greedy start", after))},
                         "gains": after.gain_ratio >= before.gain_ratio})
    frame = pd.DataFrame(needed(rows))
    gains = frame.groupby("run").gains.last()  # a run repeated on the same rows counts once
    return Finding(f"the start gains at least as much in {gains.sum()} of {len(gains)} runs",
                   holds(gains.all()), table(frame.drop(columns="gains")))


def taken(cell, entry: str) -> bool:
    """Whether an adopted entry, a metric or "<metric> lamb <lamb>", covers a bench cell."""
    metric, _, lamb = entry.partition(" lamb ")
    return cell.metric == metric and (not lamb or cell.lamb == float(lamb))


def defaults_against_greedies(root: str, today: str, *rounds: str, keep_of_greedy: float,
                              adopted: dict[str, list[str]], beside: list[dict]) -> Finding:
    """`make bench-defaults` at select's defaults: `today`'s cells, and over them the cells of
    the metrics later rounds (`rounds`, cited as evidence) adopted (`adopted`: a folder under the
    results -> its metrics, in the order adopted; "Facility lamb 0.5" takes that lamb's cells
    alone), each replacing the same cell run before; then each table of `beside` (its `title`,
    and the cells of `folder`, or of each of its `parts`): the rounds' candidates and
    confirmation runs. Each run is a folder per family (and lamb)."""
    cells = bench_cells(root, today)
    needed(not cells.empty)
    key = ["family", "rows", "metric", "lamb"]
    for folder, metrics in adopted.items():
        later = bench_cells(root, folder)
        if not later.empty:  # its cells replace the same cells run before
            later = later[[any(taken(cell, entry) for entry in metrics)
                           for cell in later.itertuples()]]
            before = cells.merge(later[key], on=key, how="left", indicator=True)
            cells = pd.concat([before[before._merge == "left_only"].drop(columns="_merge"),
                               later], ignore_index=True)
    order = {"Pair_simi": 0, "Facility": 1, "DiSF": 2}
    cells = cells.sort_values(key[:2] + ["lamb", "metric"], key=lambda c: c.map(order)
                              if c.name == "metric" else c, kind="stable")

    def share(frame: pd.DataFrame, which: str) -> pd.Series:
        """A certificate's share above random; "no bound" where the run had none, "-" where
        the run was made before certificates were reported."""
        values = frame.get(f"share_above_random_{which}", pd.Series(np.nan, frame.index))
        reasons = frame.get("no_bound_reason", pd.Series(None, frame.index))
        return pd.Series([f"{v:.4f}" if pd.notna(v) else "no bound" if isinstance(r, str)
                          else "-" for v, r in zip(values, reasons)], frame.index)

    lines = []
    from_round = "; ".join(f"{', '.join(metrics)} from `{folder}/`"
                           for folder, metrics in adopted.items())
    tables = [(f"At select's defaults (`{today}/`'s cells; then {from_round}, where each ran):",
               cells)]
    tables += [(table_of["title"], bench_cells(root, table_of["folder"],
                                               *table_of.get("parts", ())))
               for table_of in beside]
    for title, shown in tables:
        if not shown.empty:
            lines += [title, "", *table({
                "family": shown.family, "rows": shown.rows.map("{:,}".format),
                "metric": shown.metric, "lamb": shown.lamb.map("{:g}".format),
                "greedy": shown.greedy,
                "gain ratio": [gain_ratio_text(r, g) for r, g in zip(
                    shown.gain_ratio, shown.get("greedy_gain", pd.Series(None, shown.index)))],
                "time ratio": shown.time_ratio.map("{:.2f}".format),
                "written at": shown.written_step,
                "start share": share(shown, "start"), "written share": share(shown, "written"),
                "passes": shown.passes.map({True: "**yes**", False: "no"})},
                right=("rows", "gain ratio", "time ratio", "written at", "start share",
                       "written share")), ""]
    passed = int(cells.passes.sum())
    # a negative ratio is a greedy that lost to random: the cell's verdict says if the gain held
    kept = int(((cells.gain_ratio >= keep_of_greedy) | cells.passes).sum())
    return Finding(f"{passed} of {len(cells)} cells pass; the gain in {kept}",
                   met(passed == len(cells)), lines[:-1])


def stopping_rule(root: str, folder: str, least_kept: float) -> Finding:
    """The rule's mean objective and time over the fixed steps', per sweep and metric."""
    kept = []
    for n, result in stop_sweeps(root, folder):
        fixed, rule = result.config["values"]
        means = pd.DataFrame(result.summary).set_index(["value", "metric"])[
            ["objective_mean", "wall_s_mean"]]
        kept.append((means.loc[rule] / means.loc[fixed]).assign(rows=f"{n:,}").reset_index())
    frame = pd.concat(needed(kept))
    worst = frame.objective_mean.min()
    return Finding(f"worst objective kept {worst:.4f}", met(worst >= least_kept), table({
        "rows": frame.rows, "metric": frame.metric,
        "objective kept": frame.objective_mean.map("{:.4f}".format),
        "time": frame.wall_s_mean.map("{:.2f}".format)}, right=("rows", "objective kept", "time")))


def learning_rate(root: str, rates: str, steps: str) -> Finding:
    """The rates' sweep (and its longer check in 1000-steps/), then the steps' sweep."""
    result = needed(sweep(root, rates))
    lines = []
    for metric in result.metrics:
        rows = of_metric(result.summary, metric)
        best = best_of(rows)
        high, low = (pick(rows, key=lambda s: float(s.value.split(":")[1])) for pick in (max, min))
        gain, low_gain = best.objective_mean - best.start_mean, low.objective_mean - low.start_mean
        lines.append(
            f"- {metric}: best {best.value} ({best.objective_mean:.3f} +- "
            f"{best.objective_std:.3f}); too high a rate ends more than one std below it "
            f"({high.value}: {high.objective_mean:.3f}): "
            f"**{holds(high.objective_mean < best.objective_mean - best.objective_std)}**; too "
            f"low a rate gains under 10% of the best's gain ({low.value}: {low_gain:.3f} against "
            f"{gain:.3f}): **{holds(low_gain < 0.1 * gain)}**.")
    longer = sweep(root, f"{rates}/1000-steps", "ablation-lr")
    if longer:
        lines.append(f"- Over {longer.config['steps']:,} steps (`{rates}/1000-steps/`) the "
                     f"best over all metrics is {mean_rank_best(longer)}.")
    by_steps = sweep(root, steps)
    if by_steps:
        lines += ["", f"Steps (the value) against the final objective and wall time "
                      f"(`{steps}/`):", "", *sweep_table(by_steps)]
    overall, default = mean_rank_best(result), lr_setting()
    return Finding(f"best over all metrics: {overall}; select's default: {default}",
                   holds(overall == default), lines)


def variants(root: str, *folders: str) -> Finding:
    """Folders: each variant's sweep, scale_on's last (the paper has no value for it)."""
    *knobs, scale_on = folders
    lines, winners = [], {}
    for result in filter(None, (sweep(root, folder) for folder in knobs)):
        paper = result.config["values"][0]
        if result.knob in COST_CUTTERS:
            cost, words = COST_CUTTERS[result.knob]
            winner = cheapest_keeping(result, cost)
            rule = f"{words} among the values keeping {KEEPS:.0%} of {paper}'s objective"
        else:
            winner, rule = mean_rank_best(result), "lowest mean rank over the metrics"
        winners[result.knob] = (winner, paper)
        lines += [f"`--{result.knob}` ({result.paper}; {paper} is the paper's):", "",
                  *sweep_table(result), "",
                  f"- {rule}: {winner}; " + ("the paper's value stays." if winner == paper
                                             else f"**{winner} wins**."), ""]
    with suppress(NotMeasured):
        lines += ["`--scale_on` (the paper does not say how the two terms share a scale):", "",
                  *reported_knob(root, scale_on).lines]
    changed = [f"{k} {w}" for k, (w, paper) in needed(winners).items() if w != paper]
    return Finding(f"{len(winners) - len(changed)} of {len(winners)} keep the paper's value",
                   "adopted: " + ", ".join(changed) if changed else "the paper's values stay",
                   lines)


def learners_against_greedy(root: str, *folders: str, labels: list[str],
                            against: dict) -> Finding:
    """Learner runs (`labels` name them, the adopted setting first) against the greedy run of
    the last folder by one gain target; the adopted run gives the verdict."""
    *learners, greedy = folders
    rows = {label: gain_target(root, folder, greedy_folder=greedy, **against)
            for label, folder in zip(labels, learners)}
    ok, text = needed(rows[labels[0]])
    return Finding(text.split(" (")[0], met(ok),
                   bullets({label: row for label, row in rows.items() if row}, met))


def facility_start(root: str, folder: str, screen: dict, least: float) -> Finding:
    """The screen's rows, each its folder and value (and its folder at 20,000 rows), and the
    verdict on select's scored start."""
    folder = os.path.join(root, folder)
    ok, text = needed(scored_start(folder, least))
    rows = []
    for label, (sub, value, *at_20k) in screen.items():
        ratios = [ratio for ratio, _ in learner_ratios(os.path.join(folder, sub), value) or []]
        confirm = at_20k and learner_ratios(os.path.join(folder, "confirm-20k", *at_20k), value)
        if ratios:
            rows.append({"start and settings": label,
                         "gain ratio per seed": ", ".join(f"{r:.3f}" for r in ratios),
                         "median": f"{np.median(ratios):.3f}",
                         "20,000 rows, seed 0": f"{confirm[0][0]:.3f}" if confirm else "-"})
    return Finding(text, met(ok), table(rows, right=("median", "20,000 rows, seed 0")))


def instrument(root: str, run: str, first: str) -> Finding:
    """The calibrated proxy's run against the first proxy's tables."""
    free = needed(table_json(root, run, "tables", "table2.json"))
    point_c = needed(table_json(root, first, "table2.json"))
    primary, calibration = free["verdict"]["primary"], free["verdict"]["calibration"]
    noise, bound = free["snr"][primary]["noise"], point_c["power"]["bpb macro"]["paired_sd"] / 3
    junk, null = calibration["smallest_resolved"].get("junk"), calibration["null"]["difference"]
    goals = {f"paired sd of `{primary}` at most a third of the first proxy's ({bound:.4f})":
             (noise <= bound, f"{noise:.4f}"),
             "smallest resolved junk dose at most 0.25": (
                 junk is not None and junk <= 0.25, "none" if junk is None else f"{junk:g}"),
             "the null (a second random draw) unresolved": (
                 not calibration["null"]["resolved"],
                 f"{null['mean']:+.4f} [{null['low']:+.4f}, {null['high']:+.4f}]")}
    return judged(f"paired sd {noise:.4f}, junk resolved from dose {junk:g}", goals, met)

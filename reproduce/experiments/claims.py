"""The rules of `make findings`, as data: claims.yaml declares each claim (its question, the
paper's figure, the results folders it reads, the Make target that writes them, its rule as data
and its sentence and table templates) and names its measure, a function here that reads the
folders into values. `Claim.finding` checks the rule on those values and fills the templates;
where the files a measure needs are missing, the claim is not measured. The schema is in
docs/experiments.md; the measures shared by claims come first.
"""

from __future__ import annotations

import json
import operator
import os
import string
from contextlib import suppress
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

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
WORDS = {True: "holds", False: "does not hold"}
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
       "==": operator.eq, "!=": operator.ne}
RULE_KEYS = {"measure", "op", "value", "times"}
PART_KEYS = {"each": {"each", "line"}, "table": {"table", "columns", "right"},
             "tables": {"tables", "columns", "right"}}


@dataclass(frozen=True)
class Finding:
    """What a rule found: the figure for the claims table, the verdict, the section's lines."""
    here: str
    verdict: str
    lines: list[str]


class NotMeasured(Exception):
    """The files a measure needs are missing."""


def needed(found):
    """`found`, where it is there (not None, empty or false); else the claim is not measured."""
    if not found:
        raise NotMeasured
    return found


class Template(string.Formatter):
    """str.format, where a list is formatted entry by entry and joined by ", ", a missing value
    (None, NaN) shows as "-", text shows as it is, and a yes-or-no value takes the word its spec gives: "{ok:met|not
    met}"."""
    def format_field(self, value, spec: str) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, (bool, np.bool_)) and "|" in spec:
            return spec.split("|")[0 if value else 1]
        if isinstance(value, (list, tuple)):
            return ", ".join(self.format_field(v, spec) for v in value)
        if value is None or isinstance(value, float) and np.isnan(value):
            return "-"
        return super().format_field(value, spec)


def fill(template: str, values) -> str:
    return Template().vformat(template, (), values if isinstance(values, dict) else vars(values))


def check(rule: dict, values: dict) -> bool:
    """A rule as data: `measure` `op` `value` (times `times`), where `value`, `op` and `times`
    may name other measures; `all` or `any` of a list of rules."""
    if "all" in rule or "any" in rule:
        return (all if "all" in rule else any)(check(r, values) for r in next(iter(rule.values())))
    def get(key):
        found = rule.get(key, 1)
        return values.get(found, found) if isinstance(found, str) else found
    return bool(OPS[get("op")](values[rule["measure"]], get("value") * get("times")))


def rule_errors(rule: dict) -> list[str]:
    if "all" in rule or "any" in rule:
        return [e for r in next(iter(rule.values())) for e in rule_errors(r)]
    unknown = [f"rule key {key!r}" for key in rule if key not in RULE_KEYS]
    return unknown + [f"rule without {key!r}" for key in ("measure", "op") if key not in rule]


def table(rows, columns: dict, right=()) -> list[str]:
    return markdown(pd.DataFrame([{header: fill(template, row) for header, template
                                   in columns.items()} for row in rows], columns=list(columns)),
                    right=right).splitlines()


@dataclass(frozen=True)
class Claim:
    question: str
    paper: str  # the paper's figure ("-": a question this project adds)
    evidence: list[str]  # folders under the results root; the first is linked
    target: str  # the Make target that writes the first folder
    rule: str  # the rule in words
    decide: str  # the measure: the function here reading the folders and `parameters`
    caveat: str = ""
    figures: list[str] = field(default_factory=list)  # PNGs under the root, shown if there
    parameters: dict = field(default_factory=dict)  # the measure's own inputs, by name
    commit: str = ""  # where the target has changed since: the commit whose target wrote it
    holds: dict = field(default_factory=dict)  # the rule as data, checked on each item
    checks: dict = field(default_factory=dict)  # named rules, checked where their measures are
    goals: list = field(default_factory=list)  # items made of rules: name, holds and text each
    words: tuple = ("holds", "does not hold")  # an item's word where the rule holds, and not
    verdict: str = "tally"  # tally (all, none or which), all, or first (the first item's word)
    verdict_words: tuple = ()  # the verdict's words, where not the items'
    by: str = "name"  # the item field a tally names
    each: str = ""  # the template `listed` joins over the items
    here: str = ""  # the claims table's figure
    lines: list = field(default_factory=list)  # the section: templates, lists, tables

    @property
    def regenerate(self) -> str:
        """The command that writes the first folder again, at its commit where one is named."""
        return f"`make {self.target}`" + (f" at commit {self.commit}" if self.commit else "")

    def finding(self, root: str) -> Finding | None:
        try:
            values = globals()[self.decide](root, *self.evidence, **self.parameters)
        except NotMeasured:
            return None
        if self.goals:
            values["items"] = [{"name": fill(goal["name"], values), "text": fill(goal["text"], values),
                                "ok": check(goal["holds"], values)} for goal in self.goals]
        items = values.get("items") or [values]
        for target in [values, *(d for v in values.values() if isinstance(v, list)
                                 for d in v if isinstance(d, dict))]:
            for name, rule in self.checks.items():
                with suppress(KeyError):
                    target[name] = check(rule, target)
        yes, no = self.words
        oks = {}
        for item in items:
            if self.holds:
                item["ok"] = check(self.holds, item)
            if "ok" in item:
                item["word"] = yes if item["ok"] else no
                oks[item.get(self.by)] = oks.get(item.get(self.by), True) and item["ok"]
        good = [str(item.get("name")) for item in items if item.get("ok")]
        values.update(first=items[0], held=len(good), total=len(items),
                      holding=", ".join(good) or "none",
                      listed=", ".join(fill(self.each, item) for item in items))
        return Finding(values.get("here") or fill(self.here, values),
                       values.get("verdict") or self.verdict_of(oks, items[0]),
                       self.section(values))

    def verdict_of(self, oks: dict, first: dict) -> str:
        yes, no = self.verdict_words or self.words
        good = [name for name, ok in oks.items() if ok]
        if self.verdict == "first":
            return first["word"]
        if len(good) in (0, len(oks)) or self.verdict == "all":
            return yes if len(good) == len(oks) else no
        return f"{yes} for {', '.join(good)} only"

    def section(self, values: dict) -> list[str]:
        lines = []
        for part in self.lines:
            if isinstance(part, dict) and "each" in part:
                lines += [fill(part["line"], row) for row in values[part["each"]]]
            elif isinstance(part, dict) and "table" in part:
                lines += table(values[part["table"]], part["columns"], part.get("right", ()))
            elif isinstance(part, dict):
                for title, rows in values[part["tables"]]:
                    lines += [title, "", *table(rows, part["columns"], part["right"]), ""]
            elif isinstance(values.get(part), list):
                lines += values[part]
            else:
                with suppress(KeyError):  # a line naming a value not found is left out
                    lines.append(fill(part, values))
        while lines and not lines[-1]:
            lines.pop()
        return lines


def claim_errors(claim: dict) -> list[str]:
    """What is wrong with one declared claim: a key not in the schema, a required key missing, no
    measure by its name, a rule or a section part of unknown keys."""
    known = {f.name: f for f in fields(Claim)}
    errors = [f"unknown key {key!r}" for key in claim if key not in known]
    errors += [f"missing key {name!r}" for name, f in known.items() if name not in claim
               and f.default is f.default_factory is MISSING]
    if not callable(globals().get(claim.get("decide"))):
        errors.append(f"no measure {claim.get('decide')!r}")
    rules = [claim.get("holds") or {}, *(claim.get("checks") or {}).values()]
    for goal in claim.get("goals") or []:
        errors += [f"goal key {key!r}" for key in goal if key not in ("name", "holds", "text")]
        rules.append(goal.get("holds") or {"measure": None})
    for rule in rules:
        errors += rule_errors(rule) if rule else []
    for part in claim.get("lines") or []:
        kind = next((k for k in PART_KEYS if isinstance(part, dict) and k in part), None)
        if isinstance(part, dict):
            errors += [f"line key {key!r}" for key in part
                       if key not in PART_KEYS.get(kind, ())]
    return errors


def load_claims(path: str = DECLARATIONS) -> tuple[Claim, ...]:
    """claims.yaml as Claims; a malformed claim is refused, naming the claim and the key."""
    with open(path) as f:
        declared = yaml.safe_load(f)
    for claim in declared:
        errors = claim_errors(claim)
        if errors:
            raise UserError(f"{path}: claim {claim.get('question')!r}: {'; '.join(errors)}")
    return tuple(Claim(**claim) for claim in declared)


# ------------------------------------------------------------------ readers shared by claims

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
                timed: bool = False, op: str = ">=", greedy_folder: str | None = None,
                time_limit: float = 1.0) -> dict | None:
    """The learner against `greedy` at (metric, n): its gain over random as a share of the
    greedy's and its time over the greedy's, beside the target (`op` `least`, and at most
    `time_limit` of the time where `timed`)."""
    runs = compared(root, folder, metric, n, greedy, greedy_folder)
    if runs is None:
        return None
    c = comparison(*runs)
    return {"run": runs[0], "other": runs[1], "steps": learner_steps(runs[0]), "op": op,
            "gain": c.gain_ratio, "time": c.time_ratio, "least": least,
            "time_limit": time_limit if timed else np.inf}


def sweep_table(result: SweepResult) -> list[str]:
    """A sweep's summary per metric and value: objective, gain ratio, time and steps."""
    return markdown(pd.DataFrame([{
        "metric": s.metric, "value": str(s.value),
        "objective": f"{s.objective_mean:.3f} +- {s.objective_std:.3f}",
        **dict(zip(("gain ratio", "steps"), ratio_and_steps(result, s))),
        "wall s": f"{s.wall_s_mean:.3g}"} for s in result.summary]),
        right=("objective", "gain ratio", "steps", "wall s")).splitlines()


def learner_ratios(folder: str, value) -> list[tuple[float, object]] | None:
    """(gain ratio over the lazy greedy, run) per seed of a Facility sweep's value: random's
    objective is 0 on the sweep's scale, so the ratio is the objectives'."""
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        return None
    result = read_result(folder, files[0].stem)
    return [(r.objective / result.greedy[0].objective, r) for r in result.runs if r.value == value]


def scored_start(folder: str, least: float) -> dict | None:
    """Facility's start as select takes it against the lazy greedy: its gain ratio by the median
    over the 3,000-row seeds and at 20,000 rows, the smaller judged; None unless both ran."""
    sub, value = SCORED_START
    screen = learner_ratios(os.path.join(folder, sub), value)
    confirm = learner_ratios(os.path.join(folder, "confirm-20k", sub), value)
    if not (screen and confirm):
        return None
    at_3k, at_20k = float(np.median([ratio for ratio, _ in screen])), confirm[0][0]
    return {"at_3k": at_3k, "at_20k": at_20k, "gain": min(at_3k, at_20k), "least": least,
            "op": ">=", "time": 0.0, "time_limit": np.inf}


def metric_rows(root: str, folder: str):
    """A sweep's result and its summary rows, metric by metric."""
    result = needed(sweep(root, folder))
    return result, [(m, of_metric(result.summary, m)) for m in result.metrics]


def reported_knob(root: str, folder: str) -> Finding:
    """A knob the paper reports without a rule this project fixed before its sweep: the best
    value per metric, the range of final objectives and each value's time, no verdict."""
    result, by_metric = metric_rows(root, folder)
    lines = [f"- {metric}: best {result.knob} = {result.best[metric]}; final objective from "
             f"{min(s.objective_mean for s in rows):.3f} to "
             f"{max(s.objective_mean for s in rows):.3f}; time "
             + ", ".join(f"{s.value}: {s.wall_s_mean:.3g} s" for s in rows) + "."
             for metric, rows in by_metric]
    best = " / ".join(str(result.best[m]) for m in result.metrics)
    return Finding(f"best {result.knob}: {best} ({' / '.join(result.metrics)})",
                   "reported, no rule", lines)


# ------------------------------------------------------------------ the paper's claims

def selection_time(root: str, folder: str) -> dict:
    result = timing(root, folder)
    learner, fast, ref = (run_of(result, "DiSF", 100_000, label)
                          for label in ("datamask", "disf-greedy-fast", "disf-greedy"))
    needed(learner and ref)
    fit = result.fits["DiSF"]["disf-greedy"]
    values = {"learner": learner, "ref": ref, "share": learner.wall_s / ref.wall_s,
              "steps": learner_steps(learner), "how": "measured" if ref.status == "measured"
              else f"extrapolated as N^{fit.exponent:.2f} from "
              + " and ".join(f"{n:,}" for n in fit.sizes) + " rows"}
    return {**values, "fast": fast, "against": comparison(learner, fast)} if fast else values


def objective_targets(root: str, *folders: str, targets: dict, measured: dict) -> dict:
    """The declared targets, each naming its folder: a gain target, or Facility's scored start;
    `measured` the sentence of each kind."""
    items = []
    for name, target in targets.items():
        kind = "scored_start" if "scored_start" in target else "gain"
        found = (scored_start(os.path.join(root, target["scored_start"]), target["least"])
                 if kind == "scored_start" else gain_target(root, **target))
        if found:
            items.append({**found, "name": name, "metric": target["metric"],
                          "measured": fill(measured[kind], found)})
    return {"items": needed(items)}


def g_stability(root: str, folder: str) -> dict:
    result, by_metric = metric_rows(root, folder)
    items = []
    for metric, rows in by_metric:
        unstable, smallest = [s.value for s in rows if not s.stable], result.smallest_stable[metric]
        items.append({"name": metric, "smallest": "none" if smallest is None else smallest,
                      "unstable_low": min(unstable, default=np.inf),
                      "unstable_high": max(unstable, default=-np.inf),
                      "unstable_at": f", unstable at {', '.join(f'{g:g}' for g in unstable)}"
                      if unstable else "",
                      "objectives": [f"{s.value:g}: {s.objective_mean:.3f}" for s in rows]})
    return {"items": items}


def lamb_tradeoff(root: str, folder: str) -> dict:
    """Objectives at different lamb are different functions: the claim is the trade itself."""
    items = []
    for metric, rows in metric_rows(root, folder)[1]:
        low, high = sorted(rows, key=lambda s: s.value)[::len(rows) - 1]
        items.append({"name": metric, "low": low.value, "high": high.value,
                      "quality_low": low.means["quality"], "quality_high": high.means["quality"],
                      "metric_low": low.means[metric], "metric_high": high.means[metric]})
    return {"items": items}


def logprob_cost(root: str, folder: str) -> dict:
    items = []
    for metric, rows in metric_rows(root, folder)[1]:
        simple, exact = ({s.value: s for s in rows}[v] for v in ("simple", "exact"))
        items.append({"name": metric, "simple": simple, "exact": exact,
                      "gap": exact.objective_mean - simple.objective_mean,
                      "noise": max(simple.objective_std, exact.objective_std),
                      "time": exact.wall_s_mean / simple.wall_s_mean})
    return {"items": items}


def one_shot(root: str, folder: str) -> dict:
    items = []
    for metric, rows in metric_rows(root, folder)[1]:
        by = {s.method: s for s in rows}
        learner, greedy = by["datamask"], by.get("joint-greedy")
        best = best_of(s for m, s in by.items() if m not in ("datamask", "joint-greedy"))
        items.append({"name": metric, "learner": learner, "best": best,
                      "floor": learner.objective_mean - learner.objective_std,
                      "best_objective": best.objective_mean,
                      "joint": f"; joint greedy {greedy.objective_mean:.3f} in "
                               f"{greedy.wall_s_mean:.3g} s" if greedy else ""})
    return {"items": items}
def length_bias(root: str, folder: str, least: float) -> dict:
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
                  *tabled([{"selection": s.selection, "role": s.role,
                           "seeds (distinct)": f"{s.seeds} ({s.distinct})",
                           "length ratio": spread(s), "against chance": s.against_chance}
                          for s in by.values()], right=("seeds (distinct)", "length ratio")), "",
                  f"- {QUALITY} at least {percent(least)} and above the band: "
                  f"**{WORDS[parts['quality long', corpus.name]]}**"
                  + (f" ({percent(quality.ratio_mean)}; the paper: " + ", ".join(
                      f"{name} {percent(ratio)}" for name, ratio in PAPER.items()) + ")."
                     if quality else " (not run)."),
                  "- every seed of each diversity greedy below the band: "
                  + ", ".join(f"{name} {'short' if ok else 'not short'}"
                              for name, ok in greedies.items())
                  + f": **{WORDS[parts['diversity short', corpus.name]]}**.", ""]
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
    return {"here": "; ".join(here), "verdict": word, "body": lines}


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
                      cut: float) -> dict:
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
             *tabled(rows, right=("steps", "objective at the window",
                                 *(f"s to {level:.0%}" for level in levels))), "", *lines]
    with suppress(NotMeasured):
        lines += ["", f"At fixed steps (`{fixed}/`):", "", *reported_knob(root, fixed).lines]
    metrics_of = {}
    for metric, word in words.items():
        metrics_of.setdefault(word, []).append(metric)
    verdict = (next(iter(metrics_of)) if len(metrics_of) == 1 else "; ".join(
        f"{word} for {', '.join(metrics)}" for word, metrics in metrics_of.items()))
    return {"body": lines, "verdict": verdict, "here": f"time to {levels[-1]:.0%}, "
            f"{'/'.join(map(str, chain[-1]))} against {'/'.join(map(str, chain[0]))}: "
            + ", ".join(here)}

def arms_lines(root: str, run: str) -> list[str]:
    """The run's arms.md below its title (each method in both arms), or nothing."""
    arms_md = Path(root, run, "arms.md")
    if not arms_md.exists():
        return []
    return arms_md.read_text().split("\n", 2)[2].strip().splitlines() + [""]




def table2_gain(root: str, run: str, first: str) -> dict:
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
    return {"here": "; ".join(here), "body": lines,
            "verdict": word if word == "holds" else f"not reproduced at this scale ({word})"}


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


def table2_bound(root: str, run: str, earlier: str, paper_row: str, today_row: str) -> dict:
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
    return {"here": "; ".join(here), "verdict": word, "body": lines}




# ------------------------------------------------------------------ questions this project adds

def by_rows(root: str, folder: str, least: float) -> dict:
    result = needed(timing(root, folder))
    items = []
    for metric in result.metrics:
        done = [c for c in of_metric(result.comparisons, metric) if c.gain_ratio is not None]
        items.append({"name": metric, "least": least, "done": len(done),
                      "good": sum(c.gain_ratio >= least for c in done),
                      "faster": f"from N = {cross:,} on" if (cross := result.crossover.get(metric))
                      else "at no N from which it stays faster"})
    reference = max((c for c in of_metric(result.comparisons, "DiSF")
                     if c.greedy_role == "reference"), key=lambda c: c.n)
    return {"items": items, "comparisons": result.comparisons, "reference": reference,
            "reference_share": reference.time_ratio}


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


def gradient_adds(root: str, *folders: str) -> dict:
    """Folders: the stopping rule's sweeps, the timing runs at select's defaults, Facility's
    start, `make bench-defaults` at select's defaults; an item per metric and lamb."""
    runs = start_outcomes(root, folders)
    needed(not runs.empty)
    items = []
    for (metric, lamb), group in runs.groupby(["metric", "lamb"], sort=False):
        rule, fixed = group[group.rule], group[~group.rule]
        items.append({"name": f"{metric} at lamb {lamb:g}", "metric": metric, "lamb": lamb,
                      "rows": sorted(set(group.rows)), "later": int(rule.later.sum()),
                      "runs": len(rule), "ratio": rule.ratio.mean(), "fixed": fixed.ratio.mean()})
    rule = runs[runs.rule]
    return {"items": items, "later": int(rule.later.sum()), "runs": len(rule)}


def start_against_equal(root: str, *folders: str, greedies: dict) -> dict:
    """Folders: pairs of timing runs (from equal logits, from the greedy start) on the same rows,
    then the run holding the greedy at 1,000,000 rows; an item per run, a row per comparison."""
    *pairs, greedy_1m = folders
    rows = []
    for equal, start in zip(pairs[::2], pairs[1::2]):
        result = timing(root, start)
        for r in [r for r in result.runs if r.label == "datamask"] if result else []:
            far = greedy_1m if r.n >= 1_000_000 else None
            runs = [compared(root, f, r.metric, r.n, greedies[r.metric], far)
                    for f in (equal, start)]
            if None not in runs:
                before, after = (comparison(*pair) for pair in runs)
                rows.append({"name": f"{r.metric} at {r.n:,} rows"
                             + (" (40c)" if start.endswith("-40c") else ""),
                             "greedy": greedies[r.metric], "before": before, "after": after,
                             "gain_equal": before.gain_ratio, "gain_start": after.gain_ratio})
    # a run repeated on the same rows counts once, by its last
    return {"rows": needed(rows), "items": sorted({row["name"]: row for row in rows}.values(),
                                                  key=lambda row: row["name"])}


def taken(cell, entry: str) -> bool:
    """Whether an adopted entry, a metric or "<metric> lamb <lamb>", covers a bench cell."""
    metric, _, lamb = entry.partition(" lamb ")
    return cell.metric == metric and (not lamb or cell.lamb == float(lamb))


def shown_cells(frame: pd.DataFrame) -> list[dict]:
    """Bench cells as the tables show them: the gain ratio's words where the greedy lost to
    random, and each certificate's share ("no bound" where the run had none, "-" where it was
    made before certificates were reported)."""
    none = pd.Series(None, frame.index)
    frame = frame.assign(gain_text=[gain_ratio_text(r, g) for r, g in zip(
        frame.gain_ratio, frame.get("greedy_gain", none))])
    for which in ("start", "written"):
        frame[f"{which}_share"] = [
            f"{v:.4f}" if pd.notna(v) else "no bound" if isinstance(r, str) else "-"
            for v, r in zip(frame.get(f"share_above_random_{which}", none),
                            frame.get("no_bound_reason", none))]
    return frame.to_dict("records")


def defaults_against_greedies(root: str, today: str, *rounds: str, keep_of_greedy: float,
                              adopted: dict[str, list[str]], beside: list[dict]) -> dict:
    """`make bench-defaults` at select's defaults: `today`'s cells, and over them the cells of
    the metrics later rounds (`rounds`, cited as evidence) adopted (`adopted`: a folder under the
    results -> its metrics, in the order adopted; "Facility lamb 0.5" takes that lamb's cells
    alone), each replacing the same cell run before; then each table of `beside` (its `title`,
    and the cells of `folder`, or of each of its `parts`). Each run is a folder per family."""
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
    from_round = "; ".join(f"{', '.join(metrics)} from `{folder}/`"
                           for folder, metrics in adopted.items())
    tables = [(f"At select's defaults (`{today}/`'s cells; then {from_round}, where each ran):",
               cells)] + [(side["title"], bench_cells(root, side["folder"], *side.get("parts", ())))
                          for side in beside]
    # a negative ratio is a greedy that lost to random: the cell's verdict says if the gain held
    return {"tables": [(title, shown_cells(frame)) for title, frame in tables if not frame.empty],
            "cells": len(cells), "passed": int(cells.passes.sum()),
            "kept": int(((cells.gain_ratio >= keep_of_greedy) | cells.passes).sum())}


def stopping_rule(root: str, folder: str) -> dict:
    """The rule's mean objective and time over the fixed steps', per sweep and metric."""
    kept = []
    for n, result in stop_sweeps(root, folder):
        fixed, rule = result.config["values"]
        means = pd.DataFrame(result.summary).set_index(["value", "metric"])[
            ["objective_mean", "wall_s_mean"]]
        kept.append((means.loc[rule] / means.loc[fixed]).assign(rows=n).reset_index())
    frame = pd.concat(needed(kept))
    return {"rows": frame.to_dict("records"), "worst": frame.objective_mean.min()}


def learning_rate(root: str, rates: str, steps: str) -> dict:
    """The rates' sweep (and its longer check in 1000-steps/), then the steps' sweep; an entry
    per metric with the best rate, the highest and the lowest."""
    result, by_metric = metric_rows(root, rates)
    metrics = []
    for metric, rows in by_metric:
        best = best_of(rows)
        high, low = (pick(rows, key=lambda s: float(s.value.split(":")[1])) for pick in (max, min))
        metrics.append({"name": metric, "best": best, "high": high, "low": low,
                        "floor": best.objective_mean - best.objective_std,
                        "high_objective": high.objective_mean,
                        "gain": best.objective_mean - best.start_mean,
                        "low_gain": low.objective_mean - low.start_mean})
    values = {"metrics": metrics, "overall": mean_rank_best(result), "default": lr_setting(),
              "rates": rates, "by_steps": []}
    longer = sweep(root, f"{rates}/1000-steps", "ablation-lr")
    if longer:
        values.update(longer=longer, longer_best=mean_rank_best(longer))
    by_steps = sweep(root, steps)
    return {**values, "steps": steps, "by_steps": sweep_table(by_steps)} if by_steps else values


def variants(root: str, *folders: str) -> dict:
    """Folders: each variant's sweep, scale_on's last (the paper has no value for it)."""
    *knobs, scale_on = folders
    lines, items = [], []
    for result in filter(None, (sweep(root, folder) for folder in knobs)):
        paper = result.config["values"][0]
        if result.knob in COST_CUTTERS:
            cost, words = COST_CUTTERS[result.knob]
            winner = cheapest_keeping(result, cost)
            rule = f"{words} among the values keeping {KEEPS:.0%} of {paper}'s objective"
        else:
            winner, rule = mean_rank_best(result), "lowest mean rank over the metrics"
        items.append({"name": f"{result.knob} {winner}", "kept": winner == paper})
        lines += [f"`--{result.knob}` ({result.paper}; {paper} is the paper's):", "",
                  *sweep_table(result), "",
                  f"- {rule}: {winner}; " + ("the paper's value stays." if winner == paper
                                             else f"**{winner} wins**."), ""]
    with suppress(NotMeasured):
        lines += ["`--scale_on` (the paper does not say how the two terms share a scale):", "",
                  *reported_knob(root, scale_on).lines]
    changed = [item["name"] for item in needed(items) if not item["kept"]]
    return {"items": items, "body": lines, "changed": changed,
            "verdict": "adopted: " + ", ".join(changed) if changed else "the paper's values stay"}


def learners_against_greedy(root: str, *folders: str, labels: list[str], against: dict) -> dict:
    """Learner runs (`labels` name them, the adopted setting first) against the greedy run of
    the last folder by one gain target."""
    *learners, greedy = folders
    items = [{**found, "name": label} for label, folder in zip(labels, learners)
             if (found := gain_target(root, folder, greedy_folder=greedy, **against))]
    needed(items and items[0]["name"] == labels[0])
    return {"items": items}


def facility_start(root: str, folder: str, screen: dict, least: float) -> dict:
    """Select's scored start, then the screen's rows, each its folder and value (and its folder
    at 20,000 rows)."""
    folder = os.path.join(root, folder)
    values = needed(scored_start(folder, least))
    rows = []
    for label, (sub, value, *at_20k) in screen.items():
        ratios = [ratio for ratio, _ in learner_ratios(os.path.join(folder, sub), value) or []]
        confirm = at_20k and learner_ratios(os.path.join(folder, "confirm-20k", *at_20k), value)
        if ratios:
            rows.append({"label": label, "ratios": ratios, "median": np.median(ratios),
                         "at_20k": confirm[0][0] if confirm else None})
    return {**values, "rows": rows}


def instrument(root: str, run: str, first: str) -> dict:
    """The calibrated proxy's run against the first proxy's tables."""
    free = needed(table_json(root, run, "tables", "table2.json"))
    point_c = needed(table_json(root, first, "table2.json"))
    primary, calibration = free["verdict"]["primary"], free["verdict"]["calibration"]
    junk = calibration["smallest_resolved"].get("junk")
    return {"primary": primary, "noise": free["snr"][primary]["noise"],
            "bound": point_c["power"]["bpb macro"]["paired_sd"] / 3,  # a third of the first's
            "junk": "none" if junk is None else junk, "junk_dose": np.inf if junk is None else junk,
            "null": calibration["null"]["difference"],
            "null_resolved": calibration["null"]["resolved"]}


def tabled(rows, right=()) -> list[str]:
    return markdown(pd.DataFrame(rows), right=right).splitlines()

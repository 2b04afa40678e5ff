"""The rules of `make findings`, as data: claims.yaml declares each claim (its folders, its rule,
its sentence and table templates; the schema is in docs/experiments.md) and names its measure, a
function here `@measure`d by that name that reads the folders into values (none: not measured)."""

from __future__ import annotations

import json
import operator
import os
import string
from collections import namedtuple
from contextlib import suppress
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from datamask.errors import UserError
from eval.tables import markdown
from reproduce.bench import blocks
from reproduce.bench.defaults import read_cells, shown_cells

from .common import lr_setting
from .downstream_report import arm_tables
from .length_bias import DIVERSITY, PAPER, QUALITY, band, percent, spread
from .records import (SweepResult, TimingResult, TimingRun, best_of, of_metric, read_result,
                      stop_sweeps)
from .sweep import objective_at, ratio_and_steps, seed_spread, time_to, times_over, window_s
from .timing import comparison, learner_steps

KEEPS = 0.99  # share of the exact or never-stopping value's objective a cheaper value must keep
# the variants that trade objective for a cost: the cost (a run's field) and its words
COST_CUTTERS = {"patience": ("steps_taken", "fewest mean steps"),
                "probes": ("wall_s", "fewest mean seconds")}
SCORED_START = ("best-from-start", "start")  # Facility's start as select takes it: folder, value
# bench-blocks' plans, each judging its runs: the merge round's, the neighbourhood partition's
BLOCK_PLANS = {"merge": blocks.merge_verdict, "partition": blocks.partition_verdict}
DECLARATIONS = os.path.join(os.path.dirname(__file__), "claims.yaml")
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
       "==": operator.eq, "!=": operator.ne}
COMBINE = {"all": all, "any": any, "every": all, "some": any}
# the keys of rules, cases, goals, texts and section parts (docs/experiments.md)
FORM_KEYS = {"measure", "op", "value", "times", *COMBINE, "holds", "when", "word", "name", "text",
             "each", "lines", "line", "join", "table", "columns", "right"}


Finding = namedtuple("Finding", ["here", "verdict", "lines"])


class NotMeasured(Exception):
    """The files a measure needs are missing."""


def needed(found):
    """`found`, where it is there (not None, empty or false); else the claim is not measured."""
    if not found:
        raise NotMeasured
    return found


class Template(string.Formatter):
    """str.format, where a spec "yes|no" picks by the value's truth, text shows as it is, a
    missing value (None, NaN, a field of one) as "-", a list entry by entry joined by ", "."""
    def get_field(self, name: str, args, kwargs):
        with suppress(AttributeError, TypeError):  # a field of a missing value is missing
            return super().get_field(name, args, kwargs)
        return None, name

    def format_field(self, value, spec: str) -> str:
        if "|" in spec:
            return spec.split("|")[0 if value else 1]
        if isinstance(value, (list, tuple)):
            return ", ".join(self.format_field(v, spec) for v in value)
        if value is None or isinstance(value, float) and np.isnan(value):
            return "-"
        return value if isinstance(value, str) else super().format_field(value, spec)


def fill(template: str, values) -> str:
    return Template().vformat(template, (), values if isinstance(values, dict) else vars(values))


def check(rule, values: dict) -> bool:
    """A rule as data: `measure` `op` `value` (times `times`; each may name a measure), a yes-or-no
    measure's name, `all`/`any` of rules, or `every`/`some` entry of a list meeting `holds`."""
    if isinstance(rule, str):
        return bool(values[rule])
    key = next((key for key in COMBINE if key in rule), None)
    if key in ("all", "any"):
        return COMBINE[key](check(r, values) for r in rule[key])
    if key:
        return COMBINE[key](check(rule["holds"], entry) for entry in values[rule[key]])
    op, value, times = (values.get(x, x) if isinstance(x, str) else x
                        for x in (rule["op"], rule["value"], rule.get("times", 1)))
    return bool(OPS[op](values[rule["measure"]], value * times))


def table(rows, columns: dict, right=(), values: dict | None = None) -> list[str]:
    """A Markdown table: a row per entry of `rows`, a column per header and cell template."""
    return markdown(pd.DataFrame([[fill(cell, row) for cell in columns.values()] for row in rows],
                                 columns=[fill(header, values or {}) for header in columns]),
                    right=[fill(header, values or {}) for header in right]).splitlines()


def nested(values: dict):
    """The dicts in `values`' lists, the deepest first, then `values`."""
    for entry in [e for v in values.values() if isinstance(v, list) for e in v]:
        yield from nested(entry) if isinstance(entry, dict) else ()
    yield values


def name_all(values: dict, named: dict, value) -> None:
    """Each named check or text, on every entry where its measures are found."""
    for entry in nested(values):
        for name, spec in named.items():
            with suppress(KeyError):
                entry[name] = value(spec, entry)


@dataclass(frozen=True)
class Claim:
    question: str
    paper: str  # the paper's figure ("-": a question this project adds)
    evidence: list[str]  # folders under the results root; the first is linked
    target: str  # the Make target that writes the first folder
    rule: str  # the rule in words
    decide: str  # the measure: the name a function here is registered by (`measure`)
    caveat: str = ""
    figures: list[str] = field(default_factory=list)  # PNGs under the root, shown if there
    parameters: dict = field(default_factory=dict)  # the measure's own inputs, by name
    commit: str = ""  # where the target has changed since: the commit whose target wrote it
    checks: dict = field(default_factory=dict)  # named rules, checked wherever their measures are
    goals: list = field(default_factory=list)  # items made of rules: a name, holds and text each
    holds: dict | str = field(default_factory=dict)  # the rule checked on each item
    partly: dict | str = field(default_factory=dict)  # where it fails, the middle word's rule
    words: list = ("holds", "does not hold")  # an item's words: holds, (partly,) does not
    verdict: str = "tally"  # how the items' words make the verdict: tally, grouped or parts
    cases: list = field(default_factory=list)  # else the verdict: the first case whose `when` holds
    by: str = "name"  # the item field a tally names
    texts: dict = field(default_factory=dict)  # named texts, each a template joined over a list
    here: str = ""  # the claims table's figure
    lines: list = field(default_factory=list)  # the section: templates, lists, tables

    @property
    def regenerate(self) -> str:
        """The command that writes the first folder again, at its commit where one is named."""
        return f"`make {self.target}`" + (f" at commit {self.commit}" if self.commit else "")

    def finding(self, root: str) -> Finding | None:
        try:
            values = MEASURES[self.decide](root, *self.evidence, **self.parameters)
        except NotMeasured:
            return None
        try:
            return self.judged(values if isinstance(values, dict) else {"items": values})
        except KeyError as missing:  # a rule or template naming a value the measure does not give
            raise UserError(f"claim {self.question!r}: its measure gives no {missing}") from None

    def judged(self, values: dict) -> Finding:
        """Checks, the rule on each item, texts, then the figure, the verdict and the lines."""
        if self.goals:
            values["items"] = [{"name": fill(goal["name"], values), "text": fill(goal["text"],
                                values), "ok": check(goal["holds"], values)} for goal in self.goals]
        name_all(values, self.checks, check)
        items = values.get("items") or [values]
        for item in items:
            item["ok"] = check(self.holds, item) if self.holds else item.get("ok")
            partly = not item["ok"] and self.partly and check(self.partly, item)
            item["word"] = self.words[1 if partly else -1 if not item["ok"] else 0]
        name_all(values, self.texts, lambda text, entry: text.get("join", ", ").join(
            fill(text["line"], each) for each in entry[text["each"]]))
        good = [str(item.get("name")) for item in items if item["ok"]]
        values.update(first=items[0], held=len(good), total=len(items),
                      holding=", ".join(good) or "none")
        lines = self.section(self.lines, values)
        while lines and not lines[-1]:
            lines.pop()
        verdict = next((fill(case["word"], values) for case in self.cases
                        if check(case.get("when", {"all": []}), values)), None)
        return Finding(fill(self.here, values), verdict or self.verdict_of(items), lines)

    def verdict_of(self, items: list[dict]) -> str:
        """tally: the word where every item (or group by `by`) holds or none does, else which
        hold; grouped: the items named by their word; parts: which checks held on which items."""
        yes, *_, no = words = self.words
        if self.verdict == "grouped":
            named = {word: [item["name"] for item in items if item["word"] == word]
                     for word in dict.fromkeys(item["word"] for item in items)}
            return next(iter(named)) if len(named) == 1 else "; ".join(
                f"{word} for {', '.join(names)}" for word, names in named.items())
        named = {}
        for item in items:
            named[item.get(self.by)] = named.get(item.get(self.by), True) and item["ok"]
        if self.verdict == "parts":
            named = {part: [i["name"] for i in items if i[part]] for part in self.checks}
            if any(named.values()) and any(len(n) < len(items) for n in named.values()):
                return f"{words[1]}: " + "; ".join(f"{part} on {', '.join(names)}"
                                                   for part, names in named.items() if names)
        good = [name for name, ok in named.items() if ok]
        if len(good) in (0, len(named)):
            return yes if good else no
        return f"{yes} for {', '.join(good)} only"

    def section(self, parts: list, values: dict) -> list[str]:
        """A section's lines: templates, lists of lines, tables, the parts again per entry."""
        lines = []
        for part in parts:
            if isinstance(part, dict) and "each" in part:
                lines += [line for entry in values[part["each"]]
                          for line in self.section(part["lines"], entry)]
            elif isinstance(part, dict):  # a table, left out where it has no rows
                lines += table(values[part["table"]], part["columns"], part.get("right", ()),
                               values) if values[part["table"]] else []
            elif isinstance(values.get(part), list):
                lines += values[part]
            else:
                with suppress(KeyError):
                    lines.append(fill(part, values))
        return lines


def unknown_keys(part) -> list[str]:
    """The keys all through a rule, case, goal, text or section part that none of them has."""
    if isinstance(part, list):
        return [key for entry in part for key in unknown_keys(entry)]
    return [key for key in part if key not in FORM_KEYS] + [
        key for name, entry in part.items() if name != "columns"
        for key in unknown_keys(entry)] if isinstance(part, dict) else []


def claim_errors(claim: dict) -> list[str]:
    """The keys of a declared claim that are unknown or missing, and a measure not here."""
    known = {f.name: f for f in fields(Claim)}
    errors = [f"unknown key {key!r}" for key in claim if key not in known] + [
        f"missing key {name!r}" for name, f in known.items()
        if name not in claim and f.default is f.default_factory is MISSING] + [
        f"no measure {claim.get('decide')!r}"] * (claim.get("decide") not in MEASURES)
    for name in ("holds", "partly", "checks", "cases", "goals", "texts", "lines"):
        part = claim.get(name) or {}
        errors += [f"unknown key {key!r} in {name}" for key in unknown_keys(
            list(part.values()) if name in ("checks", "texts") else part)]
    return errors


def load_claims(path: str = DECLARATIONS) -> tuple[Claim, ...]:
    """claims.yaml as Claims; a malformed claim is refused, naming the claim and the key."""
    declared = yaml.safe_load(Path(path).read_text())
    for claim in declared:
        errors = claim_errors(claim)
        if errors:
            raise UserError(f"{path}: claim {claim.get('question')!r}: {'; '.join(errors)}")
    return tuple(Claim(**claim) for claim in declared)


MEASURES = {}  # each measure by the name a claim's `decide` gives, as `measure` registered it


def measure(name: str, each_metric: bool = False):
    """Register the function as the measure `name`; `each_metric`: one of a metric's rows. A
    second measure of a name is refused when it is registered: a claim's `decide` names one."""
    def register(function):
        if name in MEASURES:
            raise ValueError(f"measure {name!r} is registered twice: {function.__qualname__} "
                             f"and the one before it")
        MEASURES[name] = per_metric(function) if each_metric else function
        return MEASURES[name]
    return register


def results(root: str, folder: str, name: str | None = None) -> SweepResult | TimingResult | None:
    """A results folder's record: `name`'s ("timing"), else a sweep's, named as its folder."""
    return read_result(os.path.join(root, folder), name or os.path.basename(folder))


def table_json(root: str, *parts: str) -> dict | None:
    path = Path(root, *parts)
    return json.loads(path.read_text()) if path.exists() else None


def mean_rank_best(result: SweepResult):
    """The value of the lowest mean rank over the metrics; ties go to the first listed."""
    rows = [s for s in result.summary if s.metric in result.metrics]
    frame = pd.DataFrame(rows)
    rank = frame.groupby("metric")["objective_mean"].rank(ascending=False, method="first")
    return rows[rank.groupby(frame["value"]).transform("mean").idxmin()].value


def cheapest_keeping(result: SweepResult, cost: str):
    """The value of least mean `cost` keeping KEEPS of the first (exact) value's objective."""
    exact, *cheaper = result.config["values"]
    objective = {(s.metric, s.value): s.objective_mean for s in result.summary}
    kept = [v for v in cheaper
            if all(objective[m, v] >= KEEPS * objective[m, exact] for m in result.metrics)]
    spent = {v: np.mean([getattr(r, cost) for r in result.runs if r.value == v]) for v in kept}
    return min(kept, key=spent.get) if kept else exact


def compared(root: str, folder: str, metric: str, n: int, greedy: str,
             greedy_folder: str | None = None) -> tuple[TimingRun, TimingRun] | None:
    """The learner's run and `greedy`'s (from `greedy_folder` where not measured beside it)."""
    found = results(root, folder, "timing")
    learner, other = (found and found.run_of(metric, n, label) for label in ("datamask", greedy))
    if greedy_folder and not (other and other.status == "measured"):
        alone = results(root, greedy_folder, "timing")
        other = alone and alone.run_of(metric, n, greedy)
    return (learner, other) if learner and other else None


@dataclass(frozen=True)
class GainTarget:
    """A gain target as claims.yaml declares it: the learner in `folder` against `greedy` at `n`
    rows, its gain `op` `least` times the greedy's, in at most `time_limit` times its time."""

    folder: str
    metric: str
    n: int
    greedy: str
    least: float
    op: str = ">="
    time_limit: float = np.inf
    greedy_folder: str | None = None

    def measured(self, root: str) -> dict | None:
        """Gain and time ratios against the greedy, beside the target."""
        runs = compared(root, self.folder, self.metric, self.n, self.greedy, self.greedy_folder)
        c = runs and comparison(*runs)
        return runs and {"run": runs[0], "other": runs[1], "steps": learner_steps(runs[0]),
                         "gain": c.gain_ratio, "time": c.time_ratio, "op": self.op,
                         "least": self.least, "time_limit": self.time_limit}


def sweep_rows(result: SweepResult) -> list[dict]:
    """A sweep's summary rows, each with its gain ratio and mean steps as table cells."""
    return [{**vars(s), **dict(zip(("ratio", "steps"), ratio_and_steps(result, s)))}
            for s in result.summary]


def learner_ratios(folder: str, value) -> list[tuple[float, object]] | None:
    """(gain ratio, run) per seed of a Facility sweep's value (random scores 0 there)."""
    result = next((read_result(folder, p.stem) for p in sorted(Path(folder).glob("*.json"))), None)
    return result and [(r.objective / result.greedy[0].objective, r)
                       for r in result.runs if r.value == value]


def scored_start(folder: str, least: float) -> dict | None:
    """Facility's start against the lazy greedy: median gain ratio at 3,000 rows, and at 20,000."""
    screen, confirm = (learner_ratios(os.path.join(folder, *at, SCORED_START[0]), SCORED_START[1])
                       for at in ((), ("confirm-20k",)))
    if not (screen and confirm):
        return None
    at_3k, at_20k = float(np.median([ratio for ratio, _ in screen])), confirm[0][0]
    return {"at_3k": at_3k, "at_20k": at_20k, "gain": min(at_3k, at_20k), "least": least,
            "op": ">=", "time": 0.0, "time_limit": np.inf}


def per_metric(of_rows):
    """A measure of a sweep, an item a metric (none where missing and `optional`)."""
    def measured(root: str, folder: str, optional: bool = False) -> dict:
        needed((result := results(root, folder)) or optional)
        return {"items": [{"name": m, **of_rows(result, of_metric(result.summary, m), m)}
                          for m in result.metrics] if result else []}
    return measured


@per_metric
def reported_knob(result: SweepResult, rows: list, metric: str) -> dict:
    """A knob the paper reports without a rule fixed here: best value, range, times."""
    return {"knob": result.knob, "best": result.best[metric], "rows": [vars(s) for s in rows],
            "low": min(s.objective_mean for s in rows), "high": max(s.objective_mean for s in rows)}


@measure("selection_time")
def selection_time(root: str, folder: str, equal_folder: str) -> dict:
    """The learner at select's defaults against the reference greedy, whether its start (step 0)
    wrote its selection, and the policy gradient's own figure: the learner from equal logits in
    `equal_folder` against that run's fast greedy (both measured)."""
    result = needed(results(root, folder, "timing"))
    learner, fast, ref = (result.run_of("DiSF", 100_000, label)
                          for label in ("datamask", "disf-greedy-fast", "disf-greedy"))
    needed(learner and ref)
    fit, equal = (result.fits["DiSF"]["disf-greedy"],
                  compared(root, equal_folder, "DiSF", 100_000, "disf-greedy-fast"))
    return {"learner": learner, "ref": ref, "share": learner.wall_s / ref.wall_s, "fit": fit,
            "steps": learner_steps(learner), "measured": ref.status == "measured",
            "start_written": learner.best_step == 0,
            "sizes": " and ".join(f"{n:,}" for n in fit.sizes),
            **({"fast": fast, "against": comparison(learner, fast)} if fast else {}),
            **({"equal": equal[0], "equal_against": comparison(*equal),
                "equal_steps": learner_steps(equal[0])} if equal else {})}


@measure("objective_targets")
def objective_targets(root: str, *folders: str, targets: dict, measured: dict) -> dict:
    """The declared targets: gain targets, or Facility's start (`scored_start`)."""
    items = []
    for name, target in targets.items():
        kind = "scored_start" if "scored_start" in target else "gain"
        found = (scored_start(os.path.join(root, target["scored_start"]), target["least"])
                 if kind == "scored_start" else GainTarget(**target).measured(root))
        items += [{**found, "name": name, "metric": target["metric"],
                   "measured": fill(measured[kind], found)}] if found else []
    return {"items": needed(items),  # Facility's scored start has no run: a start by definition
            "start_written": sum("run" not in i or i["run"].best_step == 0 for i in items)}


@measure("g_stability", each_metric=True)
def g_stability(result: SweepResult, rows: list, metric: str) -> dict:
    unstable, smallest = [s.value for s in rows if not s.stable], result.smallest_stable[metric]
    return {"smallest": "none" if smallest is None else smallest, "unstable": unstable,
            "unstable_low": min(unstable, default=np.inf),
            "unstable_high": max(unstable, default=-np.inf), "rows": [vars(s) for s in rows]}


@measure("lamb_tradeoff", each_metric=True)
def lamb_tradeoff(result: SweepResult, rows: list, metric: str) -> dict:
    """Objectives at different lamb are different functions: the claim is the trade itself."""
    low, high = sorted(rows, key=lambda s: s.value)[::len(rows) - 1]
    return {"low": low.value, "high": high.value, "quality_low": low.means["quality"],
            "quality_high": high.means["quality"], "metric_low": low.means[metric],
            "metric_high": high.means[metric]}


@measure("logprob_cost", each_metric=True)
def logprob_cost(result: SweepResult, rows: list, metric: str) -> dict:
    simple, exact = ({s.value: s for s in rows}[v] for v in ("simple", "exact"))
    return {"simple": simple, "exact": exact, "gap": exact.objective_mean - simple.objective_mean,
            "noise": max(simple.objective_std, exact.objective_std),
            "time": exact.wall_s_mean / simple.wall_s_mean}


@measure("one_shot", each_metric=True)
def one_shot(result, rows: list, metric: str) -> dict:
    learner = (by := {s.method: s for s in rows})["datamask"]
    best = best_of(s for m, s in by.items() if m not in ("datamask", "joint-greedy"))
    return {"learner": learner, "best": best, "joint": by.get("joint-greedy"),
            "floor": learner.objective_mean - learner.objective_std,
            "best_objective": best.objective_mean}


@measure("length_bias")
def length_bias(root: str, folder: str, least: float) -> dict:
    """Per corpus: the quality selection's length ratio, each greedy's, each selection."""
    result = needed(read_result(os.path.join(root, folder), "length-bias"))
    items = []
    for corpus in result.corpora:
        quality = (by := result.of(corpus.name)).get(QUALITY)
        items.append({
            "name": corpus.name, "corpus": corpus, "band": band(corpus), "judged": QUALITY,
            "least": least, "paper": [f"{name} {percent(ratio)}" for name, ratio in PAPER.items()],
            "quality_ratio": quality.ratio_mean if quality else -np.inf,
            "quality_against": quality and quality.against_chance,
            "quality": quality and percent(quality.ratio_mean),
            "greedies": [{"name": name, "short": name in by and by[name].against_chance == "short"}
                         for name in DIVERSITY],
            "greedy_ratios": [percent(by[name].ratio_mean) for name in DIVERSITY if name in by],
            "selections": [{**vars(s), "spread": spread(s)} for s in by.values()]})
    return {"items": items}


@measure("time_to_objective")
def time_to_objective(root: str, folder: str, fixed: str, chain: list[list],
                      levels: list[float]) -> dict:
    """An --equal_time sweep (named as the sweep `fixed`) by metric: the window (the shortest run's
    span), the reference (the best median objective at its end in `chain`), times to level x
    reference (inf: not reached), per level and link of `chain` each group's faster value."""
    result = needed(results(root, folder, os.path.basename(fixed)))
    items, rows = [], []
    for metric in result.metrics:
        by_value = {v: [r for r in of_metric(result.runs, metric) if r.value == v]
                    for v in result.config["values"]}
        window = window_s([run for runs in by_value.values() for run in runs])
        at = {v: np.array([objective_at(r, window) for r in runs]) for v, runs in by_value.items()}
        reference = max(float(np.median(at[v])) for group in chain for v in group)
        times = {(v, level): np.array([time_to(r, level * reference, window) for r in runs])
                 for v, runs in by_value.items() for level in levels}
        median = {key: float(np.median(t)) for key, t in times.items()}
        rows += [{"metric": metric, "value": str(v), "steps": runs[0].params["n_epochs"],
                  "objective": seed_spread(at[v], ".3f"),
                  "times": [seed_spread(times[v, level]) for level in levels]}
                 for v, runs in by_value.items()]

        def link(level: float, *groups: list) -> dict:
            before, after = (min(group, key=lambda v: median[v, level]) for group in groups)
            t_before, t_after = median[before, level], median[after, level]
            return {"level": level, "before": before, "after": after, "t_before": t_before,
                    "t_after": t_after, "ratio": times_over(after, t_after, before, t_before)}
        items.append({"name": metric, "window": window, "reference": reference,
                      "cuts": [link(level, *pair) for level in levels
                               for pair in zip(chain, chain[1:])],
                      "last": link(levels[-1], chain[0], chain[-1])})
    groups = ["/".join(map(str, group)) for group in chain]
    return {"items": items, "rows": rows, "knob": result.knob, "top": levels[-1],
            "order": " -> ".join(groups), "earliest": groups[0], "latest": groups[-1],
            "fixed": fixed, "reported": reported_knob(root, fixed, optional=True)["items"]}


def arms(root: str, run: str, show: dict | None = None) -> dict:
    """Both arms' tables of a downstream run, their verdict lines (`show`n ones), arms.md."""
    found = [{"arm": arm, "Arm": arm.capitalize(), "verdict": table["verdict"], "ours": [
                  f"{m.split('@')[0].removeprefix('datamask-')} {v}"
                  for m, v in table["verdict"]["vs_random"].items() if m.startswith("datamask-")],
              "shown": [{"line": line} for line in table["verdict"]["lines"]
                        if show is None or any(phrase in line for phrase in show[arm])]}
             for arm, table in arm_tables(Path(root, run)).items()]
    needed(found and found[0]["arm"] == "free")
    arms_md = Path(root, run, "arms.md")
    return {"arms": found, "arms_md": arms_md.read_text().split("\n", 2)[2].strip().splitlines()
            + [""] if arms_md.exists() else []}


@measure("table2_gain")
def table2_gain(root: str, run: str, first: str) -> dict:
    """Both arms of the calibrated proxy's run, then the first proxy's verdict lines."""
    values = arms(root, run)
    point_c = table_json(root, first, "table2.json")
    return {**values, **({"first_proxy": first} if point_c else {}),
            "first_lines": [{"line": line} for line in point_c["verdict"]["lines"]]
            if point_c else [], "outcomes": [{"outcome": o["outcome"]} for arm in values["arms"]
                                             for o in arm["verdict"]["ordering"].values()]}


@measure("table2_bound")
def table2_bound(root: str, run: str, earlier: str, paper_row: str, today_row: str,
                 show: dict, claim_words: dict) -> dict:
    """The drawn design: per primary in the free arm, `paper_row`'s and `today_row`'s outcomes,
    the paper row's bound and, where eligible, the claim's word (`claim_words` of its outcome)."""
    values = arms(root, run, show)
    values["primaries"] = [{
        "name": primary, "eligible": on["calibration"]["eligible"], "paper_row": paper_row,
        "paper": on["vs_random"].get(paper_row, "not run"), "today_row": today_row,
        "today": on["vs_random"].get(today_row, "not run"),
        "bound": (bound := on["bounds"].get(paper_row)) and bound["most"] is not None
        and bound["most"] > 0 and not bound["resolved_better"] and bound["most"]}
        for primary, on in needed(values["arms"][0]["verdict"].get("by_primary")).items()]
    values["judged"] = [{"name": p["name"], "word": claim_words[p["paper"]]}
                        for p in values["primaries"] if p["eligible"] and p["paper"] != "not run"]
    before = table_json(root, earlier, "tables", "table2.json")
    return {**values, **({"earlier": earlier, "earlier_ours": [
        f"{m} {v}" for m, v in before["verdict"]["vs_random"].items()
        if m.startswith("datamask-")]} if before else {})}


@measure("by_rows")
def by_rows(root: str, folder: str, least: float) -> dict:
    result = needed(results(root, folder, "timing"))
    done = {m: [c for c in of_metric(result.comparisons, m) if c.gain_ratio is not None]
            for m in result.metrics}
    items = [{"name": m, "least": least, "done": len(done[m]), "cross": result.crossover.get(m),
              "good": sum(c.gain_ratio >= least for c in done[m])} for m in result.metrics]
    reference = max((c for c in of_metric(result.comparisons, "DiSF")
                     if c.greedy_role == "reference"), key=lambda c: c.n)
    return {"items": items, "comparisons": result.comparisons, "reference": reference,
            "reference_share": reference.time_ratio}


@measure("gradient_adds")
def gradient_adds(root: str, stop: str, *folders: str) -> dict:
    """Learner runs from a scored greedy start (ablation-stop, timing, Facility's start, bench-
    defaults): the stopping rule's or fixed steps, a later step written, objective over the
    start's (NaN: no curve kept); an item per metric and lamb."""
    *timed, facility, bench = folders
    runs = [(c.metric, c.lamb, c.rows, True, c.written_step > 0,
             c.objective_written / c.objective_start)
            for c in read_cells(Path(root, bench)).itertuples()]
    for n, result in stop_sweeps(Path(root, stop)):
        runs += [(r.metric, result.config["lamb"], n, r.value != result.config["values"][0],
                  (r.best_step or 0) > 0, r.objective / r.curve[0].objective) for r in result.runs]
    runs += [(r.metric, 0.0, r.n, True, r.best_step > 0, np.nan)
             for result in filter(None, (results(root, folder, "timing") for folder in timed))
             for r in result.runs if r.label == "datamask" and r.best_step is not None]
    runs += [("Facility", 0.0, 3_000, True, r.best_step > 0, np.nan) for _, r in learner_ratios(
        os.path.join(root, facility, SCORED_START[0]), SCORED_START[1]) or []]
    runs = pd.DataFrame(needed(runs), columns=["metric", "lamb", "rows", "rule", "later", "ratio"])
    return {"later": int(runs[runs.rule].later.sum()), "runs": int(runs.rule.sum()), "items": [
        {"name": f"{metric} at lamb {lamb:g}", "metric": metric, "lamb": lamb,
         "rows": sorted(set(group.rows)), "later": int(group[group.rule].later.sum()),
         "runs": int(group.rule.sum()), "ratio": group[group.rule].ratio.mean(),
         "fixed": group[~group.rule].ratio.mean()}
        for (metric, lamb), group in runs.groupby(["metric", "lamb"], sort=False)]}


@measure("start_against_equal")
def start_against_equal(root: str, *folders: str, greedies: dict) -> dict:
    """Timing runs from equal logits and the greedy start in pairs, then 1,000,000 rows' greedy."""
    *pairs, greedy_1m = folders
    rows = []
    for equal, start in zip(pairs[::2], pairs[1::2]):
        result = results(root, start, "timing")
        for r in [r for r in result.runs if r.label == "datamask"] if result else []:
            runs = [compared(root, f, r.metric, r.n, greedies[r.metric],
                             greedy_1m if r.n >= 1_000_000 else None) for f in (equal, start)]
            if None not in runs:
                before, after = (comparison(*pair) for pair in runs)
                rows.append({"name": f"{r.metric} at {r.n:,} rows"
                             + (" (40c)" if start.endswith("-40c") else ""),
                             "greedy": greedies[r.metric], "before": before, "after": after,
                             "gain_equal": before.gain_ratio, "gain_start": after.gain_ratio})
    # a run repeated on the same rows counts once, by its last
    return {"rows": needed(rows), "items": list({row["name"]: row for row in rows}.values())}


@measure("defaults_against_greedies")
def defaults_against_greedies(root: str, today: str, *rounds: str, keep_of_greedy: float,
                              adopted: dict[str, list[str]], beside: list[dict]) -> dict:
    """`today`'s bench-defaults cells, each replaced by the same cell of a round that adopted its
    metric (`adopted`: folder -> "<metric>" or "<metric> lamb <lamb>", in order); then `beside`'s
    tables (a `title`, the cells of `folder` or its `parts`). `rounds` are only cited."""
    needed(not (cells := read_cells(Path(root, today))).empty)
    key = ["family", "rows", "ratio", "metric", "lamb"]
    for folder, metrics in adopted.items():
        later = read_cells(Path(root, folder))
        if not later.empty:  # its cells replace the same cells run before
            later = later[[any(cell.metric == metric and (not lamb or cell.lamb == float(lamb))
                               for metric, _, lamb in (e.partition(" lamb ") for e in metrics))
                           for cell in later.itertuples()]]
            before = cells.merge(later[key], on=key, how="left", indicator=True)
            cells = pd.concat([before[before._merge == "left_only"].drop(columns="_merge"),
                               later], ignore_index=True)
    order = {"Pair_simi": 0, "Facility": 1, "DiSF": 2}
    cells = cells.sort_values(key[:3] + ["lamb", "metric"], key=lambda c: c.map(order)
                              if c.name == "metric" else c, kind="stable")
    from_round = "; ".join(f"{', '.join(metrics)} from `{folder}/`"
                           for folder, metrics in adopted.items())
    tables = [(f"At select's defaults (`{today}/`'s cells; then {from_round}, where each ran):",
               cells)] + [(side["title"], read_cells(Path(root, side["folder"]),
                                                     *side.get("parts", ()))) for side in beside]
    # a negative ratio is a greedy that lost to random: the cell's verdict says if the gain held
    return {"tables": [{"title": title, "cells": shown_cells(frame)} for title, frame in tables
                       if not frame.empty], "cells": len(cells), "passed": int(cells.passes.sum()),
            "kept": int(((cells.gain_ratio >= keep_of_greedy) | cells.passes).sum())}


@measure("stopping_rule")
def stopping_rule(root: str, folder: str) -> dict:
    """The rule's mean objective and time over the fixed steps', per sweep and metric."""
    kept = []
    for n, result in stop_sweeps(Path(root, folder)):
        fixed, rule = result.config["values"]
        means = pd.DataFrame(result.summary).set_index(["value", "metric"])[
            ["objective_mean", "wall_s_mean"]]
        kept.append((means.loc[rule] / means.loc[fixed]).assign(rows=n).reset_index())
    frame = pd.concat(needed(kept))
    return {"rows": frame.to_dict("records"), "worst": frame.objective_mean.min()}


@measure("learning_rate")
def learning_rate(root: str, rates: str, steps: str) -> dict:
    """The rates' sweep by metric, its longer check in 1000-steps/, the steps' sweep."""
    result = needed(results(root, rates))
    metrics = []
    for metric in result.metrics:
        best = best_of(rows := of_metric(result.summary, metric))
        high, low = (pick(rows, key=lambda s: float(s.value.split(":")[1])) for pick in (max, min))
        metrics.append({"name": metric, "best": best, "high": high, "low": low,
                        "floor": best.objective_mean - best.objective_std,
                        "high_objective": high.objective_mean,
                        "gain": best.objective_mean - best.start_mean,
                        "low_gain": low.objective_mean - low.start_mean})
    longer, by_steps = results(root, f"{rates}/1000-steps", "ablation-lr"), results(root, steps)
    return {"metrics": metrics, "overall": mean_rank_best(result), "default": lr_setting(),
            "rates": rates, "steps": steps, "by_steps": sweep_rows(by_steps) if by_steps else [],
            **({"longer": longer, "longer_best": mean_rank_best(longer)} if longer else {})}


@measure("variants")
def variants(root: str, *folders: str) -> dict:
    """Each variant's sweep and its winner by its rule, then scale_on's, reported only."""
    *knobs, scale_on = folders
    items = []
    for result in filter(None, (results(root, folder) for folder in knobs)):
        paper = result.config["values"][0]
        cost, words = COST_CUTTERS.get(result.knob, (None, None))
        items.append({"knob": result.knob, "paper": result.paper, "first": paper,
                      "rows": sweep_rows(result), "cost": words, "keeps": KEEPS,
                      "winner": (winner := cheapest_keeping(result, cost) if cost
                                 else mean_rank_best(result)), "kept": winner == paper,
                      "name": f"{result.knob} {winner}"})
    return {"items": needed(items), "reported": reported_knob(root, scale_on, True)["items"],
            "changed": [item["name"] for item in items if not item["kept"]]}


@measure("learners_against_greedy")
def learners_against_greedy(root: str, *folders: str, labels: list[str], against: dict) -> dict:
    """Learner runs (`labels`, the adopted first) against one gain target."""
    *learners, greedy = folders
    items = [{**found, "name": label} for label, folder in zip(labels, learners)
             if (found := GainTarget(folder, greedy_folder=greedy, **against).measured(root))]
    needed(items and items[0]["name"] == labels[0])
    return {"items": items}


@measure("facility_start")
def facility_start(root: str, folder: str, screen: dict, least: float) -> dict:
    """Select's scored start, then the screen's rows: folder, value (and at 20k)."""
    folder, rows = os.path.join(root, folder), []
    for label, (sub, value, *at_20k) in screen.items():
        ratios = [ratio for ratio, _ in learner_ratios(os.path.join(folder, sub), value) or []]
        confirm = at_20k and learner_ratios(os.path.join(folder, "confirm-20k", *at_20k), value)
        rows += [{"label": label, "ratios": ratios, "median": np.median(ratios),
                  "at_20k": confirm[0][0] if confirm else None}] if ratios else []
    return {**needed(scored_start(folder, least)), "rows": rows}


@measure("recorded")
def recorded(root: str, folder: str, file: str, plan: str | None = None, **rule) -> dict | list:
    """A bench's own record (its verdict where it judges its runs by its plan), as it wrote it;
    with `plan`, its runs judged here by that plan's rule (BLOCK_PLANS: `make bench-blocks`')."""
    record = needed(table_json(root, folder, file))
    return needed(BLOCK_PLANS[plan](record["runs"], **rule)) if plan else record


@measure("instrument")
def instrument(root: str, run: str, first: str) -> dict:
    """The calibrated proxy's run against the first proxy's tables."""
    free = needed(table_json(root, run, "tables", "table2.json"))
    point_c = needed(table_json(root, first, "table2.json"))
    primary, calibration = free["verdict"]["primary"], free["verdict"]["calibration"]
    junk = calibration["smallest_resolved"].get("junk")
    return {"primary": primary, "noise": free["snr"][primary]["noise"],
            "bound": point_c["power"]["bpb macro"]["paired_sd"] / 3,  # a third of the first's
            "junk": "none" if junk is None else junk, "junk_dose": np.inf if junk is None else junk,
            "null": calibration["null"]["difference"], "resolved": calibration["null"]["resolved"]}

"""The downstream verdict: a rule fixed before any downstream result existed (written with the
evaluation code, commit "eval/verdict.py"), applied mechanically to the tables' JSON.

`verdict(table)` takes the dict eval/tables.py writes as table2.json and returns the rule, each
part's outcome and the sentences the report prints; `verdict_markdown` formats them.
"""

from __future__ import annotations

from .calibration import NULL, dose_label, dose_response, parse_dose
from .draws import drawn_from
from .stats import paired_difference, seeds_to_resolve

PRIMARY = "bpb macro"
RULE = """\
Primary metric: macro bits per byte over the held-out domains (lower is better). Every comparison
is a paired difference over the training seeds both methods share (A - B on each seed), with its
two-sided 95% Student t interval (n - 1 degrees of freedom, n = shared seeds); a difference is
resolved when that interval excludes 0. Fewer than 2 shared seeds: nothing is resolved.
1. Power. The positive control (planted junk and duplicates kept first) is separated from random
   when the interval of control - random excludes 0. If it is not, the report states that the
   model or token budget is too small to resolve anything at this scale, and an unresolved
   difference below says nothing either way.
2. Versus random. A method beats random downstream when the interval of method - random lies
   entirely below 0; it is worse than random when the interval lies entirely above 0; otherwise
   unresolved. The multiple-choice metrics (accuracy, correct_prob_norm) are reported beside it
   with the same paired intervals and do not change this verdict.
3. The paper's ordering (Table 2: the DATAMASK selection trains a better model than every other
   selection). For each datamask variant V (a method whose name starts with "datamask"), against
   every other method M except the control and the other datamask variants (random included):
   the ordering holds for V when every interval of V - M lies entirely below 0; it is
   contradicted when some interval of V - M lies entirely above 0; otherwise unresolved.
"""


RULE_CALIBRATION = """\
1b. Calibration (runs with the null or a dose series; reproduce/results/downstream/proxy-plan.md,
   fixed before its runs). The null (random-null, a second random selection) must be unresolved
   against random; if it is resolved the instrument is miscalibrated and no line below is read as
   evidence. Each dose series (junk-<d>: a fraction d of random's documents replaced by junk of
   the same domain and length; dup-<d>: by copies of other selected documents) states its
   smallest resolved dose, the smallest d whose interval lies entirely above 0 (worse); none
   means this run cannot see that harm. Calibration selections are not methods: rules 2 and 3
   leave them out.
"""


def classify(diff: dict) -> str:
    """'below 0', 'above 0' or 'unresolved' for a paired difference (lower is better)."""
    if not diff["resolved"]:
        return "unresolved"
    return "below 0" if diff["high"] < 0 else "above 0"


def _seeds_needed(d: dict) -> str:
    """How many seeds the control's observed difference would need at its observed spread."""
    if d["sd"] is None:
        return ""
    needed = seeds_to_resolve(d["mean"], d["sd"])
    size = f"about {needed}" if needed is not None else "more than 10,000"
    return (f" At the spread measured (paired sd {d['sd']:.4f} over {d['n']} seeds), the "
            f"observed difference {d['mean']:+.4f} would need {size} seeds per method to be "
            f"resolved (an estimate from {d['n']} seeds).")


def verdict(table: dict, reference: str = "random", control: str = "control",
            paper_prefix: str = "datamask", primary: str = PRIMARY,
            calibrated_by: tuple[str, dict] | None = None) -> dict:
    """Apply RULE (and RULE_CALIBRATION where the table has calibration selections) to the
    tables' JSON on the `primary` column: {rule, primary, control, calibration, vs_random,
    ordering, lines}. `calibrated_by` (name, table2.json of another arm of the same run: same
    proxy, same seeds) calibrates a table without a control or calibration rows of its own: the
    stratified arm reads the free arm's null and doses."""
    per_seed = {m: dict(zip(map(int, entry["seeds"]), entry["cells"][primary]["values"]))
                for m, entry in table["methods"].items() if primary in entry["cells"]}
    calibration = [m for m in per_seed if m == NULL or parse_dose(m)]
    # the reference's other draws measure its selection noise (eval/draws.py): not methods
    not_methods = calibration + [m for m in per_seed
                                 if m != reference and drawn_from(m) == reference]
    shared = (calibrated_by if calibrated_by and not calibration and control not in per_seed
              and calibrated_by[1]["verdict"]["calibration"] else None)
    rule = RULE + (RULE_CALIBRATION if calibration or shared else "") + (
        "" if primary == PRIMARY else f"Primary metric of this run: {primary}, in place of macro "
                                      f"bits per byte (chosen by the rule of its plan).\n")
    lines = []
    if reference not in per_seed:
        return {"rule": rule, "primary": primary, "control": None, "calibration": None,
                "vs_random": {}, "ordering": {},
                "lines": [f"No '{reference}' run with {primary}: the rule cannot be applied."]}

    def diff(a: str, b: str) -> dict:
        return paired_difference(per_seed[a], per_seed[b])

    if control in per_seed:
        d = diff(control, reference)
        separated = d["resolved"]
        status = {"separated": separated, "difference": d}
        if separated:
            direction = "worse" if d["mean"] > 0 else "better"
            lines.append(f"Power: the positive control is separated from random ({control} - "
                         f"{reference} = {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] "
                         f"bits/byte over {d['n']} seeds; the control is {direction}).")
        else:
            interval = (f"[{d['low']:+.4f}, {d['high']:+.4f}]" if d["low"] is not None
                        else f"no interval with {d['n']} shared seed(s)")
            lines.append(f"Power: the positive control is NOT separated from random ({interval}):"
                         f" the model or token budget is too small to resolve anything at this "
                         f"scale; unresolved differences below say nothing either way."
                         + _seeds_needed(d))
    elif shared:
        status = None
    elif not calibration:
        status = None
        lines.append(f"Power: no '{control}' run, so this run's power is untested; unresolved "
                     f"differences below say nothing either way.")
    else:
        status = None
    if calibration:
        calibrated = calibration_lines(table, per_seed, reference, primary, lines)
    elif shared:
        calibrated = shared_calibration(table, reference, *shared, lines)
    else:
        calibrated = None

    wording = {"below 0": "beats random", "above 0": "worse than random",
               "unresolved": "unresolved"}
    vs_random = {}
    for m in per_seed:
        if m in (reference, control) or m in not_methods:
            continue
        vs_random[m] = wording[classify(diff(m, reference))]
        lines.append(f"{m}: {vs_random[m]} (macro bits/byte, paired 95% CI).")

    ordering = {}
    variants = [m for m in per_seed if m.startswith(paper_prefix)]
    others = [m for m in per_seed if m != control and m not in not_methods
              and not m.startswith(paper_prefix)]
    for v in variants:
        outcomes = {m: classify(diff(v, m)) for m in others}
        if not outcomes:
            ordering[v] = {"outcome": "unresolved", "against": {}}
        elif any(o == "above 0" for o in outcomes.values()):
            ordering[v] = {"outcome": "contradicted", "against": outcomes}
        elif all(o == "below 0" for o in outcomes.values()):
            ordering[v] = {"outcome": "holds", "against": outcomes}
        else:
            ordering[v] = {"outcome": "unresolved", "against": outcomes}
        better = sorted(m for m, o in outcomes.items() if o == "above 0")
        lines.append(f"Paper's ordering for {v}: {ordering[v]['outcome']}"
                     + (f" ({', '.join(better)} resolved better)" if better else "")
                     + f" against {', '.join(others) or 'no other method'}.")
    if not variants:
        lines.append(f"Paper's ordering: no method named {paper_prefix}*; not tested.")
    return {"rule": rule, "primary": primary, "control": status, "calibration": calibrated,
            "vs_random": vs_random, "ordering": ordering, "lines": lines}


def calibration_lines(table: dict, per_seed: dict, reference: str, primary: str,
                      lines: list[str]) -> dict:
    """RULE_CALIBRATION applied: the null's outcome and each series' smallest resolved dose,
    appended to `lines`; returns {null, smallest_resolved}."""
    null = None
    if NULL in per_seed:
        d = paired_difference(per_seed[NULL], per_seed[reference])
        null = {"resolved": d["resolved"], "difference": d}
    smallest = {series: entry["smallest_resolved"]
                for series, entry in dose_response(table, primary).items()}
    calibrated = {"null": null, "smallest_resolved": smallest}
    lines += calibration_outcome(calibrated, reference)
    return calibrated


def calibration_outcome(calibrated: dict, reference: str) -> list[str]:
    """The lines that state a calibration ({null, smallest_resolved}) against `reference`."""
    lines = []
    if calibrated["null"]:
        d = calibrated["null"]["difference"]
        interval = (f"[{d['low']:+.4f}, {d['high']:+.4f}]" if d["low"] is not None
                    else f"no interval with {d['n']} shared seed(s)")
        lines.append(f"Calibration: the null ({NULL} - {reference} = {d['mean']:+.4f} {interval})"
                     + (" is RESOLVED: the instrument is miscalibrated at this size, and no line "
                        "below is evidence." if d["resolved"] else " is unresolved, as it must "
                                                                   "be."))
    for series, dose in calibrated["smallest_resolved"].items():
        lines.append(f"Calibration: the smallest resolved {series} dose is "
                     + (f"{dose:g} ({dose_label(series, dose)} worse than {reference})."
                        if dose is not None else "none: this run cannot see that harm."))
    return lines


def shared_calibration(table: dict, reference: str, name: str, other: dict,
                       lines: list[str]) -> dict:
    """RULE_CALIBRATION read off another arm's table (`other`, called `name`): which rows
    calibrate this one, then their outcome, appended to `lines`; returns the other arm's
    {null, smallest_resolved} with `from` (its reference) and `seeds` (those both arms ran)."""
    seeds = sorted({int(s) for e in table["methods"].values() for s in e["seeds"]})
    theirs = sorted({int(s) for e in other["methods"].values() for s in e["seeds"]})
    same = "same seeds" if seeds == theirs else f"seeds {' '.join(map(str, theirs))} there"
    lines.append(f"Calibration: this arm has no calibration rows of its own; its calibration is "
                 f"{name}'s rows (against {other['reference']}; same proxy, {same}).")
    lines += calibration_outcome(other["verdict"]["calibration"], other["reference"])
    return {**other["verdict"]["calibration"], "from": other["reference"], "seeds": theirs}


def verdict_markdown(result: dict) -> str:
    """The verdict section of the report: the fixed rule, then its outcome line by line."""
    return ("## Verdict (rule fixed before the results)\n\n```\n" + result["rule"] + "```\n\n"
            + "\n".join(f"- {line}" for line in result["lines"]) + "\n")

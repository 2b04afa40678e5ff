"""The downstream verdict: a rule fixed before any downstream result existed (written with the
evaluation code, commit "eval/verdict.py"), applied mechanically to the tables' JSON.

`verdict(table)` takes the dict eval/tables.py writes as table2.json and returns the rule, each
part's outcome and the sentences the report prints; `verdict_markdown` formats them.
"""

from __future__ import annotations

from .calibration import NULL, dose_label, dose_response, parse_dose
from .draws import draw_groups, drawn_from, selection_difference
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


RULE_DRAWS = """\
Primary metrics: {primaries} (lower is better). The reference was selected several times
(reproduce/results/downstream/third-design-plan.md, fixed before its runs); every difference is
a method's mean over its selection draws minus the reference's over its draws, paired over the
training seeds both share, with the spread between the reference's draws in its two-sided 95%
interval (SE^2 = sd^2/S + V(1/M + 1/R), Welch-Satterthwaite degrees of freedom; eval/draws.py);
it is resolved when the interval excludes 0.
1. Calibration, per primary: the null's false positives over every pair of the reference's draws
   (a primary is eligible only where at most 1 pair in 10 is resolved, read in the free arm); the
   smallest resolved junk and dup doses (paired with the draw they were built from); the SNR; the
   minimum detectable difference at 80% power of a one-draw method.
2. Versus random, per primary: better where the interval lies entirely below 0, worse where
   entirely above, otherwise unresolved. On a primary that is not eligible the outcome is
   reported and decides nothing.
3. The paper's claim as a bound, free arm, for datamask-paper and datamask-Pair_simi on each
   eligible primary: resolved better, its gain and interval; otherwise its gain over random, if
   any, is below the interval's far end, stated beside the junk dose whose mean harm is nearest
   (interpolated linearly between the doses run, from dose 0 at no harm).
4. What the policy gradient adds: datamask-Pair_simi and datamask-paper each against greedy-start
   (its greedy start with no step), the same test with every draw on both sides.
Calibration selections and the reference's own draws are not methods.
"""
BOUNDED = ("datamask-paper", "datamask-Pair_simi")  # the paper's claim, as FineWeb-Mask and today
GREEDY_START = "greedy-start"
ELIGIBLE_RATE = 0.1  # at most 1 of the 10 pairs of five draws


# how the verdict words a method's classified difference with random
AGAINST_RANDOM = {"below 0": "beats random", "above 0": "worse than random",
                  "unresolved": "unresolved"}


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
    stratified arm reads the free arm's null and doses. `primary` may be several columns; a table
    whose reference was drawn several times is judged by RULE_DRAWS on each of them, any other by
    RULE on the first."""
    primaries = [primary] if isinstance(primary, str) else list(primary)
    primary = primaries[0]
    if table.get("selection_noise"):
        return draws_verdict(table, reference, primaries, calibrated_by)
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

    vs_random = {}
    for m in per_seed:
        if m in (reference, control) or m in not_methods:
            continue
        vs_random[m] = AGAINST_RANDOM[classify(diff(m, reference))]
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


def draws_verdict(table: dict, reference: str, primaries: list[str],
                  calibrated_by: tuple[str, dict] | None) -> dict:
    """RULE_DRAWS applied to each primary: {rule, primary (the first), primaries, control,
    calibration and vs_random (the first primary's), ordering, by_primary: {primary:
    {calibration, vs_random, differences, bounds, policy_gradient}}, lines}."""
    noise = table["selection_noise"]
    suffix = reference.removeprefix("random")  # '' in the free arm, '@strat' in the stratified
    other = calibrated_by[1] if calibrated_by else None
    groups = draw_groups(table["methods"])
    by_primary, lines = {}, []
    for primary in primaries:
        if primary not in noise:
            lines.append(f"Calibration: {primary}: no column of this name with the reference's "
                         f"draws; not judged.")
            continue
        mine = noise[primary]
        calibration = draws_calibration(table, primary, mine)
        if other and not calibration["smallest_resolved"]:  # no dose rows here: the free arm's
            theirs = other["verdict"]["by_primary"][primary]["calibration"]
            calibration = {**theirs, "own_false_positives": mine["null"],
                           "from": other["reference"]}
            lines.append(f"Calibration: {primary}: this arm has no calibration rows of its own; "
                         f"its eligibility and doses are {calibrated_by[0]}'s (same proxy, same "
                         f"seeds); its own null resolves {mine['null']['resolved']} of "
                         f"{mine['null']['pairs']} pairs of {reference}'s draws.")
        lines += draws_calibration_lines(primary, calibration, reference)
        eligible = calibration["eligible"]
        differences = {m: d for m, d in mine["vs_reference"].items() if not parse_dose(m)}
        vs_random = {m: AGAINST_RANDOM[classify(d)] for m, d in differences.items()}
        for m, outcome in vs_random.items():
            d = differences[m]
            lines.append(f"{m}: {outcome} on {primary} ({_interval(d)}, {d['draws'][0]} draw(s) "
                         f"against {d['draws'][1]})" + ("" if eligible else "; not eligible, "
                                                                            "decides nothing")
                         + ".")
        bounds = {}
        if eligible and not suffix:
            for method in BOUNDED:
                if method in differences:
                    bounds[method] = bound(differences[method], calibration["junk_harm"])
                    lines.append(f"The paper's claim, {method}, on {primary}: "
                                 + bound_sentence(bounds[method]))
        gradient = {}
        for method in BOUNDED:
            label, start = method + suffix, GREEDY_START + suffix
            if label in groups and start in groups:
                # random's between-draw variance and its draws, as selection_noise found them
                d = selection_difference(_draws(table, groups[label], primary),
                                         _draws(table, groups[start], primary),
                                         mine["sd_between_draws"] ** 2, mine["draws"])
                gradient[method] = {"difference": d, "outcome": classify(d)}
                word = {"below 0": "better than", "above 0": "worse than",
                        "unresolved": "unresolved against"}[gradient[method]["outcome"]]
                lines.append(f"What the policy gradient adds, {label} - {start} on {primary}: "
                             f"{word} its start ({_interval(d)}).")
        by_primary[primary] = {"calibration": calibration, "vs_random": vs_random,
                               "differences": differences, "bounds": bounds,
                               "policy_gradient": gradient}
    first = by_primary.get(primaries[0], {})
    return {"rule": RULE_DRAWS.format(primaries=", ".join(primaries)), "primary": primaries[0],
            "primaries": primaries, "control": None, "calibration": first.get("calibration"),
            "vs_random": first.get("vs_random", {}), "ordering": {}, "by_primary": by_primary,
            "lines": lines}


def _draws(table: dict, labels: list[str], column: str) -> list[dict]:
    """Each label's {training seed: value} of `column`."""
    return [dict(zip(map(int, table["methods"][label]["seeds"]),
                     table["methods"][label]["cells"][column]["values"])) for label in labels]


def _interval(d: dict) -> str:
    return (f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]" if d["low"] is not None
            else "no interval")


def draws_calibration(table: dict, primary: str, noise: dict) -> dict:
    """Rule 1 of RULE_DRAWS from this table's own rows: {false_positives, eligible,
    smallest_resolved, junk_harm: [(dose, mean harm)], snr, minimum_detectable}."""
    doses = dose_response(table, primary)
    null = noise["null"]
    return {"null": None, "false_positives": null,
            "eligible": null["rate"] is not None and null["rate"] <= ELIGIBLE_RATE,
            "smallest_resolved": {s: e["smallest_resolved"] for s, e in doses.items()},
            "junk_harm": [(d["dose"], d["difference"]["mean"])
                          for d in doses.get("junk", {}).get("doses", [])
                          if d["difference"]["mean"] is not None],
            "snr": table.get("snr", {}).get(primary, {}).get("snr"),
            "minimum_detectable": noise["minimum_detectable"]}


def draws_calibration_lines(primary: str, c: dict, reference: str) -> list[str]:
    fp = c["false_positives"]
    lines = [f"Calibration: {primary}: the null resolves {fp['resolved']} of {fp['pairs']} pairs "
             f"of {c.get('from', reference)}'s draws, so it is "
             + ("eligible" if c["eligible"] else "NOT eligible (above 1 in 10): reported, it "
                                                 "decides nothing") + "."]
    for series, dose in c["smallest_resolved"].items():
        lines.append(f"Calibration: {primary}: the smallest resolved {series} dose is "
                     + (f"{dose:g}." if dose is not None else "none: this run cannot see that "
                                                              "harm."))
    extra = [f"SNR {c['snr']:.2f}" if c["snr"] is not None else "",
             f"the minimum detectable difference at 80% power is {c['minimum_detectable']:.4f} "
             f"bits per byte" if c["minimum_detectable"] is not None else ""]
    if any(extra):
        lines.append(f"Calibration: {primary}: " + "; ".join(e for e in extra if e) + ".")
    return lines


def bound(diff: dict, junk_harm: list[tuple[float, float]]) -> dict:
    """The paper's claim on one primary: {resolved_better, gain, interval, most, junk_dose,
    junk_beyond}: `most` is the largest gain the interval allows (-low); junk_dose the junk dose
    whose mean harm equals it, interpolated linearly from (0, 0) through the doses run (None
    with no dose; junk_beyond when every dose run harms less)."""
    if diff["low"] is None:
        return {"resolved_better": False, "gain": None, "interval": None, "most": None,
                "junk_dose": None, "junk_beyond": False}
    most = -diff["low"]
    points = [(0.0, 0.0), *sorted(junk_harm)]
    dose, beyond = None, False
    if len(points) > 1 and most > 0:
        for (d0, h0), (d1, h1) in zip(points, points[1:]):
            if h0 <= most <= h1 and h1 > h0:
                dose = d0 + (most - h0) / (h1 - h0) * (d1 - d0)
                break
        else:
            beyond = most > points[-1][1]
    return {"resolved_better": diff["resolved"] and diff["high"] < 0, "gain": -diff["mean"],
            "interval": [-diff["high"], -diff["low"]], "most": most, "junk_dose": dose,
            "junk_beyond": beyond}


def bound_sentence(b: dict) -> str:
    if b["most"] is None:
        return "no interval (fewer than two shared seeds)."
    if b["resolved_better"]:
        return (f"resolved better than random: a gain of {b['gain']:.4f} bits per byte "
                f"[{b['interval'][0]:.4f}, {b['interval'][1]:.4f}].")
    if b["most"] <= 0:
        return (f"no gain over random at this scale: the whole interval is a loss "
                f"(gain {b['gain']:+.4f} [{b['interval'][0]:+.4f}, {b['interval'][1]:+.4f}]).")
    harm = (f", about the harm of junk at dose {b['junk_dose']:.2f}" if b["junk_dose"] is not None
            else ", more than the harm of the largest junk dose run" if b["junk_beyond"] else "")
    return (f"at this scale, its gain over random, if any, is below {b['most']:.4f} bits per "
            f"byte{harm}.")


def bound_cell(b: dict) -> str:
    """bound_sentence in a table cell: the gain over random (positive is better) and, where
    unresolved, the largest gain the interval allows and its junk dose."""
    if b["most"] is None:
        return "no interval"
    gain = f"{b['gain']:+.4f} [{b['interval'][0]:+.4f}, {b['interval'][1]:+.4f}]"
    if b["resolved_better"]:
        return f"{gain} **better**"
    if b["most"] <= 0:
        return f"{gain} **worse**"
    harm = (f", junk at dose {b['junk_dose']:.2f}" if b["junk_dose"] is not None
            else ", above the largest junk dose's harm" if b["junk_beyond"] else "")
    return f"below {b['most']:.4f}{harm}"


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

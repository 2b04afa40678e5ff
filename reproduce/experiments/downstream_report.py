"""The downstream run's report, from the files its stages wrote: arms.md (each method in both
arms), verdict.md (the verdict on one screen, printed last) and the table of runs that
downstream.json keeps (each run's selection hash, tokens and seconds). Kept apart from the driver
(downstream.py), which only decides what runs; the figures read the same tables through it."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

from datamask.data import write_text_atomic
from eval.calibration import NULL, mix_or_choice, parse_dose
from eval.verdict import BOUNDED, GREEDY_START, bound_cell

STRATIFIED = "@strat"  # the label suffix of the stratified arm
TABLES = {"free": "tables", "stratified": "tables-stratified"}  # each arm's tables folder

def arm_tables(output: Path) -> dict[str, dict]:
    """{arm: its table2.json} for each arm the run folder has tables of."""
    return {arm: json.loads((output / folder / "table2.json").read_text())
            for arm, folder in TABLES.items() if (output / folder / "table2.json").is_file()}


def primaries_of(table: dict) -> list[str]:
    """The columns a table's verdict judged: several where the reference was drawn several
    times (eval/verdict.py's RULE_DRAWS), else its one primary."""
    return table["verdict"].get("primaries", [table["verdict"]["primary"]])


def outcomes(table: dict, primary: str) -> dict[str, str]:
    """{method: its outcome against random} on `primary`, as the table's verdict words it."""
    by_primary = table["verdict"].get("by_primary")
    return by_primary[primary]["vs_random"] if by_primary else table["verdict"]["vs_random"]


def difference(table: dict, label: str, primary: str) -> dict | None:
    """The difference the verdict judged `label` by on `primary` (over the draws where the
    reference was drawn several times, else paired over seeds); None where it has none."""
    by_primary = table["verdict"].get("by_primary")
    if by_primary:
        return by_primary.get(primary, {}).get("differences", {}).get(label)
    return table["vs_reference"].get(label, {}).get(primary)


def arms_markdown(output: Path) -> None:
    """Each method's outcome against random in the free and the stratified arm (the verdicts of
    both tables), and whether a free-arm difference is the domain mix or the choice within
    domains, per primary metric; written to arms.md."""
    tables = arm_tables(output)
    if "free" not in tables:
        return
    text = ("# Free and stratified arms\n\nEach method against random in the free arm (its own "
            "domain mix) and in the stratified arm (the pool's mix, against `random@strat`); a "
            "free-arm difference is the **choice within domains** when the stratified arm "
            "resolves the same, and the **mix** when it does not.\n")
    for primary in primaries_of(tables["free"]):
        free = outcomes(tables["free"], primary)
        stratified = outcomes(tables["stratified"], primary) if "stratified" in tables else {}
        rows = [f"| {method} | {outcome} | {stratified.get(method + STRATIFIED) or ''} | "
                f"{mix_or_choice(outcome, stratified.get(method + STRATIFIED))} |"
                for method, outcome in free.items() if method != NULL and not parse_dose(method)]
        text += (f"\nOn `{primary}`:\n\n| method | free arm | stratified arm | the difference "
                 f"is |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    write_text_atomic(text, output / "arms.md")


def verdict_summary(output: Path) -> str:
    """The run's verdict on one screen, the last thing it prints (and verdict.md): the
    calibration, each method against random in each arm and on each primary with arms.md's
    reading (mix or choice within domains), the paper's ordering or its claim as a bound, what
    the policy gradient adds, and where the full tables and figures are. Where random was drawn
    several times the calibration and the claim are tables, one row per primary, so that two
    primaries still fit one screen; the sentences are in the tables' own verdicts."""
    tables = arm_tables(output)
    if not tables:
        return ""
    first = next(iter(tables.values()))
    primaries = primaries_of(first)
    seeds = "/".join(str(n) for n in sorted({t["power"][primaries[0]]["n_seeds"]
                                             for t in tables.values()}))
    drawn = "by_primary" in first["verdict"]
    lines = [f"# Verdict on {' and '.join(primaries)}: method - random on the same {seeds} "
             "training seeds" + (", over every selection draw of each" if drawn else "")
             + ", mean ± 95% CI", ""]
    short = {p: f"P{i + 1}" for i, p in enumerate(primaries)} if len(primaries) > 1 else \
        {primaries[0]: ""}
    if len(primaries) > 1:
        lines += ["; ".join(f"{name}: {p}" for p, name in short.items()), ""]
    if drawn:
        lines += [*drawn_calibration_table(tables, primaries, short), ""]
    else:
        said = {}  # each power or calibration line once, with the first arm that states it
        for arm, table in tables.items():
            for line in table["verdict"]["lines"]:
                if line.startswith(("Power:", "Calibration:")):
                    said.setdefault(line, arm)
        lines += [bullet(line if arm == "free" else f"[{arm} arm] {line}")
                  for line, arm in said.items()] + [""]
    lines += methods_table(tables, primaries, short)
    if drawn:
        lines += ["", *claim_table(tables, primaries, short)]
    ordering = [bullet(f"The paper's ordering (a datamask variant better than every other "
                       f"selection), {arm} arm: " + ", ".join(
                           f"{v.removesuffix(STRATIFIED)} {o['outcome']}"
                           for v, o in table["verdict"]["ordering"].items()) + ".")
                for arm, table in tables.items() if table["verdict"]["ordering"]]
    lines += [""] + ordering if ordering else []
    where = {output / TABLES[arm] / "table2.md": f"the {arm} arm's full tables"
             + (" with the calibration rows" if arm == "free" else "") for arm in tables}
    where |= {output / "figures" / "forest.png": "each selection against random, per arm",
              output / "figures" / "dose-response.png": "the junk and dup doses",
              output / "arms.md": "each method in both arms",
              output / "downstream.json": "every run's settings, tokens and seconds"}
    lines += ["", "Every metric (bits per byte per domain, any multiple-choice task), SNR, planted "
              "rows kept, costs and the rule:"]
    lines += [f"- {path}: {what}" for path, what in where.items() if path.is_file()]
    text = "\n".join(lines) + "\n"
    write_text_atomic(text, output / "verdict.md")
    return text


def drawn_calibration_table(tables: dict[str, dict], primaries: list[str],
                            short: dict[str, str]) -> list[str]:
    """One row per primary: the null's false positives over random's pairs of draws in each
    arm, eligibility and the smallest resolved doses (the free arm's, which calibrate both),
    the SNR and the minimum detectable difference."""
    arms = " / ".join(tables)
    lines = [f"| primary | the null: pairs of random's draws resolved ({arms}) | eligible | "
             "smallest resolved dose | SNR | minimum detectable difference (80% power) |",
             "|---|---|---|---|---|---|"]
    for primary in primaries:
        mine = {arm: t["verdict"]["by_primary"].get(primary, {}).get("calibration")
                for arm, t in tables.items()}
        c = mine.get("free") or next(iter(mine.values()))
        if c is None:
            lines.append(f"| {short[primary] or primary} | not judged: no such column | - | - | - "
                         "| - |")
            continue
        pairs = " / ".join(f"{fp['resolved']} of {fp['pairs']}" for fp in (
            m.get("own_false_positives", m["false_positives"]) for m in mine.values() if m))
        doses = ", ".join(f"{series} {dose:g}" if dose is not None else f"{series} none"
                          for series, dose in c["smallest_resolved"].items())
        snr = f"{c['snr']:.2f}" if c["snr"] is not None else "-"
        mde = f"{c['minimum_detectable']:.4f}" if c["minimum_detectable"] is not None else "-"
        lines.append(f"| {short[primary] or primary} | {pairs} | "
                     f"{'yes' if c['eligible'] else '**no**: decides nothing'} | {doses or '-'} "
                     f"| {snr} | {mde} |")
    return lines


def methods_table(tables: dict[str, dict], primaries: list[str],
                  short: dict[str, str]) -> list[str]:
    """Each method against random in each arm and on each primary, with arms.md's reading."""
    from eval.tables import difference_cell

    free, stratified = tables.get("free"), tables.get("stratified")
    heads = [f"{arm} arm" + (f" {short[p]}" if short[p] else "") for p in primaries
             for arm in tables]
    lines = ["| method | " + " | ".join(heads) + " | the difference is |",
             "|---" * (len(heads) + 2) + "|"]
    for method in outcomes(free or stratified, primaries[0]):
        method = method.removesuffix(STRATIFIED)
        cells = []
        for primary in primaries:
            for arm, t in tables.items():
                d = difference(t, method + STRATIFIED * (arm != "free"), primary)
                cells.append(difference_cell(d, primary, False) if d else "")
        readings = []
        for primary in primaries if free and stratified else []:
            mine = outcomes(free, primary).get(method)
            reading = mix_or_choice(mine, outcomes(stratified, primary).get(method + STRATIFIED)) \
                if mine else ""
            if reading:
                readings.append(f"{short[primary]} {reading}".strip())
        lines.append(f"| {method} | {' | '.join(cells)} | {'; '.join(readings)} |")
    return lines


def claim_table(tables: dict[str, dict], primaries: list[str], short: dict[str, str]) -> list[str]:
    """The paper's claim as a bound (the free arm's gain over random, positive is better) and
    what the policy gradient adds (method - greedy-start in each arm), per primary."""
    from eval.tables import difference_cell

    lines = ["| primary | what | " + " | ".join(BOUNDED) + " |", "|---" * (len(BOUNDED) + 2) + "|"]
    for primary in primaries:
        name = short[primary] or primary
        free = tables["free"]["verdict"]["by_primary"].get(primary) if "free" in tables else None
        if free:
            eligible = free["calibration"]["eligible"]
            cells = [bound_cell(free["bounds"][m]) if m in free["bounds"] else
                     "not eligible" if not eligible else "not run" for m in BOUNDED]
            lines.append(f"| {name} | the paper's claim: gain over random, free arm | "
                         + " | ".join(cells) + " |")
        for arm, t in tables.items():
            judged = t["verdict"]["by_primary"].get(primary)
            gradient = judged["policy_gradient"] if judged else {}
            if gradient:
                cells = [difference_cell(gradient[m]["difference"], primary, False)
                         if m in gradient else "not run" for m in BOUNDED]
                lines.append(f"| {name} | what the policy gradient adds: method - "
                             f"{GREEDY_START}, {arm} arm | " + " | ".join(cells) + " |")
    return lines


def bullet(line: str) -> str:
    """`line` as a Markdown list item wrapped at 100 columns."""
    return textwrap.fill(line, 100, initial_indent="- ", subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)


def selection_hash(selection: Path) -> str:
    """SHA-256 of the sorted ids a selection.parquet selects: two labels with the same hash
    trained on the same documents."""
    import pyarrow.parquet as pq

    table = pq.read_table(selection, columns=["id", "selected"])
    ids = sorted(table.column("id").filter(table.column("selected")).to_pylist())
    return "sha256:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()


def runs_table(output: Path) -> list[dict]:
    """Per (method, seed): the selection's hash, tokens seen, unique tokens, epochs, wall times
    (train and eval)."""
    rows, hashes = [], {}
    for summary in sorted((output / "train").glob("*/seed*/summary.json")):
        s = json.loads(summary.read_text())
        label, seed = summary.parent.parent.name, s["seed"]
        ev = output / "eval" / f"{label}.seed{seed}.json"
        selection = output / "select" / label / "selection.parquet"
        if label not in hashes and selection.is_file():
            hashes[label] = selection_hash(selection)
        rows.append({"method": label, "seed": seed, "selection": hashes.get(label),
                     "tokens_in_selection": s["tokens_in_data"],
                     "tokens_seen": s["tokens_seen"], "unique_tokens_seen": s["unique_tokens_seen"],
                     "epochs": s["epochs"], "train_wall_s": s["train_wall_s"],
                     "eval_wall_s": json.loads(ev.read_text()).get("eval_wall_s")
                     if ev.is_file() else None})
    return rows

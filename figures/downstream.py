"""The downstream figures, from the tables' JSON (eval/tables.py's table2.json, one per arm):

    python -m figures.downstream --table RUN/tables/table2.json \
        RUN/tables-stratified/table2.json --output RUN/figures

forest.png: each method's paired difference with random (method - random on the same training
seeds, 95% CI) on the verdict's primary metric, one row per method, the free and the stratified
arm's marker side by side (filled: resolved); below them, apart, the calibration rows that are
not doses (the null, the positive control). On the right, arms.md's reading of a resolved free-arm
difference: the domain mix or the choice within domains.
dose-response.png: the junk and duplicate doses against their paired difference with random, the
null's interval as a band and the smallest resolved dose of each series ringed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import matplotlib.pyplot as plt
import matplotlib.transforms

from datamask.errors import UserError
from eval.calibration import NULL, mix_or_choice, parse_dose
from reproduce.experiments.downstream import CONTROL
from reproduce.experiments.downstream_report import STRATIFIED, difference

from . import save

ARM_STYLE = {"free": ("C0", "o"), "stratified": ("C1", "s")}  # colour, marker
SERIES_STYLE = {"junk": ("C3", "o"), "dup": ("C2", "s")}
CALIBRATION_ROWS = {NULL: f"{NULL} (the null)", CONTROL: "control (planted rows first)"}


def arm_of(table: dict) -> str:
    """'stratified' for a table against `random@strat`, else 'free'."""
    return "stratified" if table["reference"].endswith(STRATIFIED) else "free"


def by_arm(tables: list[dict]) -> dict[str, dict]:
    """{arm: table}; two tables of one arm are refused."""
    arms = {}
    for table in tables:
        if arm_of(table) in arms:
            raise UserError(f"--table: two tables of the {arm_of(table)} arm (against "
                            f"{table['reference']}); give one per arm")
        arms[arm_of(table)] = table
    return arms


def forest_rows(arms: dict[str, dict]) -> list[dict]:
    """The forest plot's rows, top to bottom: every method (a stratified `<method>@strat` on its
    method's row) in the order of the tables, then the calibration rows that are not doses.
    Each row: {method, calibration (bool), reading (arms.md's: '' unless both arms resolve
    something to read), arms: {arm: the paired difference on the primary metric}}."""
    rows = {}
    for arm, table in arms.items():
        primary = table["verdict"]["primary"]
        for label in table["vs_reference"]:
            diff = difference(table, label, primary)  # over the draws where random was drawn
            if parse_dose(label) or diff is None:
                continue  # the dose-response figure's, or one of random's own draws
            method = label.removesuffix(STRATIFIED)
            row = rows.setdefault(method, {"method": method, "arms": {}, "reading": "",
                                           "calibration": method in CALIBRATION_ROWS})
            row["arms"][arm] = diff
    if len(arms) == 2:
        free, stratified = (arms[a]["verdict"]["vs_random"] for a in ("free", "stratified"))
        for method, row in rows.items():
            if method in free:
                row["reading"] = mix_or_choice(free[method], stratified.get(method + STRATIFIED))
    return sorted(rows.values(), key=lambda row: row["calibration"])  # stable: table order kept


def primary_of(arms: dict[str, dict]) -> str:
    return next(iter(arms.values()))["verdict"]["primary"]


def _direction(ax, better_left: bool, which: str) -> None:
    """'better than random' and 'worse' written on each side of 0 above the panel."""
    at_zero = matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    left, right = ("better", "worse") if better_left else ("worse", "better")
    ax.text(0, 1.01, f"\u2190 {left} than {which}  ", transform=at_zero, ha="right",
            va="bottom", fontsize=8)
    ax.text(0, 1.01, f"  {right} than {which} \u2192", transform=at_zero, ha="left",
            va="bottom", fontsize=8)


def _seeds(arms: dict[str, dict], primary: str) -> str:
    return "/".join(str(n) for n in sorted({t["power"][primary]["n_seeds"]
                                            for t in arms.values()}))


def forest(arms: dict[str, dict]):
    """The forest plot described in the module docstring."""
    rows, primary = forest_rows(arms), primary_of(arms)
    fig, ax = plt.subplots(figsize=(8.5, 1.9 + 0.42 * len(rows)))
    if not rows:
        ax.axis("off")
        ax.text(0.5, 0.5, "no 'random' run: no paired difference to draw", ha="center")
        return fig
    gap = 0.8  # between the methods and the calibration rows
    y = {row["method"]: i + gap * row["calibration"] for i, row in enumerate(rows)}
    offset = 0.17 if len(arms) == 2 else 0.0
    for k, arm in enumerate(a for a in ARM_STYLE if a in arms):
        color, marker = ARM_STYLE[arm]
        for row in rows:
            d = row["arms"].get(arm)
            if d is None or d["mean"] is None:
                continue
            ax.errorbar(d["mean"], y[row["method"]] + (k - 0.5) * 2 * offset * (len(arms) > 1),
                        xerr=d["half_width"], fmt=marker, color=color, capsize=3,
                        markersize=6, mfc=color if d["resolved"] else "white", mew=1.4)
        ax.plot([], [], marker, color=color, label=f"{arm} arm: method - {arms[arm]['reference']}")
    ax.plot([], [], "o", color="grey", mfc="white", label="hollow: unresolved (CI includes 0)")
    ax.axvline(0, color="black", linewidth=0.9)
    ax.set_yticks(list(y.values()), [CALIBRATION_ROWS.get(m, m) for m in y])
    ax.set_ylim(max(y.values()) + 0.7, -0.7)
    if any(row["calibration"] for row in rows):
        ax.axhline(len(rows) - sum(r["calibration"] for r in rows) - 0.5 + gap / 2, color="grey",
                   linewidth=0.6, linestyle="--")
        first = next(row["method"] for row in rows if row["calibration"])
        ax.text(0.01, y[first] - 0.5, "calibration (not methods)", transform=matplotlib
                .transforms.blended_transform_factory(ax.transAxes, ax.transData), fontsize=7,
                color="grey", va="bottom")
    at_right = matplotlib.transforms.blended_transform_factory(ax.transAxes, ax.transData)
    if any(row["reading"] for row in rows):
        ax.text(1.02, -0.7, "the free-arm\ndifference is", transform=at_right, fontsize=7,
                va="bottom", style="italic")
    for row in rows:
        ax.text(1.02, y[row["method"]], row["reading"], transform=at_right, fontsize=7,
                va="center")
    higher = {c["name"]: c["higher_is_better"] for c in next(iter(arms.values()))["columns"]}
    _direction(ax, not higher[primary], "random")
    drawn = ", over selection draws" if "by_primary" in next(iter(arms.values()))["verdict"] else ""
    ax.set_xlabel(f"{primary}: method - random, paired over training seeds{drawn}, mean ± 95% CI")
    ax.set_title(f"Each selection against random ({_seeds(arms, primary)} seeds)", fontsize=10,
                 pad=18)
    ax.grid(axis="x", alpha=0.3)
    height = fig.get_size_inches()[1]
    fig.legend(fontsize=7, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1))
    return fig


def dose_rows(table: dict) -> dict[str, dict]:
    """{series: {doses: [{dose, mean, half_width, resolved}], smallest_resolved}} from the
    table's dose_response (eval/calibration.py)."""
    return {series: {"smallest_resolved": entry["smallest_resolved"],
                     "doses": [{"dose": d["dose"], "mean": d["difference"]["mean"],
                                "half_width": d["difference"]["half_width"],
                                "resolved": d["difference"]["resolved"]}
                               for d in entry["doses"]]}
            for series, entry in table.get("dose_response", {}).items()}


def dose_response(table: dict):
    """The dose-response figure described in the module docstring."""
    primary, reference = table["verdict"]["primary"], table["reference"]
    series = dose_rows(table)
    fig, ax = plt.subplots(figsize=(7, 4.4))
    null = table["vs_reference"].get(NULL, {}).get(primary)
    if null and null["low"] is not None:
        ax.axhspan(null["low"], null["high"], color="grey", alpha=0.18,
                   label=f"null ({NULL} - {reference}), 95% CI")
    ax.axhline(0, color="black", linewidth=0.9)
    doses = sorted({d["dose"] for entry in series.values() for d in entry["doses"]})
    for k, (name, entry) in enumerate(series.items()):
        color, marker = SERIES_STYLE.get(name, (f"C{4 + k}", "^"))
        shift = 1 + 0.04 * (k - (len(series) - 1) / 2)  # side by side on the log axis
        x = [d["dose"] * shift for d in entry["doses"]]
        smallest = entry["smallest_resolved"]
        ax.errorbar(x, [d["mean"] for d in entry["doses"]],
                    yerr=[d["half_width"] or 0 for d in entry["doses"]], fmt=f"{marker}-",
                    color=color, capsize=3, markersize=6,
                    label=f"{name}-<d> - {reference}; smallest resolved dose: "
                          + ("none" if smallest is None else f"{smallest:g}"))
        for d, xi in zip(entry["doses"], x):
            if d["dose"] == smallest:
                ax.plot(xi, d["mean"], "o", markersize=16, mfc="none", color=color, mew=1.6)
    if any(entry["smallest_resolved"] is not None for entry in series.values()):
        ax.plot([], [], "o", markersize=12, mfc="none", color="grey", mew=1.6,
                label="ringed: the smallest resolved dose (CI above 0)")
    ax.set_xscale("log")
    ax.set_xlim(min(doses) / 1.6, max(doses) * 1.6)
    ax.set_xticks(doses, [f"{d:g}" for d in doses])
    ax.minorticks_off()
    ax.set_xlabel("dose d: fraction of random's documents replaced (junk: junk of the same "
                  "domain and length; dup: copies)", fontsize=8)
    ax.set_ylabel(f"{primary}: dose - {reference}  (\u2191 worse)")
    ax.set_title(f"Dose-response, paired over {table['power'][primary]['n_seeds']} training "
                 f"seeds, mean ± 95% CI", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def draw(args) -> list[str]:
    tables = []
    for path in args.table:
        if not os.path.isfile(path):
            raise UserError(f"--table {path}: no such file (run `python -m reproduce tables`)")
        with open(path) as f:
            tables.append(json.load(f))
    arms = by_arm(tables)
    os.makedirs(args.output, exist_ok=True)
    written = save(forest(arms), args.output, "forest")
    calibrated = next((t for t in arms.values() if t.get("dose_response")), None)
    if calibrated:
        written += save(dose_response(calibrated), args.output, "dose-response")
    else:
        print("figures.downstream: no dose series in these tables; dose-response not drawn")
    for path in written:
        print(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Bad input (a missing table, two tables of one arm) is one line on stderr, exit 2."""
    from datamask.errors import run_command

    parser = argparse.ArgumentParser(prog="python -m figures.downstream",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--table", nargs="+", required=True,
                        help="table2.json of each arm from `python -m reproduce tables` (the "
                             "free arm's and, against random@strat, the stratified arm's)")
    parser.add_argument("--output", required=True,
                        help="folder for forest.png/.pdf and dose-response.png/.pdf")
    parser.set_defaults(func=draw)
    return run_command(parser, argv, "figures.downstream")


if __name__ == "__main__":
    sys.exit(main())

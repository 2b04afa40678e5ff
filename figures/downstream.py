"""The downstream figure, from the tables' JSON (eval/tables.py's table2.json):

    python -m figures.downstream --table runs/downstream/tables/table2.json --output DIR

Left: bits per byte on each held-out domain and their macro average, one point per method, error
bars the 95% CI over training seeds (none with one seed). Right: each method's paired difference
with random (method - random on the same seeds) with its 95% CI; below 0 is better than random,
and the shaded band over the macro average is the run's smallest resolvable difference in it
(eval/stats.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from datamask.errors import UserError  # noqa: E402

from .plots import save  # noqa: E402


def bpb_columns(table: dict) -> list[str]:
    """'bpb macro' first, then the domains in the table's order."""
    names = [c["name"] for c in table["columns"] if c["name"].startswith("bpb ")]
    if "bpb macro" not in names:
        raise UserError("the table has no bits-per-byte columns (evaluate ran without --heldout)")
    return ["bpb macro"] + [n for n in names if n != "bpb macro"]


def _points(ax, columns: list[str], series: dict, ylabel: str) -> None:
    """One group per column, one point per method side by side, with its error bar; series
    {method: (means, half-widths)}. Points, not bars: bits per byte have no meaningful zero."""
    step = 0.8 / max(1, len(series))
    x = np.arange(len(columns))
    for i, (method, (means, errs)) in enumerate(series.items()):
        ax.errorbar(x + (i - (len(series) - 1) / 2) * step, means,
                    yerr=None if all(e is None for e in errs) else [e or 0 for e in errs],
                    fmt="o", markersize=4, capsize=3, elinewidth=1, label=method)
    ax.set_xticks(x, [c.removeprefix("bpb ") for c in columns], rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def downstream(table: dict):
    """The two panels described in the module docstring."""
    columns = bpb_columns(table)
    methods = table["methods"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(6 + 1.6 * len(columns), 4.6))
    _points(left, columns, {m: ([e["cells"][c]["mean"] for c in columns],
                              [e["cells"][c]["half_width"] for c in columns])
                          for m, e in methods.items()}, "bits per byte (lower is better)")
    seeds = sorted({len(e["seeds"]) for e in methods.values()})
    left.set_title(f"held-out bits per byte, mean ± 95% CI ({'/'.join(map(str, seeds))} seeds)",
                   fontsize=9)
    left.legend(fontsize=7)
    diffs = table["vs_reference"]
    if diffs:
        _points(right, columns, {m: ([d[c]["mean"] for c in columns],
                                   [d[c]["half_width"] for c in columns])
                               for m, d in diffs.items()}, f"method - {table['reference']} (bits/byte)")
        resolvable = table["power"]["bpb macro"]["smallest_resolvable"]
        if resolvable is not None:
            right.fill_between([-0.45, 0.45], -resolvable, resolvable, color="grey",
                               alpha=0.15, label="smallest resolvable (macro)")
        right.axhline(0, color="black", linewidth=0.8)
        right.set_title(f"paired difference with {table['reference']}, mean ± 95% CI "
                        f"(below 0: better)", fontsize=9)
        right.legend(fontsize=7)
    else:
        right.axis("off")
        right.text(0.5, 0.5, f"no '{table['reference']}' run: no paired difference",
                   ha="center", va="center")
    fig.tight_layout()
    return fig


def draw(args) -> list[str]:
    if not os.path.isfile(args.table):
        raise UserError(f"--table {args.table}: no such file (run `python -m reproduce tables`)")
    with open(args.table) as f:
        table = json.load(f)
    os.makedirs(args.output, exist_ok=True)
    written = save(downstream(table), args.output, "downstream")
    for path in written:
        print(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Bad input (a missing table, no bits-per-byte columns) is one line on stderr, exit 2."""
    from datamask.cli import run_command

    parser = argparse.ArgumentParser(prog="python -m figures.downstream",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True,
                        help="table2.json from `python -m reproduce tables`")
    parser.add_argument("--output", required=True, help="folder for downstream.png/.pdf")
    parser.set_defaults(func=draw)
    return run_command(parser, argv, "figures.downstream")


if __name__ == "__main__":
    sys.exit(main())

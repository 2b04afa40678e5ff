"""Stage 6, tables: Table 2 with confidence intervals from evaluate's per-(method, seed) result
files, the paired difference of every method with random, the run's seed-to-seed spread and the
smallest difference it can resolve, the planted rows each selection kept, and the verdict
(eval/verdict.py); beside them, the paper's own Table 2 with its averages recomputed from its
per-task numbers and disagreements with the reported averages flagged.

Metrics (one column each): every task's Table 2 score (eval/task_metrics.csv), Avg (the mean of
the accuracy columns, per seed), every multiple-choice task's correct_prob_norm in % (eval/run.py),
the macro bits per byte and each held-out domain's (eval/bpb.py), "bpb prose" (books and news),
and where the checkpoints were averaged the macro and prose values of the mean over the last
checkpoints, the weight average and the EMA; with a target outside the pool, its macro ("bpb
outside macro", and "(EMA)") and each source's (reproduce/pool/outside.py). Statistics:
eval/stats.py; with calibration selections in the run (the null, junk-<d>, dup-<d>), each
metric's signal, noise and SNR and the dose-response (eval/calibration.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Collection

import numpy as np
import pandas as pd

from datamask.data import atomic_output, write_json_atomic, write_text_atomic
from datamask.errors import UserError

from .stats import CONFIDENCE, paired_difference, pooled_sd, resolvable_difference, t_interval
from .calibration import dose_response, signal_noise
from .draws import selection_noise
from .verdict import PRIMARY, verdict, verdict_markdown

HERE = Path(__file__).parent
PAPER_PER_TASK = HERE / "paper_table2_per_task.csv"
PAPER_REPORTED = HERE / "paper_table2_reported_avg.csv"
TASK_METRICS = HERE / "task_metrics.csv"
TOLERANCE = 0.05  # the paper prints one decimal: a recomputed mean within 0.05 agrees
# the weight-averaging variants of held-out bits per byte (eval/bpb.py) by their column's suffix
AVERAGED_BPB = {"last mean": "bpb_last_mean", "weight avg": "bpb_averaged", "EMA": "bpb_ema"}
# "bpb prose": the mean of these domains' bits per byte, published edited text, a target that is
# not the pool's own mix (reproduce/results/downstream/proxy-plan.md, section 5)
PROSE_DOMAINS = ("books", "news")


def task_metrics() -> dict[str, dict]:
    """lm-eval task -> {column, metric (key in lm-eval's results), scale (100: accuracy in %),
    in_average (accuracies enter Table 2's average; bits per byte does not), higher_is_better}."""
    metrics = pd.read_csv(TASK_METRICS, index_col="task", dtype={"scale": float})
    repeated = metrics.index[metrics.index.duplicated()].unique()
    if len(repeated):
        raise UserError(f"{TASK_METRICS}: task(s) {', '.join(repeated)} have more than one row")
    flags = ["in_average", "higher_is_better"]
    metrics[flags] = metrics[flags] == 1
    return metrics.to_dict("index")


def record_metrics(record: dict, path: Path) -> dict[str, tuple[float, bool]]:
    """{column: (value, higher_is_better)} of one result file, in the table's column order."""
    metrics = task_metrics()
    tasks = record.get("tasks") or []
    missing = [t for t in tasks if t not in metrics]
    if missing:
        raise UserError(f"{path}: task(s) {', '.join(missing)} have no column in "
                        f"{TASK_METRICS}; add a row for each")
    out, averaged = {}, []
    for task in tasks:
        spec = metrics[task]
        scores = record["results"].get(task, {})
        if spec["metric"] not in scores:
            raise UserError(f"{path}: task {task} has no metric '{spec['metric']}' "
                            f"(it has {sorted(scores)})")
        out[spec["column"]] = (spec["scale"] * float(scores[spec["metric"]]),
                               spec["higher_is_better"])
        if spec["in_average"]:
            averaged.append(out[spec["column"]][0])
    if averaged:
        out["Avg"] = (float(np.mean(averaged)), True)
    for task, scores in record.get("continuous", {}).items():
        column = metrics[task]["column"] if task in metrics else task
        out[f"{column} P(correct)"] = (100 * scores["correct_prob_norm"], True)
    if "bpb" in record:
        out["bpb macro"] = (record["bpb"]["macro"], False)
        for domain, scores in record["bpb"]["domains"].items():
            out[f"bpb {domain}"] = (scores["bits_per_byte"], False)
        for variant, key in AVERAGED_BPB.items():
            if key in record:
                out[f"bpb macro ({variant})"] = (record[key]["macro"], False)
        for variant, key in {"": "bpb", **{f" ({v})": k for v, k in AVERAGED_BPB.items()}}.items():
            domains = record.get(key, {}).get("domains", {})
            if all(d in domains for d in PROSE_DOMAINS):
                out[f"bpb prose{variant}"] = (float(np.mean(
                    [domains[d]["bits_per_byte"] for d in PROSE_DOMAINS])), False)
    if "outside" in record:  # the target outside the pool: the final checkpoint's and the EMA's
        outside = record["outside"]
        out["bpb outside macro"] = (outside["bpb"]["macro"], False)
        for source, scores in outside["bpb"]["domains"].items():
            out[f"bpb outside {source}"] = (scores["bits_per_byte"], False)
        if "bpb_ema" in outside:
            out["bpb outside macro (EMA)"] = (outside["bpb_ema"]["macro"], False)
    return out


def lower_is_better_columns(tasks: list[str], domains: list[str], averaged: list[str],
                            sources: list[str] | None) -> list[str]:
    """The columns a verdict can read (write_tables' `primary`) in evaluate's results on `tasks`
    (each with a row in TASK_METRICS), the held-out `domains`, the averaging result keys
    `averaged` (AVERAGED_BPB's values) and, with `sources`, the target outside the pool: named
    by record_metrics itself on a record of that shape, so a run can refuse a --primary before
    it trains."""
    def scored(names):
        return {"macro": 0.0, "domains": {name: {"bits_per_byte": 0.0} for name in names}}

    metrics = task_metrics()
    record = {"tasks": tasks, "results": {t: {metrics[t]["metric"]: 0.0} for t in tasks},
              "bpb": scored(domains), **{key: scored(domains) for key in averaged}}
    if sources is not None:  # evaluate scores the final checkpoint on it, and the EMA if kept
        record["outside"] = {"bpb": scored(sources)}
        if "bpb_ema" in averaged:
            record["outside"]["bpb_ema"] = scored(sources)
    return [c for c, (_, higher) in record_metrics(record, TASK_METRICS).items() if not higher]


def load_results(result_files: list[Path]) -> tuple[dict, dict, dict]:
    """(columns {name: higher_is_better} in order, values {method: {seed: {column: value}}},
    records {method: {seed: record}}) from evaluate's files; every file must have the same
    columns and no (method, seed) may repeat."""
    if not result_files:
        raise UserError("--results: no result file given")
    columns, values, records, origin = None, {}, {}, {}
    for path in result_files:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise UserError(f"--results {path}: not a readable result file ({err})") from None
        if "method" not in record or "seed" not in record or \
                not ("results" in record or "bpb" in record):
            raise UserError(f"--results {path}: no method/seed/results (not written by evaluate)")
        found = record_metrics(record, Path(path))
        names = {c: higher for c, (_, higher) in found.items()}
        if columns is None:
            columns = names
        elif list(names) != list(columns):
            raise UserError(f"{path}: has the columns {list(names)}, other files "
                            f"{list(columns)}; one table needs the same metrics for every run")
        key = (record["method"], int(record["seed"]))
        if key in origin:
            raise UserError(f"--results {path} and {origin[key]}: both method {key[0]}, "
                            f"seed {key[1]}")
        origin[key] = path
        values.setdefault(key[0], {})[key[1]] = {c: v for c, (v, _) in found.items()}
        records.setdefault(key[0], {})[key[1]] = record
    return columns, values, records


def summarize(columns: dict, values: dict, reference: str = "random") -> dict:
    """The table's JSON: per method and column the seeds' values and their t interval; per
    method the paired difference with `reference`; per column the run's power."""
    methods = {}
    for method, by_seed in values.items():
        seeds = sorted(by_seed)
        methods[method] = {"seeds": seeds, "cells": {
            c: {**t_interval([by_seed[s][c] for s in seeds]),
                "values": [by_seed[s][c] for s in seeds]} for c in columns}}
    vs_reference = {}
    if reference in values:
        for method, by_seed in values.items():
            if method != reference:
                vs_reference[method] = {
                    c: paired_difference({s: v[c] for s, v in by_seed.items()},
                                         {s: v[c] for s, v in values[reference].items()})
                    for c in columns}
    power = {}
    for c in columns:
        seed_sd = pooled_sd([m["cells"][c]["sd"] for m in methods.values()])
        paired_sd = pooled_sd([d[c]["sd"] for d in vs_reference.values()])
        n = min((d[c]["n"] for d in vs_reference.values()), default=0)
        power[c] = {"seed_sd": seed_sd, "paired_sd": paired_sd, "n_seeds": n,
                    "smallest_resolvable": (resolvable_difference(paired_sd, n)
                                            if paired_sd is not None and n >= 2 else None)}
    noise = selection_noise(columns, values, reference)
    return {"confidence": CONFIDENCE,
            "interval": "two-sided Student t, n - 1 degrees of freedom, n = seeds",
            "columns": [{"name": c, "higher_is_better": h} for c, h in columns.items()],
            "reference": reference, "methods": methods, "vs_reference": vs_reference,
            "power": power, **({"selection_noise": noise} if noise else {})}


def paper_table() -> pd.DataFrame:
    """The paper's rows (model, corpus, one column per task) with `Avg (recomputed)`,
    `Avg (reported)` where the paper states it, and `flag` where the two disagree by more than
    rounding."""
    table = pd.read_csv(PAPER_PER_TASK)
    table["Avg (recomputed)"] = table.drop(columns=["model", "corpus"]).mean(axis=1)
    reported = pd.read_csv(PAPER_REPORTED).rename(columns={"reported_avg": "Avg (reported)"})
    table = table.merge(reported, on=["model", "corpus"], how="left", validate="one_to_one")
    recomputed, stated = table["Avg (recomputed)"], table["Avg (reported)"]
    disagree = (stated - recomputed).abs() > TOLERANCE  # not stated (NaN): no disagreement
    table["flag"] = ("reported " + stated.astype(str) + " != " + recomputed.map("{:.2f}".format)
                     + " from the per-task numbers").where(disagree, "")
    return table


def markdown(frame: pd.DataFrame, right: Collection[str] = ()) -> str:
    """`frame` as a Markdown table: floats with one decimal, missing values empty, the columns
    in `right` right-aligned. Cells are not padded: DataFrame.to_markdown (tabulate) pads every
    column to its widest cell, so one new value would rewrite every line of a committed table."""
    def cell(value) -> str:
        return "" if pd.isna(value) else f"{value:.1f}" if isinstance(value, float) else str(value)
    header = " | ".join(map(str, frame.columns))
    rule = "|".join("---:" if c in right else "---" for c in frame.columns)
    body = "".join(f"| {' | '.join(row)} |\n" for row in frame.map(cell).itertuples(index=False))
    return f"| {header} |\n|{rule}|\n" + body


def stage_summaries(record: dict) -> dict:
    """The train, tokens and select stages' summary.json behind one result file, followed from
    the checkpoint (train -> its tokens folder -> its selection); {} for a stage not found. The
    stages record these links as absolute paths, so this works from any folder; records written
    before they did hold paths relative to the folder their run started in."""
    def load(path) -> dict:
        path = Path(path) / "summary.json" if path else None
        return json.loads(path.read_text()) if path is not None and path.is_file() else {}
    train = load(record.get("checkpoint"))
    tokens = load(train.get("tokens"))
    selection = tokens.get("selection")
    return {"train": train, "tokens": tokens,
            "select": load(Path(selection).parent) if selection else {}, "selection": selection}


# the cost table's columns from the stages' summary.json: column -> (stage, key)
COSTS = {"selector s": ("select", "selector_time_s"), "select stage s": ("select", "stage_wall_s"),
         "documents": ("tokens", "documents"), "tokens": ("tokens", "tokens"),
         "tokens seen": ("train", "tokens_seen"), "train s": ("train", "train_wall_s"),
         "ranks": ("train", "world_size"), "tokens/s": ("train", "tokens_per_s"),
         "peak MiB/rank": ("train", "peak_memory_mib"), "final loss": ("train", "final_loss")}


def cost_table(records: dict) -> pd.DataFrame:
    """Per method, medians over its seeds: selector and select-stage seconds, documents and
    tokens in the selection, tokens the model saw (the equal budget), training seconds, training
    ranks (world size), tokens per second (all ranks together), the largest rank's peak memory
    in MiB, final training loss, evaluation seconds; a median that is a whole number as an int."""
    runs = []
    for method, by_seed in records.items():
        for record in by_seed.values():
            chain = stage_summaries(record)
            train = chain["train"]  # runs from before train recorded them: one rank, memory unknown
            per_rank = train.get("peak_memory_mib_per_rank")
            train["peak_memory_mib"] = max(per_rank) if per_rank else None
            train.setdefault("world_size", 1 if train else None)
            runs.append({"method": method, "eval s": record.get("eval_wall_s")}
                        | {column: chain[stage].get(key) for column, (stage, key) in COSTS.items()})
    by_method = pd.DataFrame(runs).set_index("method").astype(float).groupby("method", sort=False)
    medians = by_method.median()[[*COSTS, "eval s"]]
    whole = medians.round() == medians  # NaN (nothing known) is not whole
    medians = medians.astype(object).mask(whole, medians.fillna(0).astype(int).astype(object))
    return pd.concat([by_method.size().rename("seeds"), medians], axis=1).reset_index()


def planted_kept(records: dict, kept_of: Callable[[Path], dict]) -> dict:
    """{method: {kind: fraction kept}}, averaged over the method's distinct selections (one per
    seed, or one shared by all seeds); `kept_of(selection)` reads the pool's labels (the pipeline
    passes reproduce.pool.control.kept_fractions, which sits above eval)."""
    out = {}
    for method, by_seed in records.items():
        selections = sorted({stage_summaries(r)["selection"] for r in by_seed.values()} - {None})
        if not selections:
            raise UserError(f"method {method}: no selection found behind its checkpoints (train "
                            f"summary -> tokens summary -> selection), so no planted counts")
        kept = [kept_of(Path(s))["all"] for s in selections]
        out[method] = {kind: float(np.mean([k[kind]["kept"] / k[kind]["rows"] for k in kept]))
                       for kind in kept[0]}
    return out


def shown(value, column: str) -> str:
    """Bits per byte with four decimals, percentages with two."""
    return "" if value is None else f"{value:.4f}" if column.startswith("bpb") else f"{value:.2f}"


def interval_cell(cell: dict, column: str) -> str:
    if cell["half_width"] is None:
        return shown(cell["mean"], column)
    return f"{shown(cell['mean'], column)} ± {shown(cell['half_width'], column)}"


def difference_cell(diff: dict, column: str, higher_is_better: bool) -> str:
    if diff["mean"] is None:
        return "no shared seed"
    text = f"{'+' if diff['mean'] >= 0 else ''}{interval_cell(diff, column)}"
    if not diff["resolved"]:
        return text
    better = (diff["mean"] > 0) == higher_is_better
    return f"{text} **{'better' if better else 'worse'}**"


def report_markdown(table: dict, costs: pd.DataFrame) -> str:
    """Table 2 with CIs, the paired differences with the reference, the power, the planted rows
    kept, the costs and the verdict, as one Markdown report."""
    columns = [c["name"] for c in table["columns"]]
    higher = {c["name"]: c["higher_is_better"] for c in table["columns"]}
    reference, methods = table["reference"], table["methods"]
    groups = [("Bits per byte on the held-out domains (lower is better)",
               [c for c in columns if c.startswith("bpb")]),
              ("Multiple-choice tasks (accuracy in %; P(correct): correct_prob_norm in %, higher "
               "is better)", [c for c in columns if not c.startswith("bpb")])]
    n = sorted({len(m["seeds"]) for m in methods.values()})
    text = (f"# Table 2 at this scale\n\nEvery cell: mean ± 95% CI half-width over training "
            f"seeds (Student t, n - 1 degrees of freedom; n = {'/'.join(map(str, n))} seeds per "
            f"method; no interval with one seed).\n")
    for title, group in groups:
        if group:
            text += f"\n{title}:\n\n" + markdown(pd.DataFrame(
                [{"method": m, "seeds": len(e["seeds"])}
                 | {c: interval_cell(e["cells"][c], c) for c in group}
                 for m, e in methods.items()]))
    if table["vs_reference"]:
        text += (f"\nPaired difference with {reference} (method - {reference} on the seeds both "
                 f"trained with, mean ± 95% CI half-width); **better**/**worse**: resolved (the "
                 f"interval excludes 0):\n\n")
        text += markdown(pd.DataFrame(
            [{"method": m, "seeds": d[columns[0]]["n"]}
             | {c: difference_cell(d[c], c, higher[c]) for c in columns}
             for m, d in table["vs_reference"].items()]))
        text += ("\nSeed-to-seed spread and the smallest difference this run resolves: seed sd "
                 "is the pooled (root mean square) standard deviation over seeds within a method; "
                 f"paired sd the pooled standard deviation of the paired differences with "
                 f"{reference}; smallest resolvable = t(0.975, n - 1) × paired sd / √n, the CI "
                 f"half-width of a paired difference with that spread (a true difference smaller "
                 f"than it is not resolved):\n\n")
        text += markdown(pd.DataFrame(
            [{"metric": c, "seed sd": shown(p["seed_sd"], c),
              "paired sd": shown(p["paired_sd"], c), "seeds": p["n_seeds"],
              "smallest resolvable": shown(p["smallest_resolvable"], c)}
             for c, p in table["power"].items()]))
    text += selection_noise_markdown(table) + calibration_markdown(table)
    if table.get("planted_kept"):
        kept = pd.DataFrame.from_dict(table["planted_kept"], orient="index")
        text += "\nFraction of each planted kind of pool row the selection kept:\n\n" + markdown(
            kept[sorted(kept.columns)].map("{:.3f}".format, na_action="ignore")
            .rename_axis("method").reset_index())
    if costs.drop(columns=["method", "seeds"]).notna().to_numpy().any():
        text += ("\nCost per method, medians over its seeds (seconds unless stated; tokens seen: "
                 "the training budget):\n\n") + markdown(costs)
    return text + "\n" + verdict_markdown(table["verdict"])


def selection_noise_markdown(table: dict) -> str:
    """Where the reference was selected several times: per bits-per-byte metric, the spread
    between its draws, the null's false positives and the minimum detectable difference; then
    each method against all its draws on every primary ('' with one draw)."""
    noise, reference = table.get("selection_noise"), table["reference"]
    if not noise:
        return ""
    draws = next(iter(noise.values()))["draws"]
    text = (f"\nSelection noise ({draws} draws of {reference}; eval/draws.py): the sd between the "
            f"draws' means over the seeds; the null's false positives, the pairs of {reference}'s "
            f"draws a test with the other draws' spread in its interval resolves (a calibrated "
            f"metric resolves about 5%), and those the paired test over seeds alone resolves; "
            f"the minimum detectable difference of a one-draw method at 80% power:\n\n")
    text += markdown(pd.DataFrame(
        [{"metric": c, "sd between draws": shown(n["sd_between_draws"], c),
          "null false positives": f"{n['null']['resolved']} of {n['null']['pairs']}",
          "by seeds alone": f"{n['null']['resolved_by_seeds']} of {n['null']['pairs']}",
          "minimum detectable": shown(n["minimum_detectable"], c)}
         for c, n in noise.items() if c.startswith("bpb")]))
    # a table with selection noise is judged by the drawn verdict, which lists its primaries
    primaries = [p for p in table["verdict"]["primaries"] if p in noise]
    if primaries:
        higher = {c["name"]: c["higher_is_better"] for c in table["columns"]}
        text += (f"\nEach method against {reference}'s draws on {', '.join(primaries)} (the mean "
                 f"of its draws minus theirs, mean ± 95% half-width with the draws' spread in "
                 f"it):\n\n")
        methods = noise[primaries[0]]["vs_reference"]
        text += markdown(pd.DataFrame(
            [{"method": m, "draws": d["draws"][0],
              **{p: difference_cell(noise[p]["vs_reference"][m], p, higher[p])
                 for p in primaries}}
             for m, d in methods.items()]))
    return text


def calibration_markdown(table: dict) -> str:
    """The SNR of every metric and the dose-response of the primary one, where the table holds
    calibration selections ('' where it holds none)."""
    if not table.get("snr"):
        return ""
    sources = next(iter(table["snr"].values()))
    signal = ("root mean square of the mean paired difference of "
              + " and ".join(sources["signal_from"]) + " with the reference"
              if sources["signal_from"] else "none: the run has no dose-0.25 selection")
    text = ("\nSignal, noise and SNR of each metric (eval/calibration.py): signal = " + signal
            + "; noise = root mean square of the paired sd of "
            + ", ".join(sources["noise_from"]) + ":\n\n")
    text += markdown(pd.DataFrame(
        [{"metric": c, "signal": shown(s["signal"], c), "noise": shown(s["noise"], c),
          "SNR": "" if s["snr"] is None else f"{s['snr']:.2f}"}
         for c, s in table["snr"].items()]))
    primary = table["verdict"]["primary"]
    if table.get("dose_response"):
        text += (f"\nDose-response in {primary} (paired difference with {table['reference']}, "
                 f"mean ± 95% CI half-width; **worse**: resolved harm):\n\n")
        text += markdown(pd.DataFrame(
            [{"series": series, "dose": d["dose"],
              "difference": difference_cell(d["difference"], primary, False)}
             for series, entry in table["dose_response"].items() for d in entry["doses"]]
            + [{"series": series, "dose": "smallest resolved",
                "difference": "none" if entry["smallest_resolved"] is None
                else f"{entry['smallest_resolved']:g}"}
               for series, entry in table["dose_response"].items()]).astype(str))
    return text


def write_tables(result_files: list[Path], output: Path,
                 kept_of: Callable[[Path], dict] | None = None, reference: str = "random",
                 control: str = "control", primary: str | list[str] = PRIMARY,
                 calibrated_by: tuple[str, dict] | None = None) -> str:
    """Write table2.md/.csv/.json (our runs) and paper_table2.md/.csv; return the Markdown. With
    `kept_of` (selection -> the pool's kept fractions), the table says what each method kept;
    `primary` is the column the verdict and the dose-response read (several: the verdict reads
    each, the dose-response table the first); `calibrated_by` (name,
    table2.json of another arm of the same run) calibrates a table that has no calibration rows
    (eval/verdict.py)."""
    columns, values, records = load_results(result_files)
    primaries = [primary] if isinstance(primary, str) else list(primary)
    for name in primaries:
        if columns.get(name) or name not in columns and name != PRIMARY:
            # (results without held-out text have no default column: the verdict says so)
            raise UserError(f"--primary {name!r}: not a lower-is-better column of these results "
                            f"({', '.join(c for c, higher in columns.items() if not higher)})")
    primary = primaries[0]
    table = summarize(columns, values, reference)
    if kept_of is not None:
        table["planted_kept"] = planted_kept(records, kept_of)
    snr = signal_noise(table)
    if snr:
        table["snr"] = snr
        table["dose_response"] = dose_response(table, primary) if primary in columns else {}
    table["verdict"] = verdict(table, reference, control, primary=primaries,
                               calibrated_by=calibrated_by)
    ours = report_markdown(table, cost_table(records))
    paper = paper_table()
    paper_md = markdown(paper.assign(**{"Avg (recomputed)": paper["Avg (recomputed)"].map(
        "{:.2f}".format)}))
    paper_md = ("Paper Table 2 (Fan et al., ICLR 2026, arXiv 2512.24265), per-task numbers as "
                "published; averages recomputed here.\n\n" + paper_md)
    output.mkdir(parents=True, exist_ok=True)
    for name, text in (("table2.md", ours), ("paper_table2.md", paper_md)):
        write_text_atomic(text, output / name)
    write_json_atomic(table, output / "table2.json")
    cells = pd.DataFrame.from_dict({m: e["cells"] for m, e in table["methods"].items()},
                                   orient="index")[list(columns)]
    ours_csv = pd.concat([cells.map(lambda cell: cell["mean"]),
                          cells.map(lambda cell: cell["half_width"]).add_suffix(" ci95")], axis=1)
    ours_csv["seeds"] = [len(e["seeds"]) for e in table["methods"].values()]
    paper_csv = paper.rename(columns={"Avg (recomputed)": "avg_recomputed",
                                      "Avg (reported)": "avg_reported"})
    paper_csv["avg_recomputed"] = paper_csv["avg_recomputed"].round(4)
    for name, frame in (("table2.csv", ours_csv.rename_axis("method").reset_index()),
                        ("paper_table2.csv", paper_csv)):
        with atomic_output(output / name) as tmp:
            frame.to_csv(tmp, index=False, lineterminator="\r\n")  # csv.writer's line ends
    return ours + "\n" + paper_md

"""Stage 6, tables: the paper's Table 2 layout (one row per selection method, one column per task,
then the average) from lm-eval result files, and the paper's own Table 2 with its averages
recomputed from its per-task numbers and disagreements with the reported averages flagged."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from datamask.data import atomic_output
from datamask.errors import UserError

HERE = Path(__file__).parent
PAPER_PER_TASK = HERE / "paper_table2_per_task.csv"
PAPER_REPORTED = HERE / "paper_table2_reported_avg.csv"
TASK_METRICS = HERE / "task_metrics.csv"
TOLERANCE = 0.05  # the paper prints one decimal: a recomputed mean within 0.05 agrees


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def task_metrics() -> dict[str, dict]:
    """lm-eval task -> {column, metric (key in lm-eval's results), scale (100: accuracy in %),
    in_average (accuracies enter Table 2's average; bits per byte does not)}."""
    return {r["task"]: {"column": r["column"], "metric": r["metric"], "scale": float(r["scale"]),
                        "in_average": r["in_average"] == "1"} for r in _read_csv(TASK_METRICS)}


def results_table(result_files: list[Path]) -> tuple[list[str], list[dict]]:
    """Rows {method, <column>: score (accuracy in %), <column>_stderr, Avg (of the accuracy
    columns)} from `evaluate`'s JSON files."""
    if not result_files:
        raise UserError("--results: no result file given")
    metrics = task_metrics()
    columns, rows = None, []
    for path in result_files:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise UserError(f"--results {path}: not a readable result file ({err})") from None
        tasks = record.get("tasks")
        if not tasks or "results" not in record:
            raise UserError(f"--results {path}: no 'tasks'/'results' (not written by evaluate)")
        missing = [t for t in tasks if t not in metrics]
        if missing:
            raise UserError(f"{path}: task(s) {', '.join(missing)} have no column in "
                            f"{TASK_METRICS}; add a row for each")
        names = [metrics[t]["column"] for t in tasks]
        if columns is None:
            columns = names
        elif names != columns:
            raise UserError(f"{path}: evaluated on {names}, other files on {columns}; "
                            f"one table needs the same tasks for every method")
        row = {"method": record["method"]}
        for task, column in zip(tasks, names):
            metric, scale = metrics[task]["metric"], metrics[task]["scale"]
            scores = record["results"].get(task, {})
            if metric not in scores:
                raise UserError(f"{path}: task {task} has no metric '{metric}' "
                                f"(it has {sorted(scores)})")
            name, _, flt = metric.partition(",")
            row[column] = scale * float(scores[metric])
            stderr = scores.get(f"{name}_stderr,{flt}")
            row[f"{column}_stderr"] = None if stderr in (None, "N/A") else scale * float(stderr)
        averaged = [c for t, c in zip(tasks, names) if metrics[t]["in_average"]]
        row["Avg"] = sum(row[c] for c in averaged) / len(averaged) if averaged else None
        rows.append(row)
    return columns, rows


def paper_table() -> tuple[list[str], list[dict]]:
    """The paper's rows with `Avg (recomputed)`, `Avg (reported)` where the paper states it, and
    `flag` where the two disagree by more than rounding."""
    per_task = _read_csv(PAPER_PER_TASK)
    columns = [c for c in per_task[0] if c not in ("model", "corpus")]
    reported = {(r["model"], r["corpus"]): float(r["reported_avg"])
                for r in _read_csv(PAPER_REPORTED)}
    rows = []
    for r in per_task:
        row = {"model": r["model"], "corpus": r["corpus"], **{c: float(r[c]) for c in columns}}
        row["Avg (recomputed)"] = sum(row[c] for c in columns) / len(columns)
        stated = reported.get((r["model"], r["corpus"]))
        row["Avg (reported)"] = stated
        row["flag"] = ("" if stated is None or abs(stated - row["Avg (recomputed)"]) <= TOLERANCE
                       else f"reported {stated} != {row['Avg (recomputed)']:.2f} from the per-task "
                            f"numbers")
        rows.append(row)
    return columns, rows


def markdown(header: list[str], rows: list[list]) -> str:
    def cell(v):
        return "" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def cost_rows(workdir: Path, methods: list[str]) -> list[list]:
    """Per method: selector seconds, selected documents and tokens, training and eval seconds,
    read from the summaries the stages wrote under `workdir`."""
    def load(path: Path) -> dict:
        return json.loads(path.read_text()) if path.is_file() else {}
    rows = []
    for m in methods:
        sel = load(workdir / "select" / m / "summary.json")
        tok = load(workdir / "tokens" / m / "summary.json")
        trn = load(workdir / "train" / m / "summary.json")
        ev = load(workdir / "eval" / f"{m}.json")
        rows.append([m, sel.get("selector_time_s"), sel.get("stage_wall_s"),
                     tok.get("documents"), tok.get("tokens"), trn.get("train_wall_s"),
                     trn.get("final_loss"), ev.get("eval_wall_s")])
    return rows


def write_tables(result_files: list[Path], output: Path, workdir: Path | None = None) -> str:
    """Write table2.md/.csv (our methods), paper_table2.md/.csv, and return the markdown."""
    output.mkdir(parents=True, exist_ok=True)
    columns, rows = results_table(result_files)
    metrics = {m["column"]: m for m in task_metrics().values()}

    def shown(column, value):  # accuracies with one decimal, as the paper; bits/byte with three
        return value if metrics[column]["in_average"] else f"{value:.3f}"
    ours = markdown(["method"] + columns + ["Avg"],
                    [[r["method"]] + [shown(c, r[c]) for c in columns] + [r["Avg"]] for r in rows])
    stderr = [r[f"{c}_stderr"] for r in rows for c in columns
              if r[f"{c}_stderr"] is not None and metrics[c]["in_average"]]
    if stderr:
        ours += (f"\nAccuracies in % (Avg is their mean; bits per byte, lower is better, is not "
                 f"averaged). lm-eval standard errors of single accuracies: "
                 f"{min(stderr):.1f}-{max(stderr):.1f} points.\n")
    if workdir is not None:
        ours += "\nCost per method (seconds unless stated):\n\n" + markdown(
            ["method", "selector s", "select stage s", "documents", "tokens", "train s",
             "final loss", "eval s"], cost_rows(workdir, [r["method"] for r in rows]))
    paper_columns, paper_rows = paper_table()
    paper = markdown(["model", "corpus"] + paper_columns + ["Avg (recomputed)", "Avg (reported)",
                                                           "flag"],
                     [[r["model"], r["corpus"]] + [r[c] for c in paper_columns]
                      + [f"{r['Avg (recomputed)']:.2f}", r["Avg (reported)"], r["flag"]]
                      for r in paper_rows])
    paper = ("Paper Table 2 (Fan et al., ICLR 2026, arXiv 2512.24265), per-task numbers as "
             "published; averages recomputed here.\n\n" + paper)
    for name, text in (("table2.md", ours), ("paper_table2.md", paper)):
        with atomic_output(output / name) as tmp:
            Path(tmp).write_text(text)
    for name, header, body in (
            ("table2.csv", ["method"] + columns + ["Avg"] + [f"{c}_stderr" for c in columns],
             [[r["method"]] + [r[c] for c in columns] + [r["Avg"]]
              + [r[f"{c}_stderr"] for c in columns] for r in rows]),
            ("paper_table2.csv", ["model", "corpus"] + paper_columns
             + ["avg_recomputed", "avg_reported", "flag"],
             [[r["model"], r["corpus"]] + [r[c] for c in paper_columns]
              + [round(r["Avg (recomputed)"], 4), r["Avg (reported)"], r["flag"]]
              for r in paper_rows])):
        with atomic_output(output / name) as tmp, open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([header] + body)
    return ours + "\n" + paper

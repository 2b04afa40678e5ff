"""`make bench-defaults` on small rows: every cell holds select's run report beside the best
greedy's gain and time and a verdict that follows them, and the table is written when asked."""

import json

import numpy as np
import pytest

from datamask.examples.synthetic import synthetic_dataset
from datamask.report import Report
from reproduce.bench import defaults


def test_each_cell_compares_select_with_the_best_greedy(tmp_path):
    rows = defaults.main(["--families", "synth-32d-30c", "--sizes", "300", "--metrics",
                          "Pair_simi", "--lambs", "0", "0.5", "--set", "n_epochs=100",
                          "--output", str(tmp_path)])
    assert [(r["metric"], r["lamb"]) for r in rows] == [("Pair_simi", 0.0), ("Pair_simi", 0.5)]
    for row in rows:
        assert {"steps_run", "stop_reason", "written_step", "objective_start",
                "objective_written"} <= set(row)
        grace = defaults.GRACE_S  # 300 rows: under the timed size
        assert row["passes"] == (row["gain_ratio"] >= defaults.KEEP
                                 and row["select_s"] <= row["greedy_s"] + grace)
    assert rows[0]["greedy"] == "pair-greedy" and rows[1]["greedy"] == "joint-greedy"
    assert all(r["steps_run"] <= 100 for r in rows)  # --set reaches select
    saved = json.loads((tmp_path / "defaults.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(rows))
    assert "| synth-32d-30c | 300 | 0.1 | Pair_simi | 0.5 |" in (tmp_path / "defaults.md").read_text()


def test_reference_greedies_follow_the_plan():
    assert defaults.references("Facility", 0.0, 100_000) == [
        ("facility-knn-greedy", {"optimizer": "lazy"})]
    assert defaults.references("Facility", 0.5, 100_000) == []  # no dense joint greedy there
    assert [name for name, _ in defaults.references("DiSF", 0.5, 3_000)] == [
        "joint-greedy", "disf-greedy-fast"]


def test_set_reaches_every_metric_or_the_one_it_names():
    found = defaults.metric_overrides(["n_epochs=100", "Pair_simi:start_optimizer=lazy",
                                       "DiSF:give_up_after=0.25"], ["Pair_simi", "Facility"])
    assert found == {"Pair_simi": {"n_epochs": 100, "start_optimizer": "lazy"},
                     "Facility": {"n_epochs": 100}}


def test_the_table_shows_each_certificate_or_no_bound():
    row = {"family": "f", "rows": 300, "metric": "DiSF", "lamb": 0.0, "select_s": 1.0,
           "steps_run": 50, "stop_reason": "stopping_rule", "written_step": 0,
           "objective_start": 1.0, "objective_written": 1.0, "greedy": "disf-greedy-fast",
           "greedy_s": 1.0, "gain_ratio": 1.0, "passes": True}
    text = defaults.table([{**row, "share_above_random_start": 0.98765,
                            "share_above_random_written": 0.99},
                           {**row, "share_above_random_start": None,
                            "share_above_random_written": None}])
    assert "| 0.9877 | 0.9900 |" in text and "| no bound | no bound |" in text


def test_repeats_time_each_run_in_turn_and_take_the_median(tmp_path):
    """--repeats 3: select and its greedy run three times each, their times and gains kept,
    the cell's each the median."""
    rows = defaults.main(["--families", "synth-32d-30c", "--sizes", "300", "--metrics",
                          "DiSF", "--lambs", "0", "--set", "n_epochs=50", "--repeats", "3"])
    times = rows[0]["repeats"]
    assert sorted(times) == ["datamask", "disf-greedy-fast"]
    assert all(len(runs) == 3 for runs in times.values())
    assert rows[0]["select_s"] == sorted(times["datamask"])[1]
    assert rows[0]["greedy_s"] == sorted(times["disf-greedy-fast"])[1]
    assert rows[0]["time_ratio"] == rows[0]["select_s"] / rows[0]["greedy_s"]
    assert rows[0]["gain"] == sorted(rows[0]["repeat_gains"]["datamask"])[1]
    assert rows[0]["greedy_gain"] == sorted(rows[0]["repeat_gains"]["disf-greedy-fast"])[1]
    with pytest.raises(SystemExit):
        defaults.build_parser().parse_args(["--repeats", "0"])


def test_a_greedy_below_random_shows_no_ratio():
    """A negative gain ratio (the greedy lost to random) would read as select losing: the table
    says the greedy was below random, and the verdict column what select did."""
    row = {"family": "f", "rows": 300, "metric": "DiSF", "lamb": 0.0, "select_s": 1.0,
           "steps_run": 50, "stop_reason": "stopping_rule", "written_step": 0,
           "objective_start": 1.0, "objective_written": 1.0, "greedy": "disf-greedy-fast",
           "greedy_s": 1.0, "passes": True}
    text = defaults.table([{**row, "gain_ratio": -1.8, "greedy_gain": -2.0},
                           {**row, "gain_ratio": 1.25, "greedy_gain": 2.0}])
    assert "| greedy below random |" in text and "| 1.250 |" in text and "-1.8" not in text


def test_the_paper_family_has_unit_rows_and_whole_quality_and_skip_leaves_a_greedy_out():
    """paper-768d-30c: unit rows and integer scores, as the paper's users bring them; --ratios
    reaches select and the report, --skip leaves the named greedy out and the cell says so."""
    data = defaults.paper_rows(200, 768, 30, seed=0)
    assert np.allclose(np.linalg.norm(data.features, axis=1), 1, atol=1e-5)
    assert np.array_equal(data.quality, np.rint(data.quality)) and data.quality.max() <= 5
    rows = defaults.main(["--families", "synth-32d-30c", "--sizes", "300", "--metrics", "DiSF",
                          "--lambs", "0.5", "--ratios", "0.3", "--set", "n_epochs=50",
                          "--skip", "DiSF:joint-greedy"])
    assert rows[0]["ratio"] == 0.3 and rows[0]["greedy"] == "disf-greedy-fast"
    assert rows[0]["greedies_not_run"] == ["joint-greedy"]
    assert "(joint-greedy not run)" in defaults.table(rows)


def test_a_report_of_the_metrics_run_scores_them_as_a_report_of_all(monkeypatch):
    """The bench's report scores only the metrics it runs (a report of all three spends
    Facility's kernels on every cell): each joint value is the full report's."""
    made = []
    monkeypatch.setattr(defaults, "Report",
                        lambda *args, **kw: made.append(Report(*args, **kw)) or made[-1])
    defaults.main(["--families", "synth-32d-30c", "--sizes", "300", "--metrics", "Pair_simi",
                   "--lambs", "0.5", "--set", "n_epochs=20"])
    assert list(made[0].metrics) == ["Pair_simi"]
    data = synthetic_dataset(300, 32, 30, seed=0)
    selected = np.zeros(len(data), bool)
    selected[::10] = True
    alone = Report(data, 0.1, 0.5, metrics=("DiSF",))(selected)
    full = Report(data, 0.1, 0.5)(selected)
    assert alone["joint_DiSF"] == full["joint_DiSF"] and "joint_Facility" not in alone

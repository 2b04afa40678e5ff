"""Smoke runs of the experiment targets on toy sizes: every results field is there and the
figures are written. The real runs (`make reproduce-timing`, `make ablation-*`) are benchmarks."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.data import selection_table, write_dataset
from datamask.learner import LearnerConfig
from datamask.synthetic import synthetic_dataset

from figures.plots import main as figures_main
from reproduce.experiments import direct, findings, sweep, timing
from reproduce.experiments.common import greedy_runs_killable, lr_setting, power_law, predict

TOY = ["--dim", "16", "--clusters", "8", "--steps", "6", "--eval_points", "3"]


@pytest.fixture(scope="module")
def timing_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("exp")
    # a budget no run meets: the first two sizes run (nothing to fit yet), the third is extrapolated
    timing.main(["--sizes", "200", "300", "400", "--budget_s", "1e-9", "--n_rollout", "8",
                 "--output", str(out), *TOY])
    return out, json.loads((out / "timing.json").read_text())


def test_power_law_recovers_exponent():
    sizes = np.array([1e3, 5e3, 2e4])
    fit = power_law(sizes, 3e-6 * sizes**1.7)
    assert fit["exponent"] == pytest.approx(1.7)
    assert predict(fit, 1e5) == pytest.approx(3e-6 * 1e5**1.7)
    assert power_law([1000], [1.0]) is None


def test_timing_results_fields(timing_result):
    out, result = timing_result
    assert {"machine", "config", "paper", "runs", "fits", "comparisons", "crossover"} <= set(result)
    assert {"cpu", "cores", "torch_threads", "torch", "device"} <= set(result["machine"])
    labels = {(r["metric"], r["label"]) for r in result["runs"]}
    for metric, greedies in timing.GREEDIES.items():
        assert (metric, "datamask") in labels
        for label, *_ in greedies:
            rows = {r["n"]: r for r in result["runs"] if r["label"] == label}
            assert [rows[n]["status"] for n in (200, 300, 400)] == [
                "measured", "measured", "extrapolated"]
            assert rows[400]["objective"] is None
            assert rows[400]["wall_s"] == pytest.approx(predict(result["fits"][metric][label], 400))
    learner = next(r for r in result["runs"] if r["role"] == "learner")
    assert {"step", "elapsed_s", "objective"} == set(learner["curve"][0])
    assert all(r["repeats"] >= 1 for r in result["runs"] if r["status"] == "measured")
    for comp in result["comparisons"]:
        assert comp["time_ratio"] > 0
        assert (comp["gain_ratio"] is None) == (comp["greedy_status"] != "measured")
    text = (out / "timing.md").read_text()
    assert "(extrapolated, N^" in text and "Crossover" in text and "torch" in text


def test_crossover_needs_every_larger_size():
    rows = [{"metric": "DiSF", "greedy_role": "fast", "n": n, "time_ratio": r}
            for n, r in [(1, 2.0), (2, 0.5), (3, 1.5), (4, 0.5), (5, 0.1)]]
    assert timing.crossover(rows, ["DiSF"]) == {"DiSF": 4}
    assert timing.crossover(rows[:1], ["DiSF"]) == {"DiSF": None}


@pytest.mark.parametrize("knob, values", [("G", ["4", "8"]), ("lamb", ["1.0", "0.1"]),
                                          ("partial", ["1.0", "0.1"]),
                                          ("init", ["same", "quality+prune"]),
                                          ("lr", ["constant:1:1", "cosine:10:1"]),
                                          ("steps", ["4", "8"]),
                                          ("logprob", ["simple", "exact"]),
                                          ("scale_on", ["step", "input"])])
def test_sweep_results_fields(tmp_path, knob, values):
    sweep.main(["--knob", knob, "--values", *values, "--seeds", "0", "1", "--n", "150",
                "--metrics", "Pair_simi", "DiSF", "--output", str(tmp_path), *TOY])
    result = json.loads((tmp_path / f"ablation-{knob}.json").read_text())
    fields = {"machine", "config", "knob", "paper", "runs", "summary", "smallest_stable",
              "greedy", "best"}
    assert fields <= set(result)
    assert len(result["runs"]) == 2 * 2 * 2
    run = result["runs"][0]
    assert {"quality", "Pair_simi", "Facility", "DiSF", "joint_DiSF"} <= set(run["final"])
    assert run["objective"] == run["final"][f"joint_{run['metric']}"]
    for row in result["summary"]:
        assert {"objective_mean", "objective_std", "start_mean", "wall_s_mean", "stable",
                "quality_mean", "Facility_mean"} <= set(row)
    assert set(result["smallest_stable"]) == {"Pair_simi", "DiSF"}
    assert (tmp_path / f"ablation-{knob}.md").read_text().startswith(f"# Ablation: {knob}")
    if knob == "init":
        assert [r["params"]["prune_ratio"] for r in result["runs"][:3:2]] == [0.0, 0.5]
    if knob == "lr":
        assert [(r["params"]["lr_schedule"], r["params"]["max_lr"]) for r in result["runs"][:3:2]
                ] == [("constant", 1.0), ("cosine", 10.0)]
        assert result["runs"][0]["params"]["min_lr"] == 1.0
    else:  # every run records the rate it used: datamask select's default unless --lr
        assert {lr_setting_of(r["params"]) for r in result["runs"]} == {lr_setting()}
    if knob == "steps":
        assert [r["params"]["n_epochs"] for r in result["runs"][:3:2]] == [4, 8]
        assert [r["curve"][-1]["step"] for r in result["runs"][:3:2]] == [3, 7]
    assert {(g["metric"], g["lamb"]) for g in result["greedy"]} == {
        (m, r["params"]["lamb"]) for r in result["runs"] for m in ("Pair_simi", "DiSF")}
    # the joint greedy is the yardstick: on its own objective it beats these tiny learner runs
    assert all(g["objective"] > 0 for g in result["greedy"])


def lr_setting_of(params: dict) -> str:
    return lr_setting(LearnerConfig(**{k: params[k] for k in ("lr_schedule", "max_lr", "min_lr")}))


def test_lr_flag_is_used_and_recorded(tmp_path):
    result = sweep.main(["--knob", "G", "--values", "4", "--seeds", "0", "--n", "150",
                         "--metrics", "Pair_simi", "--lr", "linear:3:0.5",
                         "--output", str(tmp_path), *TOY])
    assert lr_setting_of(result["runs"][0]["params"]) == "linear:3:0.5"
    assert "lr linear:3:0.5" in (tmp_path / "ablation-G.md").read_text()


@pytest.mark.parametrize("argv", [["--knob", "lr", "--values", "step:1:1"],
                                  ["--knob", "G", "--lr", "linear:fast:1"],
                                  ["--knob", "G", "--lr", "10"]])
def test_sweep_refuses_bad_lr_value(capsys, argv):
    with pytest.raises(SystemExit):
        sweep.parse(argv)
    assert "schedule:max_lr:min_lr" in capsys.readouterr().err


def fake_pipeline(root):
    """The pipeline demo's files that figures 4-7 read: prepared rows, selections, Table 2."""
    data = synthetic_dataset(300, dim=16, seed=0)
    (root / "prepared").mkdir(parents=True)
    write_dataset(root / "prepared" / "000.parquet", data.ids, data.quality, data.features,
                  extra={"text_length": pa.array(np.arange(300, dtype=np.int64) + 100)})
    rng = np.random.default_rng(0)
    for method in ("datamask", "random"):
        (root / "select" / method).mkdir(parents=True)
        selected = np.zeros(300, dtype=bool)
        selected[rng.choice(300, 75, replace=False)] = True
        pq.write_table(selection_table(data.ids[::-1], selected, np.zeros(300)),
                       root / "select" / method / "selection.parquet")
    (root / "tables").mkdir()
    (root / "tables" / "table2.csv").write_text(
        "method,BBC-Cloze,BBC bits/byte,Avg,BBC-Cloze_stderr,BBC bits/byte_stderr\n"
        "datamask,26.5,2.69,26.5,2.9,\nrandom,25.7,2.68,25.7,2.9,\n")


def test_figures_written(timing_result, tmp_path):
    out, _ = timing_result
    sweep.main(["--knob", "G", "--values", "4", "8", "--seeds", "0", "1", "--n", "150",
                "--metrics", "Facility", "--output", str(out), *TOY])
    direct.main(["--n", "150", "--dim", "16", "--clusters", "8", "--steps", "4", "--seeds", "0",
                 "--metrics", "Pair_simi", "--output", str(out)])
    fake_pipeline(tmp_path / "pipe")
    written = figures_main(["--results", str(out), "--pipeline", str(tmp_path / "pipe"),
                            "--output", str(tmp_path / "fig")])
    names = {p.rsplit("/", 1)[1] for p in written}
    assert {f"{name}.{ext}" for ext in ("png", "pdf") for name in (
        "1-curves", "2-ablation-G", "2-ablation-G-values", "2-ablation-direct", "3-timing",
        "4-embeddings", "5-length-bias",
        "6-quality-redundancy", "7-table2")} <= names
    for path in written:
        with open(path, "rb") as f:
            assert f.read(4) in (b"\x89PNG", b"%PDF")


def test_pipeline_rows_aligned_by_id(tmp_path):
    from figures.pipeline import load

    fake_pipeline(tmp_path)
    rows = load(str(tmp_path))
    table = pq.read_table(tmp_path / "select" / "random" / "selection.parquet")
    chosen = set(table["chunk_id"].to_numpy()[table["selected"].to_numpy()])
    ids = pq.read_table(tmp_path / "prepared" / "000.parquet")["chunk_id"].to_numpy()
    assert set(ids[rows["masks"]["random"]]) == chosen
    assert rows["length"].tolist() == list(range(100, 400))


def test_fastest_keeps_the_fastest_within_budget():
    from reproduce.experiments.common import fastest

    times = iter([3.0, 1.0, 2.0, 0.5])
    assert fastest(lambda: {"wall_s": next(times)}, 3, 100.0) == {"wall_s": 1.0, "runs": 3}
    times = iter([3.0, 1.0])
    assert fastest(lambda: {"wall_s": next(times)}, 3, 5.0)["runs"] == 1  # 3 + 3 > 5


def test_greedy_over_budget_is_killed():
    """The reference DiSF greedy on 3,000 rows takes tens of seconds: killed after 0.5 s, with no
    result; a quick greedy comes back with its picks and the count of repeats that fitted."""
    data_args = {"n_rows": 3000, "dim": 64, "n_clusters": 8, "seed": 0}
    killed = greedy_runs_killable(data_args, 0.1, "disf-greedy", 3, 0.5, device="cpu")
    assert killed == {"killed": True, "wall_s": 0.5}
    quick = greedy_runs_killable(dict(data_args, n_rows=300), 0.1, "pair-greedy", 2, 60.0,
                                 device="cpu")
    assert quick["runs"] == 2 and quick["selected"].sum() == 30


def _summary(metric, value, mean, std, start, wall=1.0):
    return {"metric": metric, "value": value, "objective_mean": mean, "objective_std": std,
            "start_mean": start, "wall_s_mean": wall, "stable": True}


def test_findings_verdicts_follow_the_numbers(tmp_path):
    """Verdicts are computed from the results files: a crafted lr sweep where the highest rate
    ends far below the best and the lowest barely moves; a logprob sweep where exact wins by more
    than the seed std; missing files are reported as not measured."""
    default = lr_setting()  # the crafted best is the default setting
    lr = {"config": {"metrics": ["DiSF"], "n": 100, "steps": 10, "seeds": [0]},
          "greedy": [{"metric": "DiSF", "lamb": 0.5, "wall_s": 1.0, "objective": 9.0}],
          "summary": [_summary("DiSF", "linear:0.01:0.001", 1.05, 0.1, 1.0),
                      _summary("DiSF", default, 3.0, 0.1, 1.0),
                      _summary("DiSF", "linear:1000:100", 1.5, 0.1, 1.0)]}
    logprob = {"config": {"metrics": ["DiSF"]},
               "summary": [_summary("DiSF", "simple", 2.0, 0.1, 1.0, wall=1.0),
                           _summary("DiSF", "exact", 2.5, 0.1, 1.0, wall=3.0)]}
    unstable = dict(_summary("DiSF", 32.0, 1.0, 0.1, 0.5), stable=False)
    g_everywhere = {"config": {"metrics": ["DiSF"]}, "smallest_stable": {"DiSF": None},
                    "summary": [unstable, dict(unstable, value=128.0)]}
    for name, result in (("ablation-lr", lr), ("ablation-logprob", logprob),
                         ("ablation-G", g_everywhere)):
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    text = findings.main(["--results", str(tmp_path)])
    assert (tmp_path / "findings.md").read_text() == text
    lr_claims = [line for line in text.splitlines() if line.startswith("- DiSF: too high")]
    assert lr_claims == [
        "- DiSF: too high a rate ends below the best, by more than one std (linear:1000:100: "
        "1.500 vs 3.000): **holds**; too low a rate barely moves from its first step "
        "(linear:0.01:0.001: gain 0.050 vs the best's 2.000; rule: under 10%): **holds**."]
    assert f"| DiSF | {default} | 3.000 +- 0.100 | {default} |" in text
    assert f"The default {default} is in the useful range for 1 of 1 metrics." in text
    assert (f"(lowest mean rank of the final objective): {default}; `datamask select`'s "
            "default is that setting.") in text
    assert "difference +0.500" in text and "time exact / simple 3.00" in text
    assert "costs nothing (difference within one std): **does not hold**" in text
    assert "Not measured: no `timing.json`" in text and "no `ablation-direct.json`" in text
    # unstable at every G, 128 included: that is not the paper's "below 128 diverges"
    assert ("smallest stable G none; paper's claim that G below 128 diverges (unstable below 128, "
            "stable from 128 on): **does not hold** (unstable: 32, 128)") in text
    (tmp_path / "ablation-G.json").write_text(json.dumps(dict(
        g_everywhere, smallest_stable={"DiSF": 128.0},
        summary=[unstable, _summary("DiSF", 128.0, 1.0, 0.1, 0.5)])))
    assert "stable from 128 on): **holds** (unstable: 32)" in findings.main(["--results",
                                                                            str(tmp_path)])

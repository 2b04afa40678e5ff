"""The experiment targets on toy sizes: what each run decides (skips, extrapolations, stable
values, the best value) follows from its numbers, its results file reads back as the record it
wrote, and the figures are drawn (findings' verdicts: test_findings.py). The real runs (`make
reproduce-timing`, `make ablation-<knob>`) are benchmarks."""

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from conftest import write_shard
from datamask.data import selection_table
from datamask.learner import LearnerConfig
from datamask.objectives import DIVERSITY
from datamask.examples.synthetic import synthetic_dataset

from figures.plots import main as figures_main
from reproduce.experiments import direct, sweep, timing
from reproduce.experiments.common import greedy_runs_killable, lr_setting, power_law
from reproduce.experiments.records import (Comparison, CurvePoint, SweepRun, SweepSummary,
                                           read_result)

ROOT = Path(__file__).resolve().parent.parent
TOY = ["--dim", "16", "--clusters", "8", "--steps", "6", "--eval_points", "3"]


@pytest.fixture(scope="module")
def timing_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("exp")
    # a budget no run meets: the first two sizes run (nothing to fit yet), the third is extrapolated
    result = timing.main(["--sizes", "200", "300", "400", "--budget_s", "1e-9", "--n_rollout",
                          "8", "--output", str(out), *TOY])
    return out, result


def test_power_law_recovers_exponent():
    sizes = np.array([1e3, 5e3, 2e4])
    fit = power_law(sizes, 3e-6 * sizes**1.7)
    assert fit.exponent == pytest.approx(1.7)
    assert fit.predict(1e5) == pytest.approx(3e-6 * 1e5**1.7)
    assert power_law([1000], [1.0]) is None


def test_timing_extrapolates_past_the_budget(timing_result):
    out, result = timing_result
    assert read_result(str(out), "timing") == result  # the file is the record, read back whole
    labels = {(r.metric, r.label) for r in result.runs}
    for metric, greedies in timing.GREEDIES.items():
        assert (metric, "datamask") in labels
        for label, *_ in greedies:
            rows = {r.n: r for r in result.runs if r.label == label}
            assert [rows[n].status for n in (200, 300, 400)] == [
                "measured", "measured", "extrapolated"]
            assert rows[400].objective is None
            fit = result.fits[metric][label]
            assert fit.sizes == [200, 300] and rows[400].wall_s == pytest.approx(fit.predict(400))
    for learner in (r for r in result.runs if r.role == "learner"):
        assert [p.step for p in learner.curve] == [0, 2, 4, 5]  # every 6 // 3 steps, and the last
    assert all(r.repeats >= 1 for r in result.runs if r.status == "measured")
    for comp in result.comparisons:
        learner = next(r for r in result.runs if (r.metric, r.n, r.role) == (
            comp.metric, comp.n, "learner"))
        greedy = next(r for r in result.runs if (r.metric, r.n, r.label) == (
            comp.metric, comp.n, comp.greedy))
        assert comp.time_ratio == pytest.approx(learner.wall_s / greedy.wall_s)
        assert (comp.gain_ratio is None) == (comp.greedy_status != "measured")
    text = (out / "timing.md").read_text()
    assert "(extrapolated, N^" in text and "Crossover" in text and "torch" in text


def comparisons(ratios) -> list[Comparison]:
    return [Comparison(metric="DiSF", n=n, greedy="g", greedy_role="fast",
                       greedy_status="measured", time_ratio=r, objective_ratio=None,
                       gain_ratio=None, time_to_greedy_objective_s=None) for n, r in ratios]


def test_crossover_needs_every_larger_size():
    rows = comparisons([(1, 2.0), (2, 0.5), (3, 1.5), (4, 0.5), (5, 0.1)])
    assert timing.crossover(rows, ["DiSF"]) == {"DiSF": 4}
    assert timing.crossover(rows[:1], ["DiSF"]) == {"DiSF": None}
    assert timing.crossover(rows[::-1], ["DiSF"]) == {"DiSF": 4}  # by N, not by list order


def summary_row(metric, value, mean, std, start, wall=1.0, stable=True, **means) -> SweepSummary:
    return SweepSummary(metric=metric, objective_mean=mean, objective_std=std, wall_s_mean=wall,
                        means=means, value=value, start_mean=start, stable=stable)


def test_smallest_stable_needs_every_later_value():
    flags = [True, False, True, True]
    summary = [summary_row("DiSF", v, 1.0, 0.1, 0.5, stable=f) for v, f in zip("abcd", flags)]
    summary.append(summary_row("Facility", "a", 1.0, 0.1, 0.5, stable=False))
    assert sweep.smallest_stable(summary, ["DiSF", "Facility"]) == {"DiSF": "c", "Facility": None}


@pytest.mark.parametrize("knob, values", [("G", ["4", "8"]), ("lamb", ["1.0", "0.1"]),
                                          ("partial", ["1.0", "0.1"]),
                                          ("init", ["same", "quality+prune"]),
                                          ("lr", ["constant:1:1", "cosine:10:1"]),
                                          ("steps", ["4", "8"]),
                                          ("logprob", ["simple", "exact"]),
                                          ("scale_on", ["step", "input"])])
def test_sweep_runs_each_value_and_summarises_it(tmp_path, knob, values):
    result = sweep.main(["--knob", knob, "--values", *values, "--seeds", "0", "1", "--n", "150",
                         "--metrics", "Pair_simi", "DiSF", "--output", str(tmp_path), *TOY])
    assert result.experiment == f"ablation-{knob}"  # the Make target's name is the file's
    assert read_result(str(tmp_path), f"ablation-{knob}") == result
    assert len(result.runs) == 2 * 2 * 2
    for run in result.runs:
        assert set(run.final) == {"quality", *DIVERSITY, *(f"joint_{m}" for m in DIVERSITY)}
        assert run.objective == run.final[f"joint_{run.metric}"]
    for row in result.summary:
        group = [r for r in result.runs if (r.metric, r.value) == (row.metric, row.value)]
        assert row.objective_mean == pytest.approx(np.mean([r.objective for r in group]))
        assert row.start_mean == pytest.approx(np.mean([r.curve[0].objective for r in group]))
        assert row.means == pytest.approx({name: np.mean([r.final[name] for r in group])
                                           for name in ("quality", *DIVERSITY)})
        assert row.stable == (all(r.objective > r.curve[0].objective for r in group) and np.ptp(
            [r.objective for r in group]) <= 0.25 * (row.objective_mean - row.start_mean))
    for metric in ("Pair_simi", "DiSF"):
        rows = [s for s in result.summary if s.metric == metric]
        assert result.best[metric] == max(rows, key=lambda s: s.objective_mean).value
    assert result.smallest_stable == sweep.smallest_stable(result.summary, ["Pair_simi", "DiSF"])
    assert (tmp_path / f"ablation-{knob}.md").read_text().startswith(f"# Ablation: {knob}")
    params = [r.params for r in result.runs[:3:2]]  # the two values, seed 0, first metric
    if knob == "init":
        assert [p["prune_ratio"] for p in params] == [0.0, 0.5]
    if knob == "lr":
        assert [(p["lr_schedule"], p["max_lr"]) for p in params] == [
            ("constant", 1.0), ("cosine", 10.0)]
        assert params[0]["min_lr"] == 1.0
    else:  # every run records the rate it used: datamask select's default unless --lr
        assert {lr_setting_of(r.params) for r in result.runs} == {lr_setting()}
    if knob == "steps":
        assert [p["n_epochs"] for p in params] == [4, 8]
        assert [r.curve[-1].step for r in result.runs[:3:2]] == [3, 7]
    if knob in ("lamb", "partial", "logprob", "scale_on"):  # the learner's own name for it
        assert [p[knob] for p in params] == [v if knob in sweep.TEXT_KNOBS else float(v)
                                             for v in values]
    assert {(g.metric, g.lamb) for g in result.greedy} == {
        (m, r.params["lamb"]) for r in result.runs for m in ("Pair_simi", "DiSF")}
    # the joint greedy is the yardstick: on its own objective it beats these tiny learner runs
    assert all(g.objective > 0 for g in result.greedy)


def lr_setting_of(params: dict) -> str:
    return lr_setting(LearnerConfig(**{k: params[k] for k in ("lr_schedule", "max_lr", "min_lr")}))


def test_lr_flag_is_used_and_recorded(tmp_path):
    result = sweep.main(["--knob", "G", "--values", "4", "--seeds", "0", "--n", "150",
                         "--metrics", "Pair_simi", "--lr", "linear:3:0.5",
                         "--output", str(tmp_path), *TOY])
    assert lr_setting_of(result.runs[0].params) == "linear:3:0.5"
    assert "lr linear:3:0.5" in (tmp_path / "ablation-G.md").read_text()


@pytest.mark.parametrize("argv", [["--knob", "lr", "--values", "step:1:1"],
                                  ["--knob", "G", "--lr", "linear:fast:1"],
                                  ["--knob", "G", "--lr", "10"]])
def test_sweep_refuses_bad_lr_value(capsys, argv):
    with pytest.raises(SystemExit):
        sweep.parse(argv)
    assert "schedule:max_lr:min_lr" in capsys.readouterr().err


def test_equal_time_gives_each_value_the_steps_that_fill_the_first_values_time(monkeypatch):
    args = sweep.parse(["--knob", "partial", "--values", "1.0", "0.1", "0.05", "--equal_time",
                        *TOY])
    per_step = {1.0: 0.01, 0.1: 0.002, 0.05: 0.05}  # seconds; 0.05 dearer than the first

    def timed(data, ratio, score, eval_points, **params):
        return {"wall_s": per_step[params["partial"]] * params["n_epochs"]}
    monkeypatch.setattr(sweep, "learner_run", timed)
    steps = sweep.equal_time_steps(synthetic_dataset(150, dim=16, seed=0), args, "Pair_simi")
    # 1.3 x 6 steps x 0.01 s = 0.078 s: 39 steps of 0.1, 2 of 0.05
    assert steps == pytest.approx({1.0: 6, 0.1: 39, 0.05: 2}, abs=1) and steps[1.0] == 6


def test_equal_time_sweep_records_each_values_steps_and_its_objective_at_the_window(tmp_path):
    result = sweep.main(["--knob", "init", "--values", "same", "same+prune", "--equal_time",
                         "--seeds", "0", "1", "--n", "150", "--metrics", "Pair_simi",
                         "--no_greedy", "--output", str(tmp_path), *TOY])
    assert result.config["equal_time"]
    first = [r for r in result.runs if r.value == "same"]
    assert {r.params["n_epochs"] for r in first} == {6}
    for run in result.runs:  # each run's steps as its value's, its curve to its last step
        assert run.curve[-1].step == run.params["n_epochs"] - 1 == run.steps_taken - 1
    assert len({r.params["n_epochs"] for r in result.runs if r.value == "same+prune"}) == 1
    text = (tmp_path / "ablation-init.md").read_text()
    assert "At equal wall time" in text and "| Pair_simi |" in text.split("At equal wall time")[1]


@pytest.mark.parametrize("argv", [["--knob", "partial", "--equal_time", "--lr", "linear:10:1"],
                                  ["--knob", "steps", "--equal_time"]])
def test_equal_time_needs_a_constant_rate_and_a_knob_other_than_steps(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        sweep.parse(argv)
    assert exit_info.value.code == 2 and "--equal_time" in capsys.readouterr().err


def test_a_curve_read_at_a_time_and_to_an_objective():
    curve = [CurvePoint(0, 1.0, 2.0), CurvePoint(5, 2.0, 5.0), CurvePoint(9, 4.0, 8.0)]
    run = SweepRun(metric="DiSF", value=1.0, seed=0, params={}, wall_s=4.0, objective=8.0,
                   final={}, curve=curve)
    assert math.isnan(sweep.objective_at(run, 0.5)) and sweep.objective_at(run, 3.0) == 5.0
    assert sweep.objective_at(run, 4.0) == 8.0 and sweep.window_s([run]) == 4.0
    assert sweep.time_to(run, 5.0, window=10.0) == 2.0
    assert sweep.time_to(run, 8.0, window=3.0) == math.inf  # reached only after the window


def fake_pipeline(root):
    """The pipeline demo's files that figures 4, 6 and 7 read: prepared rows, selections, Table 2."""
    data = synthetic_dataset(300, dim=16, seed=0)
    (root / "prepared").mkdir(parents=True)
    write_shard(root / "prepared" / "000.parquet", data)
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
    results = tmp_path / "results"  # the question folders the Make targets write
    shutil.copytree(out, results / "timing")
    sweep.main(["--knob", "G", "--values", "4", "8", "--seeds", "0", "1", "--n", "150",
                "--metrics", "Facility", "--output", str(results / "ablation-G"), *TOY])
    direct.main(["--n", "150", "--dim", "16", "--clusters", "8", "--steps", "4", "--seeds", "0",
                 "--metrics", "Pair_simi", "--output", str(results / "ablation-direct")])
    fake_pipeline(tmp_path / "pipe")
    written = figures_main(["--results", str(results), "--pipeline", str(tmp_path / "pipe"),
                            "--output", str(tmp_path / "fig")])
    names = {p.rsplit("/", 1)[1] for p in written}
    assert {f"{name}.{ext}" for ext in ("png", "pdf") for name in (
        "1-curves", "2-ablation-G", "2-ablation-G-values", "2-ablation-direct", "3-timing",
        "4-embeddings", "6-quality-redundancy", "7-table2")} <= names
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


@pytest.mark.parametrize("knob", list(sweep.KNOBS))
def test_make_target_of_each_knob_has_the_knobs_name(knob):
    """`make ablation-<knob>` sweeps that knob (and so writes ablation-<knob>.json): one name
    from the target to the file to the figure."""
    dry = subprocess.run(["make", "-n", "-s", f"ablation-{knob}"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert f"reproduce.experiments.sweep --knob {knob} " in dry
    everything = subprocess.run(["make", "-n", "-s", "ablations"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout
    assert f"--knob {knob} " in everything


def test_timing_learner_stopped_by_the_rule_says_how_many_steps(tmp_path):
    """--patience reaches the timing's learner, and its table gives the steps each run took."""
    result = timing.main([*TOY, "--sizes", "200", "300", "--metrics", "Pair_simi", "--budget_s",
                          "60", "--steps", "400", "--patience", "5", "--repeats", "1",
                          "--output", str(tmp_path)])
    learners = [r for r in result.runs if r.role == "learner"]
    assert all(r.params["patience"] == 5 for r in learners)
    text = (tmp_path / "timing.md").read_text()
    assert "at most 400 steps, stopped by the rule of --patience 5" in text
    for run in learners:
        taken = run.curve[-1].step + 1
        assert taken < 400 and f"| {run.n} | datamask ({taken} steps) |" in text


def test_timing_learner_takes_facility_cover_sample(tmp_path):
    result = timing.main([*TOY, "--sizes", "200", "300", "--metrics", "Facility", "--budget_s",
                          "60", "--partial", "1", "--cover_sample", "0.2", "--repeats", "1",
                          "--output", str(tmp_path)])
    assert all(r.params["cover_sample"] == 0.2 for r in result.runs if r.role == "learner")
    assert "partial 1, cover_sample 0.2, lr" in (tmp_path / "timing.md").read_text()


def test_timing_learner_takes_disf_probes(tmp_path):
    result = timing.main([*TOY, "--sizes", "200", "300", "--metrics", "DiSF", "--budget_s",
                          "60", "--probes", "4", "--repeats", "1", "--output", str(tmp_path)])
    assert all(r.params["probes"] == 4 for r in result.runs if r.role == "learner")
    assert "partial 0.1, probes 4, lr" in (tmp_path / "timing.md").read_text()


def test_timing_learner_takes_init_and_records_the_step_it_wrote(tmp_path):
    """--init reaches the learner; under the read-off rule each learner run records the step its
    written selection came from (0: the scored greedy start, else a check's step)."""
    result = timing.main([*TOY, "--sizes", "200", "300", "--metrics", "Pair_simi", "--budget_s",
                          "60", "--init", "greedy", "--stop_every", "5", "--steps", "10",
                          "--repeats", "1", "--output", str(tmp_path)])
    learners = [r for r in result.runs if r.role == "learner"]
    assert learners and all(r.params["init"] == "greedy" for r in learners)
    assert all(r.best_step is not None and r.best_step % 5 == 0 for r in learners)
    text = (tmp_path / "timing.md").read_text()
    assert "init greedy" in text and f"written at step {learners[0].best_step})" in text
    assert timing.parse([*TOY, "--sizes", "200", "300"]).init == "auto"  # select's default




def test_timing_runs_every_selector_on_its_device(tmp_path):
    """--device reaches the learner and each greedy child, and the record says where it ran."""
    result = timing.main([*TOY, "--sizes", "200", "300", "--metrics", "Pair_simi", "--budget_s",
                          "60", "--steps", "5", "--repeats", "1", "--device", "cpu",
                          "--output", str(tmp_path)])
    assert result.machine.device == "cpu" and result.config["device"] == "cpu"
    assert all(r.params["device"] == "cpu" for r in result.runs if r.role == "learner")


@pytest.mark.parametrize("device", ["mps", "cuda:99"])
def test_timing_refuses_a_device_torch_cannot_use(capsys, device):
    if device == "cuda:99" and not torch.cuda.is_available():
        device = "cuda"  # refused here too: torch sees no CUDA device
    with pytest.raises(SystemExit):
        timing.parse([*TOY, "--sizes", "200", "300", "--device", device])
    error = capsys.readouterr().err
    assert f"--device {device}" in error or "--device must be" in error

"""`make reproduce-timing` at the paper's scale, run here at toy size: the scalable greedies
join with anytime curves, a learner capped by --learner_max_n is extrapolated from its own fit,
Facility is scored on a sample of covered rows past --score_rows, and the anytime figures are
drawn one per metric and size."""

from __future__ import annotations

import numpy as np
import pytest

from datamask.selectors import make_selector
from datamask.examples.synthetic import synthetic_dataset
from figures.plots import main as figures_main
from reproduce.experiments import timing
from reproduce.experiments.common import greedy_curve, greedy_run, metric_scorer
from reproduce.experiments.records import read_result

TOY = ["--dim", "16", "--clusters", "8", "--steps", "6", "--eval_points", "3", "--n_rollout", "8"]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    # the scalable greedy alone (each greedy is a child process, seconds to start); the full list
    # runs in tests/test_experiments.py
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(timing.GREEDIES, "Pair_simi", timing.SCALABLE["Pair_simi"])
        result = timing.main(["--sizes", "200", "300", "400", "--metrics", "Pair_simi",
                              "--budget_s", "120", "--repeats", "1", "--learner_max_n",
                              "Pair_simi=300", "--greedy_points", "4", "--output", str(out),
                              *TOY])
    return out, result


def test_learner_past_its_cap_is_extrapolated_and_greedies_go_on(scaled):
    out, result = scaled
    assert read_result(str(out), "timing") == result
    learner = {r.n: r for r in result.runs if r.role == "learner"}
    assert [learner[n].status for n in (200, 300, 400)] == ["measured", "measured", "extrapolated"]
    fit = result.fits["Pair_simi"]["datamask"]
    assert fit.sizes == [200, 300] and learner[400].wall_s == pytest.approx(fit.predict(400))
    assert learner[400].objective is None and learner[400].curve is None
    stochastic = {r.n: r for r in result.runs if r.label == "pair-greedy stochastic"}
    assert stochastic[400].status == "measured" and stochastic[400].role == "scalable"
    at_400 = [c for c in result.comparisons if c.n == 400]
    assert at_400 and all(c.gain_ratio is None for c in at_400)
    text = (out / "timing.md").read_text()
    assert "learner run up to N = 300 only" in text and "pair-greedy stochastic" in text


def test_greedy_curves_end_at_the_selection(scaled):
    _, result = scaled
    for run in (r for r in result.runs if r.role != "learner" and r.status == "measured"):
        steps = [p.step for p in run.curve]
        assert steps[0] == 0 and steps[-1] == run.n // 10 - 1 and len(steps) == 4
        assert run.curve[-1].objective == pytest.approx(run.objective, abs=1e-6)
        seconds = [p.elapsed_s for p in run.curve]
        assert seconds == sorted(seconds) and seconds[-1] == pytest.approx(run.wall_s)


def test_anytime_figure_per_metric_and_size(scaled, tmp_path):
    out, _ = scaled
    written = figures_main(["--results", str(out), "--pipeline", str(tmp_path / "none"),
                            "--output", str(tmp_path / "fig")])
    names = {p.rsplit("/", 1)[1] for p in written}
    # 400 too: the greedies have objectives there, the learner is a hollow extrapolated marker
    assert {f"3-anytime-Pair_simi-{n}.png" for n in (200, 300, 400)} <= names


def test_facility_scored_on_a_sample_of_covered_rows_past_score_rows():
    data = synthetic_dataset(3000, dim=16, seed=2)
    selected = make_selector("random", seed=1).select(data, 0.05).selected
    exact = metric_scorer(data, "Facility")(selected)
    assert metric_scorer(data, "Facility", cover_rows=3000)(selected) == exact  # not past it
    estimates = [metric_scorer(data, "Facility", cover_rows=500, seed=s)(selected)
                 for s in range(8)]
    assert len(set(estimates)) > 1  # a sample, seeded
    assert np.mean(estimates) == pytest.approx(exact, abs=0.01)


def test_a_greedy_without_a_clock_has_no_curve():
    data = synthetic_dataset(300, dim=8, seed=0)
    fast = greedy_run(data, 0.1, "disf-greedy-fast")
    assert fast["picks"] == [] and greedy_curve(fast, lambda mask: 0.0, 300, 5) is None

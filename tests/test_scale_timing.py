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
from datamask.data import Dataset, neighbourhood_blocks, random_blocks
from datamask.learner import LearnerConfig, MaskLearner
from reproduce.experiments.common import (blocks_learner_run, greedy_curve, greedy_run,
                                          metric_scorer)
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
    written = figures_main(["--results", str(tmp_path), "--timing", str(out), "--pipeline",
                            str(tmp_path / "none"), "--output", str(tmp_path / "fig")])
    names = {p.rsplit("/", 1)[1] for p in written}
    # 400 too: the greedies have objectives there, the learner is a hollow extrapolated marker
    assert {f"3-anytime-Pair_simi-{n}.png" for n in (200, 300, 400)} <= names


@pytest.mark.parametrize("plan", ["random", "neighbourhood"])
def test_the_learner_in_blocks_learns_each_block_of_its_plan_alone_at_its_budget(plan,
                                                                                 monkeypatch):
    """300 rows in blocks of at most 100: three blocks of the plan, each selecting 10% of its own
    rows exactly as a learner given that block alone would; the plan's time is counted; no
    block computes a certificate (it would bound the block's optimum, not the union's)."""
    import datamask.learner

    data = synthetic_dataset(300, dim=8, n_clusters=4, seed=3)
    config = dict(algorithm="Facility", n_epochs=20, n_rollout=8, stop_every=5, device="cpu")
    with monkeypatch.context() as patched:
        patched.setattr(datamask.learner, "certificate", None)  # any call would fail
        patched.setattr(datamask.learner, "certify", None)
        result = blocks_learner_run(data, 0.1, 100, plan_seed=4, plan=plan, **config)
    assert len(result["block_s"]) == 3 and result["selected"].sum() == 30
    assert result["wall_s"] == pytest.approx(result["plan_s"] + sum(result["block_s"]))
    blocks = (random_blocks(300, 3, 4) if plan == "random"
              else neighbourhood_blocks(data.features, 3))
    steps = set()
    for rows in blocks:
        rows = np.sort(rows)
        alone = MaskLearner(LearnerConfig(select_ratio=0.1, **config)).fit(
            Dataset(data.ids[rows], data.quality[rows], data.features[rows]), progress=False)
        np.testing.assert_array_equal(result["selected"][rows], alone.selected)
        steps.add(alone.best_step)
    # the step the blocks' selections were read at where they agree (the greedy start's, 0, on
    # the random plan here), else none
    assert result["best_step"] == (steps.pop() if len(steps) == 1 else None)
    assert plan == "neighbourhood" or result["best_step"] == 0


@pytest.mark.parametrize("n_rows, n_blocks", [(1000, 7), (101, 50), (64, 64), (10, 3)])
def test_neighbourhood_blocks_cover_every_row_once_in_near_equal_blocks(n_rows, n_blocks):
    features = np.random.default_rng(n_rows).normal(size=(n_rows, 5)).astype(np.float32)
    blocks = neighbourhood_blocks(features, n_blocks)
    sizes = [len(rows) for rows in blocks]
    assert len(blocks) == n_blocks and {n_rows // n_blocks, -(-n_rows // n_blocks)} >= set(sizes)
    np.testing.assert_array_equal(np.sort(np.concatenate(blocks)), np.arange(n_rows))


def test_neighbourhood_blocks_put_each_far_apart_cluster_in_its_own_block():
    """Four tight clusters of 50 rows at the corners of a rectangle (one long side, so the first
    cut has one direction to take): four blocks, each one cluster; random blocks mix them."""
    rng = np.random.default_rng(0)
    corners = np.array([[0, 0], [0, 10], [40, 0], [40, 10]], dtype=np.float32)
    cluster = np.repeat(np.arange(4), 50)
    features = corners[cluster] + rng.normal(scale=0.5, size=(200, 2)).astype(np.float32)
    order = rng.permutation(200)
    features, cluster = features[order], cluster[order]
    assert sorted(len(set(cluster[rows])) for rows in neighbourhood_blocks(features, 4)) == [1] * 4
    assert max(len(set(cluster[rows])) for rows in random_blocks(200, 4, 0)) > 1


def test_neighbourhood_blocks_refuse_more_blocks_than_rows():
    with pytest.raises(ValueError, match="5 blocks over 4 rows"):
        neighbourhood_blocks(np.zeros((4, 2), np.float32), 5)


def test_timing_runs_a_learner_in_blocks_past_learner_blocks(tmp_path):
    """Past --learner_blocks the learner runs in blocks; --greedies times only the greedies it
    names."""
    result = timing.main(["--sizes", "200", "300", "--metrics", "Facility", "--budget_s",
                          "120", "--repeats", "1", "--stop_every", "2", "--learner_blocks",
                          "Facility=250", "--greedies", "facility-greedy lazy",
                          "--output", str(tmp_path), *TOY])
    assert {r.label for r in result.runs if r.role != "learner"} == {"facility-greedy lazy"}
    learner = {r.n: r for r in result.runs if r.role == "learner"}
    assert learner[200].curve and learner[200].block_s is None  # under the cap: one run
    assert learner[300].curve is None and len(learner[300].block_s) == 2
    assert learner[300].wall_s == pytest.approx(learner[300].plan_s + sum(learner[300].block_s))
    assert learner[300].objective is not None and result.fits["Facility"]["datamask"]
    text = (tmp_path / "timing.md").read_text()
    assert "past N = 250, Facility's learner run in independent random blocks" in text
    assert "| 300 | datamask (2 blocks, the slowest" in text


@pytest.mark.parametrize("flags, message", [
    (["--learner_max_n", "Facility=9", "--learner_blocks", "Facility=9"], "both name"),
    (["--learner_blocks", "Facility=0"], "at least 1"),
    (["--learner_blocks", "Facility"], "expected METRIC=N"),
    (["--block_plan", "neighbourhood"], "give --learner_blocks"),
    (["--learner_blocks", "Facility=9", "--block_plan", "kmeans"], "invalid choice")])
def test_learner_blocks_is_refused_where_it_means_nothing(flags, message, capsys):
    with pytest.raises(SystemExit):
        timing.parse(flags)
    assert message in capsys.readouterr().err


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

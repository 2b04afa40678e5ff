"""Baselines: each is the real algorithm (checked against its reference or an established
library where one exists), meets the budget exactly, and refuses bad options by flag name."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from baselines import semdedup
from conftest import gaussian_data
from baselines.quality_threshold import fineweb_int_score
from datamask.cli import main
from datamask.data import Dataset, write_dataset
from datamask.errors import UserError
from datamask.objectives import DIVERSITY, FacilityLocation, GroundSet, clipped_cosine
from datamask.report import Report
from datamask.selectors import make_selector, selector_names
from datamask.examples.synthetic import synthetic_dataset


def picked_rows(selection) -> list[int]:
    return [record["row"] for record in selection.history]


# ---------------------------------------------------------------- SemDeDup

@pytest.mark.parametrize("backend", ["faiss", "torch"])
@pytest.mark.parametrize("keep", ["hard", "easy", "random"])
def test_semdedup_removes_exactly_the_planted_copies(monkeypatch, backend, keep):
    if backend == "torch":
        monkeypatch.setattr(semdedup, "faiss", None)
    rng = np.random.default_rng(3)
    base = rng.standard_normal((300, 32)).astype(np.float32)
    originals = rng.choice(300, 30, replace=False)
    copies_per_group = rng.integers(1, 3, 30)  # groups of 2 or 3 near-identical rows
    source = np.repeat(originals, copies_per_group)
    copies = base[source] + 1e-3 * rng.standard_normal((len(source), 32)).astype(np.float32)
    features = np.concatenate([base, copies])
    group = np.concatenate([np.arange(300), source])  # a copy belongs to its original's group
    shuffle = rng.permutation(len(features))
    features, group = features[shuffle], group[shuffle]
    n, n_copies = len(features), len(source)
    data = Dataset(np.arange(n, dtype=np.int64), np.ones(n, np.float32), features)

    selection = make_selector("semdedup", keep=keep).select(data, (n - n_copies) / n)

    kept_groups = group[selection.selected]
    assert len(kept_groups) == n - n_copies
    assert sorted(kept_groups) == list(range(300))  # one row of every group, planted or not
    summary = selection.history[-1]
    assert summary["kmeans"] == backend and summary["removed_at_eps"] == n_copies
    assert summary["dropped_by_rank"] == 0


@pytest.mark.parametrize("keep", ["hard", "easy"])
def test_semdedup_keeps_the_farthest_or_nearest_of_a_group(keep):
    rng = np.random.default_rng(0)
    centre = rng.standard_normal(16).astype(np.float32)
    far = centre + rng.standard_normal(16).astype(np.float32)
    features = np.stack([centre, centre + 0.01 * rng.standard_normal(16).astype(np.float32),
                         far, far + 0.01 * rng.standard_normal(16).astype(np.float32)])
    data = Dataset(np.arange(4, dtype=np.int64), np.ones(4, np.float32), features)
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    centroid = unit.sum(axis=0) / np.linalg.norm(unit.sum(axis=0))
    distance = 1 - unit @ centroid
    selection = make_selector("semdedup", n_clusters=1, keep=keep).select(data, 0.5)
    pick = np.argmax if keep == "hard" else np.argmin
    for pair in ([0, 1], [2, 3]):
        wanted = pair[int(pick(distance[pair]))]
        assert selection.selected[pair].tolist() == [row == wanted for row in pair]


# ---------------------------------------------------------------- quality threshold

def test_fineweb_int_score_rounds_half_to_even():
    scores = np.array([2.5, 2.51, 2.49, 3.5, 4.5, -1.0, 7.0], dtype=np.float32)
    assert fineweb_int_score(scores).tolist() == [2, 3, 2, 4, 4, 0, 5]


def test_quality_threshold_drops_2_5_and_keeps_2_51():
    quality = np.array([2.5, 2.51, 0.3, 4.9, 1.0, 3.2, 2.4, 2.49], dtype=np.float32)
    data = Dataset(np.arange(8, dtype=np.int64), quality, np.eye(8, dtype=np.float32))
    passing = quality > 2.5  # 2.51, 4.9, 3.2
    selection = make_selector("quality-threshold").select(data, 3 / 8)
    assert selection.selected.tolist() == passing.tolist()
    assert selection.history[0]["passed"] == 3
    # budget above the passing count: all passing, then the closest failing (int_score 2: 2.5,
    # 2.4 or 2.49, random among equals), never a row below
    wider = make_selector("quality-threshold").select(data, 5 / 8)
    assert wider.selected[passing].all() and wider.history[0]["filled_below_threshold"] == 2
    assert not wider.selected[[2, 4]].any()
    raw = make_selector("quality-threshold", threshold=2.45, rule="raw").select(data, 5 / 8)
    assert raw.selected.tolist() == (quality >= 2.45).tolist()


# ---------------------------------------------------------------- DiSF greedies

@pytest.mark.parametrize("n, dim, batch_size, ratio, seed", [
    (300, 8, 100, 0.05, 0), (500, 24, 128, 0.06, 1), (203, 5, 64, 0.1, 2), (90, 40, 90, 0.2, 3)])
def test_disf_fast_picks_equal_reference(n, dim, batch_size, ratio, seed):
    data = gaussian_data(n, dim, seed)
    options = dict(batch_size=batch_size, seed=seed, device="cpu")
    reference = make_selector("disf-greedy", **options).select(data, ratio)
    fast = make_selector("disf-greedy-fast", **options).select(data, ratio)
    assert picked_rows(fast) == picked_rows(reference)
    scores = [(a["collapse"], b["collapse"]) for a, b in zip(reference.history, fast.history)
              if a["pick"]]
    np.testing.assert_allclose(*zip(*scores), rtol=1e-9)


def test_disf_global_mode_is_one_batch_of_everything():
    data = gaussian_data(150, 6, 4)
    fast = make_selector("disf-greedy-fast", mode="global", device="cpu").select(data, 0.1)
    reference = make_selector("disf-greedy", batch_size=150, device="cpu").select(data, 0.1)
    assert picked_rows(fast) == picked_rows(reference)
    assert {record["batch"] for record in fast.history} == {0}


def test_disf_budget_spreads_over_batches_exactly():
    data = gaussian_data(1000, 4, 0)
    selection = make_selector("disf-greedy-fast", batch_size=128, device="cpu").select(data, 0.0625)
    per_batch = np.bincount(np.flatnonzero(selection.selected) // 128)
    assert per_batch.tolist() == [8] * 7 + [7]  # 63 = round(62.5): 7 full batches, 104 rows left
    fixed = make_selector("disf-greedy-fast", batch_size=128, picks_per_batch=7, device="cpu")
    per_batch = np.bincount(np.flatnonzero(fixed.select(data, 0.0625).selected) // 128)
    assert per_batch.tolist() == [7] * 7 + [63 - 49]
    with pytest.raises(UserError, match="--picks_per_batch"):  # 7 x 10 > 63
        make_selector("disf-greedy", batch_size=128, picks_per_batch=10).select(data, 0.0625)


# ---------------------------------------------------------------- facility location

@pytest.mark.parametrize("optimizer", ["naive", "lazy"])
def test_facility_objective_equals_apricot(optimizer):
    from apricot import FacilityLocationSelection

    data = gaussian_data(240, 12, 5)
    ground = GroundSet.from_arrays(data.features, data.quality)
    kernel = clipped_cosine(ground.unit, ground.unit).numpy()
    k = 24
    ours = make_selector("facility-greedy", optimizer=optimizer, device="cpu").select(data, 0.1)
    theirs = FacilityLocationSelection(k, metric="precomputed", optimizer=optimizer).fit(kernel)
    facility = FacilityLocation()
    ours_value = facility(ground, torch.as_tensor(np.flatnonzero(ours.selected)))
    theirs_value = facility(ground, torch.as_tensor(np.asarray(theirs.ranking)))
    assert ours_value.item() == pytest.approx(theirs_value.item(), rel=1e-6)
    assert sorted(picked_rows(ours)) == sorted(theirs.ranking.tolist())


def test_facility_lazy_picks_equal_naive():
    data = synthetic_dataset(600, dim=16, seed=2)
    naive = make_selector("facility-greedy", optimizer="naive", device="cpu").select(data, 0.05)
    lazy = make_selector("facility-greedy", optimizer="lazy", device="cpu").select(data, 0.05)
    assert picked_rows(lazy) == picked_rows(naive)
    assert lazy.history[-1]["gains_evaluated"] < naive.history[-1]["gains_evaluated"]


def test_facility_partitioned_is_valid_and_close_to_full_greedy():
    data = synthetic_dataset(400, dim=16, seed=1)
    memory_gb = 4 * 100**2 / 2**30  # a 100 x 100 kernel: 4 parts, subsampled merge cover
    part = make_selector("facility-greedy", memory_gb=memory_gb, device="cpu").select(data, 0.05)
    full = make_selector("facility-greedy", device="cpu").select(data, 0.05)
    assert part.selected.sum() == 20 and part.history[0]["partitions"] == 4
    assert part.history[0]["merge_cover_rows"] < 400
    report = Report(data, 0.05, 0.5, metrics=("Facility",))
    assert report(part.selected)["Facility"] >= 0.97 * report(full.selected)["Facility"]


# ---------------------------------------------------------------- greedy vs random, joint

GREEDY_METRIC = [
    ("pair-greedy", {}, "Pair_simi"),
    ("facility-greedy", {}, "Facility"),
    ("disf-greedy", {"batch_size": 256}, "DiSF"),  # 4 batches
    ("disf-greedy-fast", {"mode": "global"}, "DiSF"),
    ("joint-greedy", {"algorithm": "Pair_simi"}, "joint_Pair_simi"),
    ("joint-greedy", {"algorithm": "Facility"}, "joint_Facility"),
    ("joint-greedy", {"algorithm": "DiSF"}, "joint_DiSF"),
]


@pytest.fixture(scope="module")
def clustered():
    data = synthetic_dataset(1000, dim=16, seed=0)
    report = Report(data, 0.05, 0.5)
    randoms = [report(make_selector("random", seed=s).select(data, 0.05).selected)
               for s in range(5)]
    return data, report, randoms


@pytest.mark.parametrize("name, options, metric", GREEDY_METRIC)
def test_greedy_objective_beats_random(clustered, name, options, metric):
    data, report, randoms = clustered
    value = report(make_selector(name, device="cpu", **options).select(data, 0.05).selected)
    assert value[metric] > max(r[metric] for r in randoms)


@pytest.mark.parametrize("name, options, objective", [
    ("joint-greedy", {"algorithm": "Facility"}, "joint(Facility, lamb=0.5)"),
    ("joint-greedy", {"algorithm": "Pair_simi"}, "joint(Pair_simi, lamb=0.5)"),
    ("facility-greedy", {}, "Facility"),
    ("facility-knn-greedy", {}, "Facility-kNN"),
    ("pair-greedy", {}, "Pair_simi"),
])
def test_greedies_certify_their_selection_on_their_own_objective(clustered, name, options,
                                                                  objective):
    """A greedy's closing JSON names the objective it maximised, its selection's value, a bound
    on the best value and the selection's share of the room above a random selection."""
    run = make_selector(name, device="cpu", **options).select(clustered[0], 0.05).run
    assert run["objective"] == objective and run["no_bound_reason"] is None
    assert run["objective_random"] < run["objective_written"] <= run["objective_bound"]
    assert 0.9 < run["share_above_random_written"] <= 1


def test_a_greedy_without_a_bound_says_so_and_the_one_shot_baselines_say_nothing(clustered):
    data = clustered[0]
    run = make_selector("joint-greedy", algorithm="DiSF", device="cpu").select(data, 0.05).run
    assert run["objective"] == "joint(DiSF, lamb=0.5)" and run["objective_written"] is not None
    assert run["objective_bound"] is None and run["share_above_random_written"] is None
    assert run["no_bound_reason"].startswith("no bound: DiSF")
    assert make_selector("random").select(data, 0.05).run == {}


@pytest.mark.parametrize("algorithm", list(DIVERSITY))
def test_joint_greedy_with_lamb_one_is_quality_topk(clustered, algorithm):
    data = clustered[0]
    joint = make_selector("joint-greedy", algorithm=algorithm, lamb=1.0, device="cpu")
    topk = make_selector("quality-topk").select(data, 0.05)
    assert np.array_equal(joint.select(data, 0.05).selected, topk.selected)


@pytest.mark.parametrize("algorithm, optimizer", [
    ("Pair_simi", "lazy"), ("DiSF", "lazy"), ("Facility", "naive"), ("Facility", "lazy")])
def test_joint_greedy_equals_brute_force_through_joint_batch(algorithm, optimizer):
    """Each step of joint-greedy picks what scoring every S + {x} with Joint.batch picks."""
    data = gaussian_data(60, 8, 7)
    k, lamb = 6, 0.4
    joint = Report(data, k / 60, lamb, metrics=(algorithm,)).joint(algorithm)
    ground = GroundSet.from_arrays(data.features, data.quality)
    picks, values = [], []
    for step in range(k):
        rest = torch.tensor([x for x in range(60) if x not in picks])
        idx = torch.cat([torch.tensor(picks, dtype=torch.long).expand(len(rest), step),
                         rest.unsqueeze(1)], dim=1)
        if algorithm == "DiSF" and step == 0:  # DiSF is undefined on one row: quality decides
            score = joint.combine(joint.quality.batch(ground, idx), torch.zeros(len(rest)))
        else:
            score = joint.batch(ground, idx)
        picks.append(int(rest[score.argmax()]))
        values.append(score.max().item())
    greedy = make_selector("joint-greedy", algorithm=algorithm, lamb=lamb, optimizer=optimizer,
                           device="cpu").select(data, k / 60)
    assert picked_rows(greedy) == picks
    if algorithm != "Facility":
        np.testing.assert_allclose([r["joint"] for r in greedy.history], values, rtol=1e-4,
                                   atol=1e-5)


def test_joint_greedy_facility_without_kernel_matches_with_kernel(clustered):
    data = clustered[0]
    options = dict(algorithm="Facility", device="cpu")
    on_demand = make_selector("joint-greedy", memory_gb=1e-6, **options).select(data, 0.05)
    kernel = make_selector("joint-greedy", **options).select(data, 0.05)
    assert picked_rows(on_demand) == picked_rows(kernel)


# ---------------------------------------------------------------- options and CLI

@pytest.mark.parametrize("name, options, flag", [
    ("disf-greedy-fast", {"mode": "sideways"}, "--mode"),
    ("facility-greedy", {"optimizer": "eager"}, "--optimizer"),
    ("facility-greedy", {"memory_gb": 0}, "--memory_gb"),
    ("joint-greedy", {"algorithm": "Cosine"}, "--algorithm"),
    ("joint-greedy", {"lamb": 1.5}, "--lamb"),
    ("semdedup", {"keep": "all"}, "--keep"),
    ("semdedup", {"n_clusters": 0}, "--n_clusters"),
    ("semdedup", {"eps": (3.0,)}, "--eps"),
    ("quality-threshold", {"rule": "percentile"}, "--rule"),
    ("disf-greedy", {"batch_size": 1}, "--batch_size"),
])
def test_bad_options_name_the_flag(name, options, flag):
    with pytest.raises(UserError, match=flag):
        make_selector(name, **options).select(gaussian_data(50, 4, 0), 0.1)


def test_cli_list_names_every_baseline(capsys):
    assert main(["baseline", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == selector_names()
    assert {"disf-greedy", "disf-greedy-fast", "facility-greedy", "pair-greedy", "joint-greedy",
            "semdedup", "quality-threshold", "quality-topk", "random"} <= set(listed)


def test_cli_baseline_end_to_end(tmp_path, capsys):
    data = synthetic_dataset(300, dim=8, seed=4)
    write_dataset(tmp_path / "in.parquet", data)
    out = tmp_path / "out.parquet"
    assert main(["baseline", "joint-greedy", "--input", str(tmp_path / "in.parquet"),
                 "--output", str(out), "--select_ratio", "0.1", "--algorithm", "Facility",
                 "--optimizer", "naive", "--lamb", "0.3", "--device", "cpu", "--report"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # the closing JSON certifies the greedy's selection on its own objective, the report's joint
    assert summary["objective"] == "joint(Facility, lamb=0.3)"
    assert summary["objective_written"] == pytest.approx(summary["metrics"]["joint_Facility"],
                                                         rel=1e-5)
    assert summary["objective_bound"] == summary["metrics"]["joint_Facility_bound"]
    assert 0.9 < summary["share_above_random_written"] <= 1
    assert summary["no_bound_reason"] is None
    table = pq.read_table(out)
    assert table.column_names == ["chunk_id", "selected", "score"]
    assert table.column("chunk_id").to_numpy().tolist() == data.ids.tolist()
    assert table.column("selected").to_numpy().sum() == 30
    capsys.readouterr()
    assert main(["baseline", "pair-greedy", "--input", str(tmp_path / "in.parquet"),
                 "--output", str(out), "--eps", "0.1"]) == 2
    assert "--eps" in capsys.readouterr().err


@pytest.mark.parametrize("name, flags", [
    ("knn-density", ["--neighbors", "5", "--penalty", "0"]),
    ("cluster-quota", ["--n_clusters", "4", "--balance", "equal"]),
    ("mmr", ["--trade_off", "1.0", "--device", "cpu"]),
])
def test_cli_one_shot_flags_reach_the_selector(tmp_path, name, flags):
    """Each one-shot flag is passed through: penalty 0 and trade_off 1 are quality top-k exactly;
    cluster-quota's output is the library call's with the same flags, not its defaults'."""
    data = synthetic_dataset(300, dim=8, seed=4)
    write_dataset(tmp_path / "in.parquet", data)
    out = tmp_path / "out.parquet"
    assert main(["baseline", name, "--input", str(tmp_path / "in.parquet"), "--output", str(out),
                 "--select_ratio", "0.1", *flags]) == 0
    selected = pq.read_table(out).column("selected").to_numpy()
    if name == "cluster-quota":
        same = make_selector(name, n_clusters=4, balance="equal").select(data, 0.1).selected
        default = make_selector(name).select(data, 0.1).selected
        np.testing.assert_array_equal(selected, same)
        assert not np.array_equal(selected, default)
    else:
        topk = make_selector("quality-topk").select(data, 0.1).selected
        np.testing.assert_array_equal(selected, topk)


def test_batched_greedy_in_k_rounds_is_the_naive_greedy_and_fewer_rounds_pass_fewer_times():
    """--optimizer batched: with one row a round it is the naive greedy's picks; with --rounds r
    it scores every row r times (gains_evaluated) and still picks k distinct rows."""
    data = synthetic_dataset(500, dim=8, seed=5)
    naive = make_selector("pair-greedy", device="cpu").select(data, 0.1)
    one_a_round = make_selector("pair-greedy", optimizer="batched", rounds=50,
                                device="cpu").select(data, 0.1)
    assert picked_rows(one_a_round) == picked_rows(naive)
    batched = make_selector("joint-greedy", algorithm="Pair_simi", optimizer="batched", rounds=7,
                            device="cpu").select(data, 0.1)
    assert len(set(picked_rows(batched))) == 50 and batched.selected.sum() == 50
    assert batched.history[-1]["gains_evaluated"] == 7 * 500
    with pytest.raises(UserError, match="--rounds"):
        make_selector("pair-greedy", optimizer="batched", rounds=0)

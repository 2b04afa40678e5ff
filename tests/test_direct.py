"""One-shot selectors that set per-row scores directly (knn-density, cluster-quota, mmr), and the
`make ablation-direct` experiment comparing them with the learner on the same objective."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from baselines import cluster_quota, knn_density
from baselines.cluster_quota import quotas
from conftest import gaussian_data
from datamask.data import Dataset
from datamask.errors import UserError
from datamask.learner import LearnerConfig
from datamask.selectors import make_selector
from datamask.examples.synthetic import synthetic_dataset
from datamask.objectives import DIVERSITY
from reproduce.experiments import direct
from reproduce.experiments.records import read_result

DIRECT = [("knn-density", {"neighbors": 5}), ("cluster-quota", {"n_clusters": 8, "seed": 3}),
          ("mmr", {"device": "cpu"})]


def planted_clusters(sizes, dim: int = 16, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    """Rows around orthogonal centres (cosine 0 between clusters, ~1 inside), shuffled."""
    rng = np.random.default_rng(seed)
    group = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    features = np.eye(dim, dtype=np.float32)[group] + 0.05 * rng.standard_normal(
        (len(group), dim)).astype(np.float32)
    n = len(group)
    return Dataset(np.arange(n, dtype=np.int64), rng.uniform(0, 5, n).astype(np.float32),
                   features), group


@pytest.fixture(scope="module")
def data():
    return synthetic_dataset(400, dim=16, n_clusters=8, seed=1)


@pytest.fixture(scope="module")
def topk(data):
    return make_selector("quality-topk").select(data, 0.1).selected


# ---------------------------------------------------------------- all three

@pytest.mark.parametrize("name, options", DIRECT)
def test_exact_budget_unique_rows_and_deterministic(data, name, options):
    first = make_selector(name, **options).select(data, 0.1)
    again = make_selector(name, **options).select(data, 0.1)
    assert first.selected.sum() == 40
    assert len(set(data.ids[first.selected].tolist())) == 40
    assert np.array_equal(first.selected, again.selected)
    assert np.array_equal(first.score, again.score)
    top = np.lexsort((np.arange(len(data)), -first.score))[:40]  # the score ranks the selection
    assert first.selected[top].all()


@pytest.mark.parametrize("name, options, flag", [
    ("knn-density", {"neighbors": 0}, "--neighbors"),
    ("knn-density", {"neighbors": 2.5}, "--neighbors"),
    ("knn-density", {"neighbors": 50}, "--neighbors"),  # as many as the rows
    ("knn-density", {"penalty": -1.0}, "--penalty"),
    ("knn-density", {"penalty": float("nan")}, "--penalty"),
    ("cluster-quota", {"n_clusters": 0}, "--n_clusters"),
    ("cluster-quota", {"balance": "square-root"}, "--balance"),
    ("mmr", {"trade_off": 1.5}, "--trade_off"),
    ("mmr", {"trade_off": -0.1}, "--trade_off"),
])
def test_bad_options_name_the_flag(name, options, flag):
    with pytest.raises(UserError, match=flag):
        make_selector(name, **options).select(gaussian_data(50, 4, 0), 0.1)


# ---------------------------------------------------------------- knn-density

def test_knn_density_without_penalty_is_quality_topk(data, topk):
    assert np.array_equal(make_selector("knn-density", penalty=0.0).select(data, 0.1).selected,
                          topk)


@pytest.mark.parametrize("backend", ["faiss", "torch"])
def test_knn_density_equals_brute_force(monkeypatch, backend):
    if backend == "torch":
        monkeypatch.setattr(knn_density, "faiss", None)
    features = gaussian_data(60, 8, 2).features
    features[7:31:4] = features[3]  # 7 equal rows: a row itself may lose the tie at cosine 1
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    expected = np.sort(sims, axis=1)[:, -4:].mean(axis=1)
    density, used = knn_density.knn_density(torch.as_tensor(unit), 4)
    assert used == backend
    np.testing.assert_allclose(density, expected, rtol=1e-5, atol=1e-6)


def test_knn_density_avoids_a_planted_duplicate_cluster():
    rng = np.random.default_rng(5)
    base = gaussian_data(200, 16, 5)
    copies = rng.standard_normal(16) + 0.01 * rng.standard_normal((20, 16))  # tight, and the best
    features = np.concatenate([base.features, copies.astype(np.float32)])
    quality = np.concatenate([base.quality * 0.8, rng.uniform(4.5, 5.0, 20)]).astype(np.float32)
    data = Dataset(np.arange(220, dtype=np.int64), quality, features)
    copy = np.arange(220) >= 200
    topk = make_selector("quality-topk").select(data, 30 / 220).selected
    dense = make_selector("knn-density", neighbors=5, penalty=1.0).select(data, 30 / 220)
    assert topk[copy].sum() == 20
    assert dense.selected[copy].sum() < 5
    assert dense.history[0]["knn"] in ("faiss", "torch")


# ---------------------------------------------------------------- cluster-quota

@pytest.mark.parametrize("sizes, k, balance, expected", [
    ([10, 5, 0, 3], 7, "proportional", [4, 2, 0, 1]),  # 3.89, 1.94, 0, 1.17: remainders .94, .89
    ([10, 5, 0, 3], 7, "equal", [3, 2, 0, 2]),  # level 7/3, the extra one to the lower cluster
    ([10, 1, 1, 1], 8, "equal", [5, 1, 1, 1]),  # small clusters give their share away
    ([4, 4], 8, "proportional", [4, 4]),
])
def test_quotas_examples(sizes, k, balance, expected):
    assert quotas(sizes, k, balance).tolist() == expected


@pytest.mark.parametrize("balance", ["proportional", "equal"])
def test_quotas_sum_to_k_and_fit_their_clusters(balance):
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(0, 30, rng.integers(1, 12))
        if sizes.sum() == 0:
            continue
        k = int(rng.integers(1, sizes.sum() + 1))
        quota = quotas(sizes, k, balance)
        assert quota.sum() == k and (quota <= sizes).all() and (quota >= 0).all()
        if balance == "proportional":  # largest remainder: within one of the exact share
            assert (np.abs(quota - k * sizes / sizes.sum()) < 1).all()
        else:  # water-filling: a cluster below the largest quota is full
            assert ((quota >= quota.max() - 1) | (quota == sizes)).all()


@pytest.mark.parametrize("balance, expected", [("proportional", [8, 6, 4, 2]),
                                               ("equal", [5, 5, 5, 5])])
def test_cluster_quota_counts_per_planted_cluster(monkeypatch, balance, expected):
    data, group = planted_clusters([80, 60, 40, 20])
    # the planted clustering itself: k-means restarts can land in a local optimum on clusters
    # of very uneven size, which is not what this test is about
    monkeypatch.setattr(cluster_quota, "spherical_kmeans",
                        lambda unit, n_clusters, seed: (torch.as_tensor(group), "planted"))
    selection = make_selector("cluster-quota", n_clusters=4, balance=balance).select(data, 0.1)
    counts = np.bincount(group[selection.selected], minlength=4)
    assert counts.tolist() == expected
    for c in range(4):  # each cluster's best rows by quality
        members = np.flatnonzero(group == c)
        best = members[np.argsort(-data.quality[members], kind="stable")[:expected[c]]]
        assert selection.selected[best].all()


def test_cluster_quota_with_kmeans_meets_its_own_quotas(data):
    selection = make_selector("cluster-quota", n_clusters=8, seed=0).select(data, 0.1)
    record = selection.history[0]
    sizes, quota = np.array(record["sizes"]), np.array(record["quotas"])
    assert quota.sum() == 40 and (np.abs(quota - 40 * sizes / sizes.sum()) < 1).all()
    assert record["kmeans"] in ("faiss", "torch")


def test_cluster_quota_with_one_cluster_is_quality_topk(data, topk):
    selection = make_selector("cluster-quota", n_clusters=1).select(data, 0.1)
    assert np.array_equal(selection.selected, topk)


# ---------------------------------------------------------------- mmr

def test_mmr_with_trade_off_one_is_quality_topk(data, topk):
    assert np.array_equal(make_selector("mmr", trade_off=1.0, device="cpu")
                          .select(data, 0.1).selected, topk)


@pytest.mark.parametrize("trade_off", [0.5, 0.2, 0.0])
def test_mmr_picks_equal_a_plain_loop(trade_off):
    data = gaussian_data(40, 8, 4)
    unit = data.features / np.linalg.norm(data.features, axis=1, keepdims=True)
    q = data.quality.astype(np.float64)
    z = (q - q.mean()) / q.std()
    picks = [int(np.argmax(q))]  # the first pick by quality alone, even at trade_off 0
    for _ in range(5):
        best, best_value = None, -np.inf
        for x in range(40):
            if x in picks:
                continue
            redundancy = max((float(unit[x] @ unit[s]) for s in picks), default=0.0)
            value = trade_off * z[x] - (1 - trade_off) * redundancy
            if value > best_value + 1e-9:
                best, best_value = x, value
        picks.append(best)
    selection = make_selector("mmr", trade_off=trade_off, device="cpu").select(data, 6 / 40)
    assert [r["row"] for r in selection.history] == picks
    assert selection.score[picks].tolist() == [6, 5, 4, 3, 2, 1]


# ---------------------------------------------------------------- the experiment

def test_direct_experiment_scores_every_method_alike(tmp_path):
    result = direct.main(["--n", "300", "--dim", "16", "--clusters", "8", "--steps", "5",
                          "--seeds", "0", "1", "--metrics", "Pair_simi", "--n_rollout", "8",
                          "--quota_clusters", "8", "--output", str(tmp_path)])
    assert result.experiment == "ablation-direct"
    assert read_result(str(tmp_path), "ablation-direct") == result  # the file is the record
    methods = ["datamask", "joint-greedy", "knn-density", "cluster-quota", "mmr", "quality-topk",
               "random"]
    assert result.methods == methods
    runs = {m: [r for r in result.runs if r.method == m] for m in methods}
    assert {m: len(r) for m, r in runs.items()} == {
        "datamask": 2, "joint-greedy": 1, "knn-density": 1, "cluster-quota": 2, "mmr": 1,
        "quality-topk": 1, "random": 2}
    for run in result.runs:
        assert set(run.final) == {"quality", *DIVERSITY, *(f"joint_{m}" for m in DIVERSITY)}
        assert run.objective == run.final["joint_Pair_simi"] and run.wall_s > 0
    assert [r.seed for r in runs["datamask"]] == [0, 1] and runs["mmr"][0].seed is None
    assert {(r.params["lr_schedule"], r.params["max_lr"]) for r in runs["datamask"]} == {
        (LearnerConfig.lr_schedule, LearnerConfig.max_lr)}  # the rate is recorded
    assert [s.method for s in result.summary] == methods
    learner = result.summary[0]
    for row in result.summary:
        group = runs[row.method]
        assert row.runs == len(group)
        assert row.objective_mean == pytest.approx(np.mean([r.objective for r in group]))
        assert row.wall_s_std == pytest.approx(np.std([r.wall_s for r in group]))
        assert row.means["quality"] == pytest.approx(np.mean([r.final["quality"] for r in group]))
        assert row.gap_to_learner == pytest.approx(row.objective_mean - learner.objective_mean)
    assert learner.gap_to_learner == 0
    # quality top-k has the highest mean quality of all: it takes the best rows by quality
    assert max(result.summary, key=lambda s: s.means["quality"]).method == "quality-topk"
    assert result.best["Pair_simi"] == max(result.summary, key=lambda s: s.objective_mean).method
    text = (tmp_path / "ablation-direct.md").read_text()
    assert text.startswith("# Ablation: direct") and "## joint_Pair_simi" in text
    assert all(f"| {m} |" in text for m in methods)

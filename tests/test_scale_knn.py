"""Facility location on a sparse kNN kernel (`datamask.objectives.sparse_facility`) and its
greedy (`facility-knn-greedy`): the kernel is the exact kNN one, the objective and gains agree
with a brute-force reading of the kernel, the greedy equals facility-greedy when nothing is
dropped and apricot's greedy on the same sparse kernel, and bad options name their flag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import gaussian_data
from datamask.errors import UserError
from datamask.objectives import (FacilityLocation, GroundSet, SparseCoverageGains,
                                 SparseFacilityLocation, knn_kernel)
from datamask.selectors import make_selector
from datamask.examples.synthetic import synthetic_dataset


def picked_rows(selection) -> list[int]:
    return [record["row"] for record in selection.history]


def dense_knn_kernel(unit: torch.Tensor, neighbours: int) -> np.ndarray:
    """K[v, u]: clipped cosine where u is among v's `neighbours` most similar rows (torch topk)."""
    sims = unit @ unit.T
    top = sims.topk(neighbours, dim=1)
    kernel = torch.zeros_like(sims).scatter_(1, top.indices, top.values.clamp_min(0))
    return kernel.numpy()


def test_flat_kernel_is_the_exact_knn_kernel_by_candidate():
    unit = GroundSet.from_arrays(gaussian_data(300, 16, 0).features, np.zeros(300)).unit
    kernel = knn_kernel(unit, 7, "flat")
    expected = dense_knn_kernel(unit, 7)  # (covered v, candidate u)
    assert np.allclose(kernel.to_scipy().toarray(), expected.T, atol=1e-6)
    assert kernel.start[-1] == len(kernel.covered) == np.count_nonzero(expected)


def test_ivf_probing_every_list_equals_flat():
    unit = GroundSet.from_arrays(synthetic_dataset(2000, dim=16, seed=3).features,
                                 np.zeros(2000)).unit
    flat = knn_kernel(unit, 10, "flat").to_scipy()
    ivf = knn_kernel(unit, 10, "ivf", nlist=16, nprobe=16).to_scipy()
    assert abs(flat - ivf).max() < 1e-5
    partial = knn_kernel(unit, 10, "ivf", nlist=16, nprobe=1).to_scipy()
    recall = flat.multiply(partial > 0).nnz / flat.nnz
    assert 0.5 < recall <= 1.0  # approximate, yet mostly the true neighbours


def test_objective_and_gains_equal_a_brute_force_reading_of_the_kernel():
    data = gaussian_data(200, 8, 1)
    ground = GroundSet.from_arrays(data.features, data.quality)
    kernel = knn_kernel(ground.unit, 9)
    dense = kernel.to_scipy().toarray()  # (candidate u, covered v)
    masks = torch.as_tensor(np.random.default_rng(0).choice(200, (5, 12)))
    values = SparseFacilityLocation(kernel, memory_bytes=4096).batch(ground, masks)
    expected = [dense[m].max(axis=0).mean() for m in masks.numpy()]
    assert np.allclose(values.numpy(), expected, atol=1e-6)

    term = SparseCoverageGains(kernel)
    for row in masks[0, :4].tolist():
        cur = term.cur.numpy()
        expected_gains = np.maximum(dense - cur, 0).sum(axis=1)
        assert np.allclose(term.gains().numpy(), expected_gains, atol=1e-5)
        some = torch.tensor([5, 0, 199, 5])
        assert np.allclose(term.gains(some).numpy(), expected_gains[some.numpy()], atol=1e-5)
        term.add(row, term.gains(torch.tensor([row]))[0])
    picked = masks[0, :4].numpy()
    assert term.covered / 200 == pytest.approx(dense[picked].max(axis=0).mean(), abs=1e-6)


def exact_coverage(data, rows: list[int]) -> float:
    """Facility location of `rows` on clipped cosine over all rows, in float64."""
    unit = torch.nn.functional.normalize(torch.tensor(data.features, dtype=torch.float64), dim=1)
    return (unit @ unit[rows].T).clamp_min(0).max(dim=1).values.mean().item()


@pytest.mark.parametrize("optimizer", ["lazy", "naive"])
def test_every_neighbour_kept_is_facility_greedy_pick_for_pick(optimizer):
    """The same picks, but where two rows tie exactly (equal in float64 given the picks before:
    rows 92 and 295 at step 12 here), float32 rounding of the two kernels may break the tie
    apart, and does on some CPUs; the greedies may part only there, their values agreeing at
    every step."""
    data = synthetic_dataset(300, dim=12, seed=4)
    dense = make_selector("facility-greedy", optimizer=optimizer, device="cpu").select(data, 0.05)
    sparse = make_selector("facility-knn-greedy", neighbours=300, optimizer=optimizer,
                           device="cpu").select(data, 0.05)
    dense_rows, sparse_rows = picked_rows(dense), picked_rows(sparse)
    parted = next((step for step, (a, b) in enumerate(zip(dense_rows, sparse_rows)) if a != b),
                  None)
    if parted is not None:
        before = dense_rows[:parted]
        assert exact_coverage(data, before + [sparse_rows[parted]]) == pytest.approx(
            exact_coverage(data, before + [dense_rows[parted]]), abs=1e-12)
    for ours, theirs in zip(sparse.history, dense.history, strict=True):
        assert ours["facility_knn"] == pytest.approx(theirs["facility"], rel=1e-5)


def test_stochastic_with_every_row_sampled_equals_lazy():
    data = synthetic_dataset(500, dim=12, seed=6)
    lazy = make_selector("facility-knn-greedy", device="cpu").select(data, 0.04)
    stochastic = make_selector("facility-knn-greedy", optimizer="stochastic", epsilon=1e-300,
                               device="cpu").select(data, 0.04)
    assert picked_rows(stochastic) == picked_rows(lazy)


@pytest.mark.parametrize("optimizer", ["lazy", "naive"])
def test_objective_equals_apricot_on_the_same_sparse_kernel(optimizer):
    from apricot import FacilityLocationSelection

    n, k = 2000, 100
    data = synthetic_dataset(n, dim=32, n_clusters=30, seed=2)
    ground = GroundSet.from_arrays(data.features, data.quality)
    kernel = knn_kernel(ground.unit, 20)
    ours = make_selector("facility-knn-greedy", neighbours=20, optimizer=optimizer,
                         device="cpu").select(data, k / n)
    theirs = FacilityLocationSelection(k, metric="precomputed", optimizer=optimizer).fit(
        kernel.to_scipy())
    objective = SparseFacilityLocation(kernel)
    ours_value = objective(ground, torch.as_tensor(picked_rows(ours))).item()
    theirs_value = objective(ground, torch.as_tensor(theirs.ranking.astype(np.int64))).item()
    assert ours_value == pytest.approx(theirs_value, rel=1e-5)
    assert ours.history[-1]["facility_knn"] == pytest.approx(ours_value, rel=1e-5)
    # the same picks, up to the order of ties
    assert sorted(picked_rows(ours)) == sorted(theirs.ranking.tolist())


def test_sparse_objective_approaches_dense_facility_as_neighbours_grow():
    data = synthetic_dataset(1000, dim=16, seed=8)
    ground = GroundSet.from_arrays(data.features, data.quality)
    picks = torch.as_tensor(np.random.default_rng(1).choice(1000, 50, replace=False))
    dense = FacilityLocation()(ground, picks).item()
    values = [SparseFacilityLocation(knn_kernel(ground.unit, m))(ground, picks).item()
              for m in (5, 50, 1000)]
    assert values[0] <= values[1] <= values[2]
    assert values[2] == pytest.approx(dense, rel=1e-5)


@pytest.mark.parametrize("options, flag", [
    ({"neighbours": 0}, "--neighbours"),
    ({"index": "hnsw"}, "--index"),
    ({"nprobe": 0}, "--nprobe"),
    ({"nlist": 8}, "--nlist"),  # with the flat index
    ({"index": "ivf", "nlist": 10_000}, "--nlist"),
    ({"optimizer": "eager"}, "--optimizer"),
    ({"epsilon": 1.5}, "--epsilon"),
])
def test_bad_options_name_the_flag(options, flag):
    with pytest.raises(UserError, match=flag):
        make_selector("facility-knn-greedy", **options).select(gaussian_data(100, 4, 0), 0.1)


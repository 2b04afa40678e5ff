"""The optimality certificate (`datamask.objectives.certificate`): on instances small enough to
score every k-subset, the bound is at least the best of them for every metric that has one, at
any lamb and with negative quality scores; the floor is the exact mean of a random selection;
DiSF says it has no bound; and the numbers do not depend on the device."""

import itertools
import math

import numpy as np
import pytest
import torch

from datamask.examples.synthetic import synthetic_dataset
from datamask.greedy import greedy
from datamask.objectives import (DiSF, FacilityLocation, GroundSet, Joint, JointGains,
                                 PairSimilarity, SparseFacilityLocation, TermScale, certificate,
                                 certify, knn_kernel)
from datamask.objectives.certificates import exchange_bound
from datamask.objectives.facility import best_of_random_weights

N, K = 12, 4
SUBSETS = torch.tensor(list(itertools.combinations(range(N), K)))
TOLERANCE = 1e-5  # float32 values against a float64 bound


def tiny_ground(seed: int, negative: bool) -> GroundSet:
    """Rows with a common direction (cosines mostly positive, some negative) and qualities that
    are partly negative when `negative`."""
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((N, 5)).astype(np.float32) + 0.4
    quality = rng.standard_normal(N).astype(np.float32) - (1.0 if negative else -2.0)
    return GroundSet.from_arrays(features, quality)


METRICS = {
    "Facility": lambda ground: FacilityLocation(),
    "Facility-kNN": lambda ground: SparseFacilityLocation(knn_kernel(ground.unit, 4)),
    "Facility covering 7 rows": lambda ground: FacilityLocation(cover=torch.arange(2, 9)),
    "Pair_simi": lambda ground: PairSimilarity(),
}


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("lamb", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bound_is_at_least_the_best_of_every_subset(seed, metric, lamb, negative):
    """For the best, the worst and a middling k-subset, each certificate's value is the
    objective's, its bound at least the best over all 495 subsets, its floor their mean, and its
    share (above random) no more than the share of the room up to that best."""
    ground = tiny_ground(seed, negative)
    function = METRICS[metric](ground)
    joint = Joint(function, lamb, TermScale(0.3, 0.7, -0.2, 0.05 + 0.1 * seed))
    values = joint.batch(ground, SUBSETS).double()
    best, mean = values.max().item(), values.mean().item()
    for at in values.argsort()[[-1, 0, len(values) // 2]]:
        found = certificate(joint, ground, SUBSETS[at])
        assert found.value == pytest.approx(values[at].item(), abs=TOLERANCE)
        assert found.bound >= best - TOLERANCE
        assert found.random == pytest.approx(mean, abs=TOLERANCE)
        if found.value >= mean:  # below random a larger room makes the share less negative
            assert found.share_above_random() <= (found.value - mean) / (best - mean) + TOLERANCE


@pytest.mark.parametrize("metric", ["Facility", "Facility-kNN", "Pair_simi"])
def test_a_bare_metric_is_certified_on_its_raw_value(metric):
    ground = tiny_ground(3, negative=False)
    function = METRICS[metric](ground)
    values = function.batch(ground, SUBSETS).double()
    found = certificate(function, ground, SUBSETS[values.argmin()])
    assert found.value == pytest.approx(values.min().item(), abs=TOLERANCE)
    assert found.bound >= values.max().item() - TOLERANCE
    assert found.random == pytest.approx(values.mean().item(), abs=TOLERANCE)


def lazy_greedy(joint: Joint, ground: GroundSet, k: int) -> torch.Tensor:
    """The lazy greedy's picks on `joint` (Facility's), through the core's greedy engine."""
    term = JointGains(joint, ground, joint.diversity.incremental(ground))
    picks, _ = greedy(term, k, optimizer="lazy", score=term.value_with)
    return torch.tensor(picks)


@pytest.mark.parametrize("lamb", [0.0, 0.5])
def test_the_greedy_is_within_its_guarantee_and_under_the_bound(lamb):
    """On tiny inputs the bound holds the greedy's value and the optimum, and at lamb 0 (Facility
    alone: monotone submodular, 0 on the empty set) the greedy keeps 1 - 1/e of the optimum, as
    theory says; its share of the room above random is no more than 1."""
    ground = tiny_ground(4, negative=True)
    joint = Joint(FacilityLocation(), lamb, TermScale(0.0, 1.0, 0.0, 1.0))
    values = joint.batch(ground, SUBSETS).double()
    found = certificate(joint, ground, lazy_greedy(joint, ground, K))
    assert values.max().item() - TOLERANCE <= found.bound
    assert found.value <= found.bound
    assert 0 <= found.share_above_random() <= 1
    if lamb == 0:
        assert found.value >= (1 - 1 / math.e) * values.max().item()


def test_a_clustered_greedy_is_certified_near_the_optimum():
    """The Lagrangian bound, not the online one alone: on a clustered shard the exchange bound
    leaves the lazy greedy at 0.68 of the room above random, the certificate at 0.97."""
    data = synthetic_dataset(300, dim=8, n_clusters=4)
    ground = GroundSet.from_arrays(data.features, data.quality)
    joint = Joint(FacilityLocation(), 0.0, TermScale(0.0, 1.0, 0.0, 1.0))
    rows = lazy_greedy(joint, ground, 30)
    found = certificate(joint, ground, rows)
    term = joint.diversity.incremental(ground)
    term.add_all(rows)
    exchanged = exchange_bound(found.value, torch.zeros(300, dtype=torch.float64), rows,
                               term.gains().double() / 300)
    assert found.share_above_random(exchanged) < 0.7
    assert found.share_above_random() > 0.95


def test_the_exchange_bound_is_no_looser_than_the_shifted_online_bound():
    """Negative quality scores: the online bound of the shifted function J + c |T| (each row's
    worth raised by c = max(0, -min), monotone; at k rows the shift is the constant c k, so
    OPT <= J(S) + the k largest shifted gains) against the exchange of rows, which needs no
    shift: the exchange is never looser."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        per_row = torch.randn(N, generator=generator, dtype=torch.float64) - 0.5
        gains = torch.rand(N, generator=generator, dtype=torch.float64)
        rows = torch.randperm(N, generator=generator)[:K]
        gains[rows] = 0.0
        shift = max(0.0, -per_row.min().item())
        outside = (per_row + shift + gains).index_fill(0, rows, -math.inf)
        online = outside.topk(K).values.sum().item()
        assert exchange_bound(0.0, per_row, rows, gains) <= online + 1e-12


def test_disf_has_no_bound_but_its_joint_at_lamb_one_has():
    ground = tiny_ground(0, negative=True)
    scale = TermScale(0.0, 1.0, 0.0, 1.0)
    found = certificate(Joint(DiSF(), 0.5, scale), ground, SUBSETS[0])
    assert found.bound is None and found.random is None and found.share_above_random() is None
    assert found.no_bound_reason.startswith("no bound: DiSF")
    assert certificate(DiSF(), ground, SUBSETS[0]).bound is None
    quality_only = Joint(DiSF(), 1.0, scale)  # the modular quality alone: its exact optimum
    best = quality_only.batch(ground, SUBSETS).max().item()
    assert certificate(quality_only, ground, SUBSETS[0]).bound == pytest.approx(best, abs=1e-6)


def test_dense_facility_past_its_pair_limit_says_why_it_has_no_bound(monkeypatch):
    """Its passes over covered x all rows would outlast the run: no bound, the value kept."""
    from datamask.objectives import certificates

    ground = tiny_ground(0, negative=False)
    joint = Joint(FacilityLocation(), 0.5, TermScale(0.0, 1.0, 0.0, 1.0))
    certified = certificate(joint, ground, SUBSETS[0])
    monkeypatch.setattr(certificates, "DENSE_PAIRS_LIMIT", len(ground) ** 2 - 1)
    found = certificate(joint, ground, SUBSETS[0])
    assert found.bound is None and found.share_above_random() is None
    assert found.no_bound_reason.startswith("not computed: Facility's bound reads 12 covered rows")
    assert found.value == pytest.approx(certified.value)


def test_certify_takes_the_tightest_bound_and_scores_equal_selections_once(monkeypatch):
    ground = tiny_ground(1, negative=False)
    joint = Joint(FacilityLocation(), 0.5, TermScale(0.0, 1.0, 0.0, 1.0))
    calls = []
    monkeypatch.setattr("datamask.objectives.certificates.certificate",
                        lambda *args: calls.append(args) or certificate(*args))
    found = certify(joint, ground, {"start": SUBSETS[3], "written": SUBSETS[3].flip(0),
                                    "other": None})
    assert len(calls) == 1 and set(found) == {"start", "written"}


def test_random_weights_are_the_chance_of_each_rank():
    for n, k in [(12, 4), (50, 1), (9, 9), (400, 40)]:
        weights = best_of_random_weights(n, k, "cpu")
        exact = [math.comb(n - j, k - 1) / math.comb(n, k) for j in range(1, len(weights) + 1)]
        np.testing.assert_allclose(weights.numpy(), exact, rtol=1e-12)
        assert weights.sum().item() == pytest.approx(1.0, abs=1e-11)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("metric", ["Facility", "Facility-kNN", "Pair_simi"])
def test_the_certificate_is_the_same_on_cuda(metric):
    cpu = tiny_ground(2, negative=True)
    cuda = GroundSet(cpu.features.cuda(), cpu.quality.cuda())
    joint = {name: Joint(METRICS[metric](ground), 0.5, TermScale(0.0, 1.0, 0.0, 1.0))
             for name, ground in (("cpu", cpu), ("cuda", cuda))}
    there = certificate(joint["cuda"], cuda, SUBSETS[7])
    here = certificate(joint["cpu"], cpu, SUBSETS[7])
    assert there.bound == pytest.approx(here.bound, rel=1e-4)
    assert there.random == pytest.approx(here.random, rel=1e-4)


@pytest.mark.parametrize("sampled", [False, True])
def test_the_lists_pass_sums_each_rows_gain_on_a_selection_as_the_gains_pass_does(sampled):
    """Facility's certificate takes every row's gain from the pass that builds its coverage lists:
    the gains a pass of their own gives (to float32's rounding), the lists unchanged, on all rows
    covered and on a sample of them."""
    data = synthetic_dataset(500, dim=8, n_clusters=5, seed=4)
    ground = GroundSet.from_arrays(data.features, data.quality, torch.device("cpu"))
    cover = torch.randperm(500, generator=torch.Generator().manual_seed(1))[:200] if sampled \
        else None
    metric = FacilityLocation(cover=cover)
    term = metric.incremental(ground)
    term.add_all(torch.tensor([3, 70, 222, 400]))
    alone = metric.coverage_lists(ground, 4, 16)
    joined = metric.coverage_lists(ground, 4, 16, coverage=term.cur)
    assert alone.gains is None and joined.gains.dtype == torch.float64
    torch.testing.assert_close(joined.gains, term.gains().double(), rtol=1e-6, atol=1e-5)
    assert torch.equal(joined.similarity, alone.similarity)
    assert torch.equal(joined.candidate, alone.candidate)
    assert joined.random_value == alone.random_value

"""Each objective against a plain-numpy re-computation from its definition (the paper s.3, as
the docstrings of datamask/objectives/*.py state it)."""

import itertools

import numpy as np
import pytest
import torch

from datamask.examples.synthetic import synthetic_dataset
from datamask.objectives import (DiSF, FacilityLocation, GroundSet, Joint, JointGains,
                                 PairSimilarity, Quality, TermScale, diversity, diversity_gains,
                                 random_masks, random_probes)
from datamask.objectives.base import CPU_CHUNK_BYTES, chunk_bytes


def brute_pair(features, rows):
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    cos = [unit[i] @ unit[j] for i, j in itertools.combinations(rows, 2)]
    return -np.mean(cos)


def brute_facility(features, rows):
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    return np.mean([max(max(unit[v] @ unit[u], 0.0) for u in rows) for v in range(len(unit))])


def brute_disf(features, rows):
    """The DiSF reference formula, written out: standardise, correlate, off-diagonal squares."""
    x = features[rows].astype(np.float64)
    z = (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0, ddof=1) + 1e-8)
    corr = z.T @ z / (len(rows) - 1)
    off = corr - np.diag(np.diag(corr))
    return -(off ** 2).sum() / 1e4


@pytest.fixture(params=[0, 1, 2])
def case(request):
    rng = np.random.default_rng(request.param)
    n, d, k, g = 40, 7, 9, 6
    features = rng.standard_normal((n, d)).astype(np.float32) + 0.3
    quality = rng.random(n).astype(np.float32)
    masks = np.stack([rng.choice(n, k, replace=False) for _ in range(g)])
    return features, quality, masks


@pytest.mark.parametrize("function,brute", [
    (Quality(), lambda f, q, r: q[r].mean()),
    (PairSimilarity(), lambda f, q, r: brute_pair(f, r)),
    (FacilityLocation(), lambda f, q, r: brute_facility(f, r)),
    (DiSF(), lambda f, q, r: brute_disf(f, r)),
])
def test_batch_matches_brute_force(case, function, brute):
    features, quality, masks = case
    ground = GroundSet.from_arrays(features, quality)
    values = function(ground, torch.as_tensor(masks)).numpy()
    expected = [brute(features, quality, list(m)) for m in masks]
    np.testing.assert_allclose(values, expected, rtol=1e-4, atol=1e-6)
    single = function(ground, torch.as_tensor(masks[0]))
    assert single.dim() == 0
    np.testing.assert_allclose(single.item(), expected[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dim, k", [(24, 5), (24, 15), (24, 30)])
def test_disf_gram_and_covariance_paths_match_brute_force(dim, k):
    """Fewer rows than 2/3 of the dimensions take the (k, k) Gram path, more the (d, d) one."""
    rng = np.random.default_rng(dim + k)
    features = (rng.standard_normal((60, dim)) * rng.uniform(0.2, 3, dim) + 0.5).astype(np.float32)
    masks = np.stack([rng.choice(60, k, replace=False) for _ in range(4)])
    ground = GroundSet.from_arrays(features, np.zeros(60, np.float32))
    values = DiSF()(ground, torch.as_tensor(masks)).numpy()
    expected = [brute_disf(features.astype(np.float64), list(m)) for m in masks]
    np.testing.assert_allclose(values, expected, rtol=1e-4, atol=1e-7)


def disf_case(dim=24, k=30, n_masks=4, seed=0):
    rng = np.random.default_rng(seed)
    features = (rng.standard_normal((60, dim)) * rng.uniform(0.2, 3, dim) + 0.5).astype(np.float32)
    masks = np.stack([rng.choice(60, k, replace=False) for _ in range(n_masks)])
    return GroundSet.from_arrays(features, np.zeros(60, np.float32)), torch.as_tensor(masks)


def test_random_probes_are_orthogonal_and_scaled_to_identity_on_average():
    gen = torch.Generator().manual_seed(0)
    probes = random_probes(24, 6, gen, "cpu")
    torch.testing.assert_close(probes.T @ probes, 4.0 * torch.eye(6), atol=1e-5, rtol=0)
    assert random_probes(24, 100, gen, "cpu").shape == (24, 24)  # never more than d
    mean = sum(p @ p.T for p in (random_probes(24, 6, gen, "cpu") for _ in range(2000))) / 2000
    torch.testing.assert_close(mean, torch.eye(24), atol=0.15, rtol=0)


@pytest.mark.parametrize("k", [5, 30])
def test_disf_probes_spanning_the_space_give_the_exact_score(k):
    ground, masks = disf_case(k=k)
    probes = random_probes(24, 24, torch.Generator().manual_seed(1), "cpu")
    torch.testing.assert_close(DiSF().probing(probes)(ground, masks), DiSF()(ground, masks),
                               rtol=1e-4, atol=1e-7)


def test_disf_probe_estimate_is_unbiased():
    """Averaged over many draws of 4 probes, the estimate comes within 4 standard errors of the
    exact score, for each mask; one draw is far off (so the check has teeth)."""
    ground, masks = disf_case()
    gen = torch.Generator().manual_seed(2)
    draws = torch.stack([DiSF().probing(random_probes(24, 4, gen, "cpu"))(ground, masks)
                         for _ in range(3000)]).double()
    exact = DiSF()(ground, masks).double()
    error = (draws.mean(0) - exact).abs()
    assert (error < 4 * draws.std(0) / len(draws) ** 0.5).all()
    assert ((draws[0] - exact).abs() > 100 * error).any()


@pytest.mark.parametrize("function_class", [PairSimilarity, FacilityLocation, DiSF])
def test_chunked_evaluation_is_the_same(case, function_class):
    features, quality, masks = case
    ground = GroundSet.from_arrays(features, quality)
    whole = function_class()(ground, torch.as_tensor(masks))
    chunked = function_class(memory_bytes=1)(ground, torch.as_tensor(masks))  # one mask a chunk
    torch.testing.assert_close(whole, chunked)


def test_chunks_are_capped_on_cpu_only():
    """On CPU a chunk holds at most CPU_CHUNK_BYTES (allocations reused, not faulted in afresh),
    a smaller memory budget still wins; an accelerator's chunk is the whole budget."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert chunk_bytes(256 * 2**20, cpu) == CPU_CHUNK_BYTES < 256 * 2**20
    assert chunk_bytes(1, cpu) == 1
    assert chunk_bytes(256 * 2**20, cuda) == 256 * 2**20


def test_diversity_prefers_spread_selection():
    """Sanity of signs: a selection from one tight cluster is less diverse than one across
    clusters under every metric (higher is better everywhere)."""
    rng = np.random.default_rng(0)
    centers = np.eye(8, dtype=np.float32) * 3
    features = np.concatenate([c + 0.05 * rng.standard_normal((10, 8)) for c in centers])
    ground = GroundSet.from_arrays(features.astype(np.float32), np.zeros(80, np.float32))
    clumped = torch.arange(8)  # 8 rows of cluster 0
    spread = torch.arange(0, 80, 10)  # one row per cluster
    for function in (PairSimilarity(), FacilityLocation(), DiSF()):
        assert function(ground, spread) > function(ground, clumped), function.name


def test_joint_standardises_each_term(case):
    features, quality, masks = case
    ground = GroundSet.from_arrays(features, quality)
    gen = torch.Generator().manual_seed(0)
    scale = TermScale.fit(ground, masks.shape[1], PairSimilarity(), gen)
    joint = Joint(PairSimilarity(), 0.3, scale)
    idx = torch.as_tensor(masks)
    q, d = Quality()(ground, idx), PairSimilarity()(ground, idx)
    expected = (0.3 * (q - scale.quality_mean) / scale.quality_std
                + 0.7 * (d - scale.diversity_mean) / scale.diversity_std)
    torch.testing.assert_close(joint(ground, idx), expected)
    # On fresh random masks each term has mean ~0 and std ~1. With 4096 fitting masks the
    # fitted mean is off by ~1/64 std and the std by ~1/90; 4000 test masks add as much again.
    big = TermScale.fit(ground, masks.shape[1], PairSimilarity(), gen, masks_per_ground=512)
    rand = random_masks(len(ground), masks.shape[1], 4000, gen, ground.device)
    for values, mean, std in ((Quality()(ground, rand), big.quality_mean, big.quality_std),
                              (PairSimilarity()(ground, rand), big.diversity_mean,
                               big.diversity_std)):
        z = (values - mean) / std
        assert abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1) < 0.08


def test_random_masks_are_uniform_subsets():
    gen = torch.Generator().manual_seed(0)
    masks = random_masks(10, 3, 20000, gen, torch.device("cpu"))
    assert all(len(set(m.tolist())) == 3 for m in masks[:200])
    freq = torch.bincount(masks.reshape(-1), minlength=10).double() / 20000
    assert torch.allclose(freq, torch.full((10,), 0.3, dtype=torch.float64), atol=0.015)


def test_pair_similarity_counts_an_all_zero_row_as_no_direction(case):
    """A zero row has cosine 0 with every row and no unit vector: its pairs add 0 to the sum,
    and its removal gain is the change in the mean over the pairs left."""
    features, quality, masks = case
    features = features.copy()
    features[masks[0][0]] = 0.0
    unit = np.zeros_like(features, dtype=np.float64)
    nonzero = np.linalg.norm(features, axis=1) > 0
    unit[nonzero] = features[nonzero] / np.linalg.norm(features[nonzero], axis=1, keepdims=True)

    def pair_value(rows):
        return -np.mean([unit[i] @ unit[j] for i, j in itertools.combinations(rows, 2)])

    ground = GroundSet.from_arrays(features, quality)
    values, credit = PairSimilarity().batch_with_credit(ground, torch.as_tensor(masks))
    expected = [pair_value(list(m)) for m in masks]
    removal = [[pair_value(list(m)) - pair_value([r for r in m if r != i]) for i in m]
               for m in masks]
    np.testing.assert_allclose(PairSimilarity()(ground, torch.as_tensor(masks)).numpy(), expected,
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(values.numpy(), expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(credit.numpy(), removal, rtol=1e-3, atol=1e-6)


def test_facility_kernel_and_per_mask_paths_agree(case):
    """Masks holding more rows than the ground set gather their similarities from one kernel;
    with a budget too small for that kernel, each chunk of masks takes its own GEMM. Values and
    per-row credits are the same either way."""
    features, quality, masks = case
    ground = GroundSet.from_arrays(features, quality)
    idx = torch.as_tensor(np.concatenate([masks] * 4))  # 24 masks x 9 rows > 40 rows
    gathered, per_mask = FacilityLocation(), FacilityLocation(memory_bytes=1)
    torch.testing.assert_close(gathered(ground, idx), per_mask(ground, idx))
    for got, want in zip(gathered.batch_with_credit(ground, idx),
                         per_mask.batch_with_credit(ground, idx)):
        torch.testing.assert_close(got, want)


# Hand counts on tiny cases (2 FLOPs a multiply-add; the reduction where no product is):
HAND_COUNTS = [
    # quality: the mean of 2 qualities in each of 3 masks, 2 adds (counted as elements) each
    (Quality(), (5, 3, 3, 2), 6),
    # Pair_simi: (2 masks x 5 rows) weights times (5 x 3) rows, 2 * 5 * 3 multiply-adds a mask
    (PairSimilarity(), (5, 3, 2, 2), 60),
    # DiSF, 3 rows of 2-d (3k >= 2d): a (2 x 3)(3 x 2) covariance, 12 multiply-adds, and its
    # (2 x 2)(2 x 1) product with the weights, 4: 32 FLOPs a mask, 2 masks
    (DiSF(), (5, 2, 2, 3), 64),
    # DiSF, 2 rows of 4-d (3k < 2d): the (2 x 4)(4 x 2) Gram matrix, 16 multiply-adds, 3 masks
    (DiSF(), (5, 4, 3, 2), 96),
    # DiSF on one probe, 3 rows of 4-d: (3 x 4)(4 x 1) and (4 x 3)(3 x 1), 12 + 12 multiply-adds
    (DiSF().probing(torch.ones(4, 1)), (5, 4, 1, 3), 48),
    # Facility, 1 mask of 2 rows over 6 (G k <= n: a GEMM): (2 x 2)(2 x 6), 24 multiply-adds,
    # then the max over the mask's 2 rows of 6 similarities, 12 elements
    (FacilityLocation(), (6, 2, 1, 2), 60),
    # Facility, 3 masks of 2 rows over 4 (G k > n: one kernel): (4 x 2)(2 x 4), 32 multiply-adds,
    # then 3 masks' max over 2 x 4 similarities, 24 elements
    (FacilityLocation(), (4, 2, 3, 2), 88),
    # Facility covering 3 of 6 rows, 1 mask of 2: (2 x 2)(2 x 3), 12 multiply-adds; max, 6
    (FacilityLocation(cover=torch.arange(3)), (6, 2, 1, 2), 30),
    # the joint at lamb 0.5 sums its terms: quality's 4 and DiSF's 64 on 2 masks of 3 rows of 2-d
    (Joint(DiSF(), 0.5, TermScale(0, 1, 0, 1)), (5, 2, 2, 3), 70),
    # ... and skips a term weighted 0
    (Joint(DiSF(), 0.0, TermScale(0, 1, 0, 1)), (5, 2, 2, 3), 64),
]


@pytest.mark.parametrize("metric, shape, flops", HAND_COUNTS)
def test_each_objective_declares_the_arithmetic_of_its_batch(metric, shape, flops):
    """`batch_flops` against a count by hand, and its products against torch's own count of the
    matrix products `batch` runs on that shape (FlopCounterMode), so a changed code path (DiSF's
    covariance, Gram or probes; Facility's GEMM or kernel) that the declared cost does not
    follow fails here."""
    from torch.utils.flop_counter import FlopCounterMode

    rows, dim, n_masks, k = shape
    assert metric.batch_flops(rows, dim, n_masks, k) == flops
    rng = np.random.default_rng(0)
    ground = GroundSet.from_arrays(rng.standard_normal((rows, dim)).astype(np.float32) + 0.5,
                                   rng.random(rows).astype(np.float32))
    idx = torch.stack([torch.randperm(rows)[:k] for _ in range(n_masks)])
    with FlopCounterMode(display=False) as counter:
        metric.batch(ground, idx)
    reduced = {Quality: n_masks * k, FacilityLocation: n_masks * k * (
        rows if getattr(metric, "cover", None) is None else len(metric.cover))}
    joint_quality = n_masks * k if isinstance(metric, Joint) and metric.lamb > 0 else 0
    assert counter.get_total_flops() == flops - reduced.get(type(metric), joint_quality)


def test_the_joint_greedys_score_at_lamb_0_is_combines_bit_for_bit():
    """At lamb 0 the greedy's score skips quality's term and the unit weight: the values `combine`
    gives, bit for bit, so the picks are the same, for every metric."""
    data = synthetic_dataset(400, dim=8, n_clusters=5, seed=3)
    ground = GroundSet.from_arrays(data.features, data.quality, torch.device("cpu"))
    for algorithm in ("Pair_simi", "Facility", "DiSF"):
        joint = Joint(diversity(algorithm), 0.0, TermScale(1.3, 0.7, 0.21, 0.037))
        term = JointGains(joint, ground, diversity_gains(algorithm, ground, 2**31))
        for row in (3, 50, 120):
            term.add(row, term.gains()[row])
        gains = term.gains()
        expected = joint.combine(term.quality.value_with(None),
                                 term.diversity.value_with(gains, None))
        assert torch.equal(term.value_with(gains), expected)

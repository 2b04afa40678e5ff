"""Gumbel-top-k has the law of sequential sampling without replacement from softmax(logits)."""

import itertools
import math

import numpy as np
import torch

from datamask.sampling import gumbel_topk, plackett_luce_log_prob, simple_log_prob

LOGITS = torch.tensor([1.5, 0.2, -0.7, 0.9, 0.0, -1.2])
K = 3


def sequential_order_probabilities(logits, k):
    """Exact probability of every ordered draw of k rows without replacement."""
    w = np.exp(logits.double().numpy())
    probs = {}
    for order in itertools.permutations(range(len(w)), k):
        p, left = 1.0, w.sum()
        for row in order:
            p *= w[row] / left
            left -= w[row]
        probs[order] = p
    return probs


def test_inclusion_frequencies_match_sequential_sampling():
    exact = sequential_order_probabilities(LOGITS, K)
    inclusion = np.zeros(len(LOGITS))
    for order, p in exact.items():
        inclusion[list(order)] += p
    draws = 200_000
    gen = torch.Generator().manual_seed(0)
    idx = gumbel_topk(LOGITS, K, draws, gen)
    freq = np.bincount(idx.reshape(-1).numpy(), minlength=len(LOGITS)) / draws
    # Each frequency is a mean of `draws` Bernoulli(p): allow 5 standard errors.
    tolerance = 5 * np.sqrt(inclusion * (1 - inclusion) / draws)
    assert np.all(np.abs(freq - inclusion) < tolerance), (freq, inclusion)


def test_draw_order_matches_sequential_sampling():
    """The first drawn row has probability softmax(L) (5 standard errors)."""
    draws = 100_000
    idx = gumbel_topk(LOGITS, K, draws, torch.Generator().manual_seed(1))
    first = np.bincount(idx[:, 0].numpy(), minlength=len(LOGITS)) / draws
    p = torch.softmax(LOGITS.double(), 0).numpy()
    assert np.all(np.abs(first - p) < 5 * np.sqrt(p * (1 - p) / draws))


def test_every_mask_has_k_distinct_rows():
    idx = gumbel_topk(torch.zeros(50), 7, 300, torch.Generator().manual_seed(2))
    assert idx.shape == (300, 7)
    assert all(len(set(row.tolist())) == 7 for row in idx)


def test_plackett_luce_log_prob_is_exact():
    exact = sequential_order_probabilities(LOGITS, K)
    orders = torch.tensor(list(exact))
    log_p = plackett_luce_log_prob(LOGITS, orders).double().numpy()
    np.testing.assert_allclose(np.exp(log_p), list(exact.values()), rtol=1e-5)
    assert math.isclose(np.exp(log_p).sum(), 1.0, rel_tol=1e-5)


def test_simple_log_prob_is_sum_of_log_softmax():
    idx = torch.tensor([[0, 3, 5], [1, 2, 4]])
    expected = torch.log_softmax(LOGITS, 0)[idx].sum(1)
    torch.testing.assert_close(simple_log_prob(LOGITS, idx), expected)


def test_unordered_draws_are_the_ordered_draws_as_sets():
    """The learner's simple log-probability needs only the sets: an unsorted top-k from the same
    generator state selects exactly the rows of the ordered one."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(5))
    ordered = gumbel_topk(logits, 40, 16, torch.Generator().manual_seed(6))
    unordered = gumbel_topk(logits, 40, 16, torch.Generator().manual_seed(6), ordered=False)
    assert torch.equal(ordered.sort(dim=1).values, unordered.sort(dim=1).values)

"""Pair-wise similarity (`Pair_simi`): minus the mean cosine over the selected pairs.

With s = sum of the selected unit vectors, sum_{i<j} cos(e_i, e_j) = (||s||^2 - sum_i ||u_i||^2) / 2,
so one mask costs O(k d) and no k x k matrix is formed. (The sum of squared norms is k for unit rows;
using it rather than k keeps the identity exact for an all-zero feature row.)
"""

from __future__ import annotations

import torch

from .base import GroundSet, SetFunction


def pair_cosine_sum(sum_vector: torch.Tensor, sum_sq_norms: torch.Tensor) -> torch.Tensor:
    """Sum of cos over unordered pairs from the running sum; shared with the greedy's gain."""
    return (sum_vector.square().sum(dim=-1) - sum_sq_norms) / 2


class PairSimilarity(SetFunction):
    name = "Pair_simi"

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        k = idx.shape[1]
        if k < 2:
            return torch.zeros(idx.shape[0], device=idx.device)
        selected = ground.unit[idx]  # (G, k, d)
        pairs = pair_cosine_sum(selected.sum(dim=1), selected.square().sum(dim=(1, 2)))
        return -pairs / (k * (k - 1) / 2)

"""Pair-wise similarity (`Pair_simi`): minus the mean cosine over the selected pairs.

With s = sum of the selected unit vectors, sum_{i<j} cos(e_i, e_j) = (||s||^2 - sum_i ||u_i||^2) / 2,
so no k x k matrix is formed. (The sum of squared norms is the number of selected rows that are
not all zero; using it rather than k keeps the identity exact for an all-zero feature row.) The G
sums are one GEMM of the (G, n) mask matrix, each selected entry holding its row's inverse norm,
with the raw rows (n, d): the unit rows are never formed (on a learner's 100k-row partial step
forming them took longer than the GEMM), and at the paper's budgets the GEMM is over ten times
faster than gathering the (G, k, d) selected rows, which is also G k d floats of memory.
"""

from __future__ import annotations

import torch

from .base import GroundSet, SetFunction, mask_chunks


def pair_cosine_sum(sum_vector: torch.Tensor, sum_sq_norms: torch.Tensor) -> torch.Tensor:
    """Sum of cos over unordered pairs from the running sum; shared with the greedy's gain."""
    return (sum_vector.square().sum(dim=-1) - sum_sq_norms) / 2


class PairSimilarity(SetFunction):
    name = "Pair_simi"

    def __init__(self, memory_bytes: int = 256 * 2**20):
        self.memory_bytes = memory_bytes

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        n_masks, k = idx.shape
        if k < 2:
            return torch.zeros(n_masks, device=idx.device)
        out = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        for chunk in mask_chunks(n_masks, 4 * len(ground), self.memory_bytes):
            sums, counts = unit_sums(ground, idx[chunk])
            out[chunk] = pair_cosine_sum(sums, counts)
        return out / -(k * (k - 1) / 2)

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """The dense (G, n) weights times the (n, d) rows: every row, selected or not."""
        return 0.0 if k < 2 else 2.0 * n_masks * rows * dim

    def random_value(self, ground: GroundSet, k: int) -> float:
        """The exact mean of f over all k-subsets (k >= 2): minus the mean cosine over all
        pairs of distinct rows, from the sum of all unit rows; 0 below two rows, as `batch`."""
        n = len(ground)
        if k < 2 or n < 2:
            return 0.0
        nonzero = (ground.inverse_norms > 0).sum(dtype=torch.float64)  # the sum of ||u||^2
        pairs = pair_cosine_sum(ground.unit.sum(dim=0, dtype=torch.float64), nonzero)
        return -pairs.item() / (n * (n - 1) / 2)

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and each selected row's exact removal gain (G, k), f(S) - f(S - {i}):
        row i's cosines to the others are e_i . s - ||e_i||^2, read off one GEMM of the rows
        with the G running sums; f(S - {i}) divides what is left by (k-1)(k-2)/2 pairs."""
        n_masks, k = idx.shape
        if k < 2:
            zeros = torch.zeros(n_masks, device=idx.device)
            return zeros, zeros.unsqueeze(1)
        inverse = ground.inverse_norms
        values = torch.empty(n_masks, device=idx.device, dtype=ground.features.dtype)
        credit = torch.empty(n_masks, k, device=idx.device, dtype=ground.features.dtype)
        for chunk in mask_chunks(n_masks, 4 * (len(ground) + ground.features.shape[1]),
                                 self.memory_bytes):
            rows = idx[chunk]
            sums, counts = unit_sums(ground, rows)  # (c, d), (c,)
            pair_sum = pair_cosine_sum(sums, counts)  # (c,)
            own = ((ground.features @ sums.T).T.gather(1, rows) * inverse[rows]
                   - (inverse[rows] > 0).to(sums.dtype))  # (c, k)
            values[chunk] = pair_sum / -(k * (k - 1) / 2)
            rest = (pair_sum.unsqueeze(1) - own) / -((k - 1) * (k - 2) / 2) if k > 2 else 0.0
            credit[chunk] = values[chunk].unsqueeze(1) - rest
        return values, credit


def unit_sums(ground: GroundSet, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each mask (a row of `rows`, (c, k)): the sum of its rows' unit vectors (c, d) and the
    sum of their squared norms (c,), the count of its rows that are not all zero."""
    inverse = ground.inverse_norms
    weights = torch.zeros(rows.shape[0], len(ground), device=rows.device,
                          dtype=ground.features.dtype)
    weights.scatter_(1, rows, inverse[rows])
    return weights @ ground.features, (inverse[rows] > 0).sum(dim=1).to(weights.dtype)


class PairGains:
    """Pair_simi in incremental form for the greedy engine (`datamask.greedy`).

    With s the running sum of the selected unit rows, adding x adds e_x . s to the pair-cosine
    sum, so the gain is -(e_x . s): one (candidates x d) matrix-vector product, no kernel matrix.
    """

    def __init__(self, ground: GroundSet):
        self.unit = ground.unit
        self.running = torch.zeros(self.unit.shape[1], device=ground.device)
        self.sum_sq = torch.zeros((), device=ground.device)
        self.count = 0

    def __len__(self) -> int:
        return len(self.unit)

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        unit = self.unit if idx is None else self.unit[idx]
        return -(unit @ self.running)

    def value_with(self, gains: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Pair_simi of S + {x} for every candidate from its gain (0 while S is empty)."""
        if self.count == 0:
            return torch.zeros_like(gains)
        pairs = self.count * (self.count + 1) / 2
        return (gains - pair_cosine_sum(self.running, self.sum_sq)) / pairs

    def value(self) -> float:
        """Pair_simi of S (0 below two rows)."""
        pairs = self.count * (self.count - 1) / 2
        return -(pair_cosine_sum(self.running, self.sum_sq).item() / pairs) if pairs else 0.0

    def add(self, row: int, gain: torch.Tensor | None = None) -> None:
        self.running += self.unit[row]
        self.sum_sq += self.unit[row].square().sum()
        self.count += 1

"""`disf-greedy-fast`: the DiSF reference greedy's exact picks at O(b * d^2) per step.

Adding a row x to a set S of m rows with mean mu and scatter M changes both by rank one:
delta = x - mu, mean' = mu + delta / (m + 1), scatter' = M + m / (m + 1) delta delta^T, so the
covariance of S + {x} is A + c delta delta^T with A = M / m, c = 1 / (m + 1). Its collapse score
(sum of squared off-diagonal correlations / 1e4, w_i = 1 / (var_i + 1e-8)) expands to
    w^T (A o A) w + 2c (w o delta)^T A (w o delta) + c^2 (sum_i w_i delta_i^2)^2
    - sum_i (var_i w_i)^2
which needs two (candidates x d) @ (d x d) GEMMs per step for all candidates at once, instead of
one (m + 1)-row covariance per candidate. The numbers are those of `collapse_score` on the
from-scratch covariance up to float64 rounding, so the picks equal `disf-greedy`'s (tested).

`mode='batched'` follows disf-greedy's batches and budget rule exactly; `mode='global'` runs one
greedy over all N rows (random first pick, then k - 1 collapse-minimising picks), the
un-batched variant that large timings need.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from datamask.objectives.disf import EPS, SCALE
from datamask.options import option

from .disf_greedy import CHUNK_BYTES, BatchedDiSF, DisfOptions


class ScatterState:
    """Mean and scatter of the selected rows under exact rank-1 updates (Welford's)."""

    def __init__(self, dim: int, dtype: torch.dtype, device: torch.device):
        self.count = 0
        self.mean = torch.zeros(dim, dtype=dtype, device=device)
        self.scatter = torch.zeros(dim, dim, dtype=dtype, device=device)

    def add(self, x: torch.Tensor) -> None:
        delta = x - self.mean
        self.scatter.add_(torch.outer(delta, delta), alpha=self.count / (self.count + 1))
        self.count += 1
        self.mean.add_(delta / self.count)

    def collapse_with(self, x: torch.Tensor) -> torch.Tensor:
        """Collapse score of S + {x} for every row of x (c, d); needs at least one row in S."""
        m = self.count
        cov = self.scatter / m
        cov_sq = cov.square()
        var = torch.diagonal(cov)
        c = 1.0 / (m + 1)
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        step = max(1, CHUNK_BYTES // (x.element_size() * 6 * x.shape[1]))
        for start in range(0, x.shape[0], step):
            delta = x[start:start + step] - self.mean
            new_var = var + c * delta.square()
            w = 1.0 / (new_var + EPS)
            wd = w * delta
            total = ((w @ cov_sq) * w).sum(dim=1)
            total += 2 * c * ((wd @ cov) * wd).sum(dim=1)
            total += (c * (wd * delta).sum(dim=1)).square()
            total -= (new_var * w).square().sum(dim=1)
            out[start:start + step] = total / SCALE
        return out


def greedy_collapse(x: torch.Tensor, picks: int, first: int
                    ) -> tuple[list[int], list[float | None]]:
    """Greedy min-collapse picks in x (b, d) from `first`, and the score after each pick."""
    state = ScatterState(x.shape[1], x.dtype, x.device)
    state.add(x[first])
    taken = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
    taken[first] = True
    chosen, scores = [first], [None]  # DiSF is undefined on one row
    for _ in range(1, picks):
        score = state.collapse_with(x).masked_fill_(taken, torch.inf)
        best = int(score.argmin())
        state.add(x[best])
        taken[best] = True
        chosen.append(best)
        scores.append(score[best].item())
    return chosen, scores


@dataclass
class DisfFastOptions(DisfOptions):
    mode: str = option("batched", "per batch like disf-greedy, or one greedy over all rows",
                       choices=("batched", "global"))


class DisfGreedyFast(BatchedDiSF):
    """DiSF greedy, same picks as disf-greedy via exact rank-1 updates; batched or global mode."""

    name = "disf-greedy-fast"
    Options = DisfFastOptions

    def _plan(self, n, k):
        return [(0, n, k)] if self.options.mode == "global" else super()._plan(n, k)

    def _batch_picks(self, x, picks, first):
        return greedy_collapse(x, picks, first)

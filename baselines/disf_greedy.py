"""`disf-greedy`: the DiSF reference greedy (Fan et al., ICLR 2025; MediaBrain-SJTU/DiSF).

The rows are cut into consecutive batches of `batch_size` (reference: 1024). In each batch the
first pick is a uniformly random row (seeded); every later pick is the row whose addition gives
the lowest dimensional-collapse score (`datamask.objectives.collapse_score`), recomputed from
scratch for every candidate as the reference does: O(b * m * d^2) per step with m rows picked.
Candidates are scored in chunks as one batched GEMM rather than one at a time, which changes the
speed, not the cost model or the picks (ties go to the lowest row, as the reference's strict `<`).

Budget: k = round(ratio * N) is spread over the batches. By default the batch of rows [a, b)
takes round(k * b / N) - round(k * a / N) picks, i.e. its share of the ratio: shares differ by at
most one and add up to exactly k, and at the reference's ratio 1/64 with 1024-row batches every
full batch takes the reference's 16. Unlike the reference, which drops the rows after the last
full batch, the trailing partial batch takes its share too. With `picks_per_batch` = p every full
batch takes p and the trailing partial batch takes the rest, k - p * (full batches), which must
fit in it (so the ratio must be close to p / batch_size).

Precision: both DiSF greedies work in float64. With two rows every off-diagonal correlation is
+-1, so the second pick of a batch is decided only by the 1e-8 added to the variances: candidates
differ by about 1e-8 relative, below float32 resolution (in the reference's float32 that pick is
rounding noise). In float64 it is the exact argmin, which the fast variant reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.greedy import greedy
from datamask.objectives import collapse_score
from datamask.options import Range, option
from datamask.selectors import Selector

from .common import check, device_option, first_picks, ground_set, picks_output, seed_option

CHUNK_BYTES = 256 * 2**20  # temporaries of one chunk of candidates


def batch_plan(n: int, k: int, batch_size: int, picks_per_batch: int | None) -> list[tuple]:
    """(start, stop, picks) of each consecutive batch; the picks add up to exactly k."""
    check(batch_size >= 2, f"--batch_size must be at least 2, got {batch_size}")
    starts = np.arange(0, n, batch_size)
    stops = np.minimum(starts + batch_size, n)
    if picks_per_batch is None:
        cumulative = (2 * k * stops + n) // (2 * n)  # round half up of k * stop / n, exactly
        picks = np.diff(cumulative, prepend=0)
    else:
        full = int((stops - starts == batch_size).sum())
        rest = k - picks_per_batch * full
        tail = n - full * batch_size
        check(1 <= picks_per_batch <= batch_size and 0 <= rest <= tail,
              f"--picks_per_batch {picks_per_batch} with --batch_size {batch_size} cannot select "
              f"exactly {k} of {n} rows ({full} full batches, {tail} rows left over); use a "
              f"--select_ratio near {picks_per_batch / batch_size:.6g} or omit --picks_per_batch")
        picks = np.full(len(starts), picks_per_batch)
        if tail:
            picks[-1] = rest
    return [(int(a), int(b), int(p)) for a, b, p in zip(starts, stops, picks)]


@dataclass
class DisfOptions:
    batch_size: int = option(1024, "rows per consecutive batch (reference: 1024)", within=Range(2))
    picks_per_batch: int | None = option(None, "picks per full batch (reference: 16); the last "
                                               "partial batch takes the rest of the budget",
                                         within=Range(1),
                                         default_text="the batch's share of the ratio")
    seed: int = seed_option()
    device: str = device_option()


class BatchedDiSF(Selector):
    """Runs a per-batch DiSF greedy over the batch plan; subclasses say how a batch is picked."""

    Options = DisfOptions

    def _plan(self, n: int, k: int) -> list[tuple]:
        return batch_plan(n, k, self.options.batch_size, self.options.picks_per_batch)

    def _gains(self, x: torch.Tensor):
        """The incremental term of the collapse score on the batch `x` (b, d) float64."""
        raise NotImplementedError

    def _batch_picks(self, x: torch.Tensor, picks: int, first: int
                     ) -> tuple[list[int], list[float | None]]:
        """Rows picked in the batch `x` (b, d) float64, in order, and the score after each
        (DiSF is undefined on one row): min collapse is max gain, ties to the lowest row."""
        return greedy(self._gains(x), picks, first=first,
                      record=lambda s: -s.value.item() if s.step else None)

    def _select(self, data: Dataset, k: int):
        features = ground_set(data, self.options.device).features.double()
        plan = self._plan(len(data), k)
        firsts = first_picks([stop - start for start, stop, _ in plan], self.options.seed)
        picks, history = [], []
        for batch, ((start, stop, n_picks), first) in enumerate(zip(plan, firsts)):
            if n_picks == 0:
                continue
            rows, scores = self._batch_picks(features[start:stop], n_picks, int(first))
            for pick, (row, score) in enumerate(zip(rows, scores)):
                history.append({"batch": batch, "pick": pick, "row": start + row,
                                "collapse": score})
            picks.extend(start + row for row in rows)
        return (*picks_output(len(data), picks), history)


class DisfGreedy(BatchedDiSF):
    """DiSF reference greedy: 1024-row batches, random start, min collapse, from-scratch scores."""

    name = "disf-greedy"

    def _gains(self, x):
        return ScratchCollapseGains(x)


class ScratchCollapseGains:
    """Minus the collapse score of S + {x} for every candidate x, recomputed from scratch as the
    reference does: each candidate's (m + 1)-row covariance, in chunks of one batched GEMM."""

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.chosen = torch.empty(0, dtype=torch.long, device=x.device)

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        candidates = torch.arange(len(self.x), device=self.x.device) if idx is None else idx
        m, dim = len(self.chosen), self.x.shape[1]
        if m == 0:  # DiSF is undefined on one row
            return torch.zeros(len(candidates), dtype=self.x.dtype, device=self.x.device)
        score = torch.empty(len(candidates), dtype=self.x.dtype, device=self.x.device)
        step = max(1, CHUNK_BYTES // (self.x.element_size() * ((m + 1) * dim + 4 * dim * dim)))
        for start in range(0, len(candidates), step):
            part = candidates[start:start + step]
            sets = torch.cat([self.chosen.expand(len(part), m), part.unsqueeze(1)], dim=1)
            rows = self.x[sets]  # (c, m + 1, d): every candidate's set, from scratch
            rows = rows - rows.mean(dim=1, keepdim=True)
            covariance = torch.bmm(rows.transpose(1, 2), rows).div_(m)
            score[start:start + step] = collapse_score(covariance)
        return -score

    def add(self, row: int, gain: torch.Tensor | None = None) -> None:
        self.chosen = torch.cat([self.chosen, self.chosen.new_tensor([row])])

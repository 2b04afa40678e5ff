"""The quality term: mean quality score of the selected rows."""

from __future__ import annotations

import torch

from .base import GroundSet, SetFunction


class Quality(SetFunction):
    name = "quality"

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        return ground.quality[idx].mean(dim=1)

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        return n_masks * k  # the mean of each mask's k qualities

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and each selected row's removal gain (G, k): the mean quality minus the
        mean without the row, (q_i - mean) / (k - 1); for a single row, its quality."""
        quality = ground.quality[idx]
        values = quality.mean(dim=1)
        if idx.shape[1] == 1:
            return values, quality
        return values, (quality - values.unsqueeze(1)) / (idx.shape[1] - 1)


class QualityGains:
    """Mean quality in incremental form for the greedy engine (`datamask.greedy`): exact and
    cheap, so it is recomputed on every look rather than kept as a bound. The picks' sum is kept
    as it grows, in float64 (far finer than the float32 value a look returns), so a look costs
    its candidates, not the picks so far: summing the picks afresh on every look made a k-pick
    greedy O(k^2), minutes of --init greedy at a million rows."""

    def __init__(self, ground: GroundSet):
        self.quality = ground.quality.double()
        self.count = 0
        self.total = torch.zeros((), dtype=torch.float64, device=self.quality.device)

    def value_with(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Mean quality of S + {x} for every candidate x (float32, as `Quality.batch`)."""
        quality = self.quality if idx is None else self.quality[idx]
        return ((self.total + quality) / (self.count + 1)).float()

    def add(self, row: int, gain: torch.Tensor | None = None) -> None:
        self.total += self.quality[row]
        self.count += 1

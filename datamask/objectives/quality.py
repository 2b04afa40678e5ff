"""The quality term: mean quality score of the selected rows."""

from __future__ import annotations

import torch

from .base import GroundSet, SetFunction


class Quality(SetFunction):
    name = "quality"

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        return ground.quality[idx].mean(dim=1)

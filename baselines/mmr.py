"""`mmr`: maximal marginal relevance (Carbonell & Goldstein 1998), quality as the relevance.

Each step picks the unpicked row x maximising

    trade_off * z(q_x) - (1 - trade_off) * max over picked s of cos(x, s)

with z the standardisation of quality over all rows (a constant column standardises to 0). The
first pick is the best row by quality, whatever trade_off (MMR starts from the most relevant
item; the max over the empty set counts as 0 in its logged value). The running
max-similarity vector is updated with one (N x d) matrix-vector product per pick: no kernel
matrix, no loop over rows; the loop is `datamask.greedy`'s. trade_off 1 is exactly `quality-topk`; trade_off 0 is a farthest-point
(k-center style) walk from the best row. Ties go to the lower row. Score: the pick order (the
first pick scores k, the last 1, unpicked rows 0), as for the greedy baselines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.greedy import greedy
from datamask.options import Range, option
from datamask.selectors import Selector

from .common import device_option, ground_set, picks_output


@dataclass
class MMROptions:
    trade_off: float = option(0.5, "weight of quality against the max cosine to picked rows",
                              within=Range(0.0, 1.0))
    device: str = device_option()


class RelevanceGains:
    """MMR in incremental form for the greedy engine: relevance minus (1 - trade_off) times the
    max cosine to the picked rows (float64, so that trade_off 1 keeps every strict quality order)."""

    def __init__(self, unit: torch.Tensor, relevance: torch.Tensor, trade_off: float):
        self.unit = unit
        self.relevance = relevance
        self.trade_off = trade_off
        self.closest = torch.zeros(len(unit), dtype=torch.float64, device=unit.device)
        self.count = 0

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        relevance, closest = ((self.relevance, self.closest) if idx is None
                              else (self.relevance[idx], self.closest[idx]))
        return relevance - (1 - self.trade_off) * closest

    def add(self, row: int, gain: torch.Tensor | None = None) -> None:
        similarity = (self.unit @ self.unit[row]).double()
        self.closest = similarity if self.count == 0 else torch.maximum(self.closest, similarity)
        self.count += 1


class MMR(Selector):
    """Maximal marginal relevance: greedy z(quality) minus max cosine to the picked rows."""

    name = "mmr"
    Options = MMROptions

    def _select(self, data: Dataset, k: int):
        unit = ground_set(data, self.options.device).unit
        quality = np.asarray(data.quality, dtype=np.float64)
        std = quality.std()
        z = (quality - quality.mean()) / std if std > 0 else np.zeros_like(quality)
        z = torch.as_tensor(z, device=unit.device)
        term = RelevanceGains(unit, self.options.trade_off * z, self.options.trade_off)
        # the first pick by quality alone, ties to the lower row (the first maximum)
        picks, history = greedy(
            term, k, first=int(z.argmax()),
            record=lambda s: {"step": s.step, "row": s.row, "mmr": s.value.item()},
            single_thread=True)  # one matrix-vector product per step
        return (*picks_output(len(data), picks), history)

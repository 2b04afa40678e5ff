"""`mmr`: maximal marginal relevance (Carbonell & Goldstein 1998), quality as the relevance.

Each step picks the unpicked row x maximising

    trade_off * z(q_x) - (1 - trade_off) * max over picked s of cos(x, s)

with z the standardisation of quality over all rows (a constant column standardises to 0). The
first pick is the best row by quality, whatever trade_off (MMR starts from the most relevant
item; the max over the empty set counts as 0 in its logged value). The running
max-similarity vector is updated with one (N x d) matrix-vector product per pick: no kernel
matrix, no loop over rows. trade_off 1 is exactly `quality-topk`; trade_off 0 is a farthest-point
(k-center style) walk from the best row. Ties go to the lower row. Score: the pick order (the
first pick scores k, the last 1, unpicked rows 0), as for the greedy baselines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.options import option
from datamask.selectors import Selector

from .common import device_option, ground_set, one_thread, picks_output


@dataclass
class MMROptions:
    trade_off: float = option(0.5, "weight of quality against the max cosine to picked rows",
                              low=0.0, high=1.0)
    device: str = device_option()


class MMR(Selector):
    """Maximal marginal relevance: greedy z(quality) minus max cosine to the picked rows."""

    name = "mmr"
    Options = MMROptions

    def _select(self, data: Dataset, k: int):
        trade_off = self.options.trade_off
        unit = ground_set(data, self.options.device).unit
        quality = np.asarray(data.quality, dtype=np.float64)
        std = quality.std()
        z = (quality - quality.mean()) / std if std > 0 else np.zeros_like(quality)
        # float64 for the combination, so that trade_off 1 keeps every strict quality order
        z = torch.as_tensor(z, device=unit.device)
        relevance = trade_off * z
        closest = torch.zeros(len(unit), dtype=torch.float64, device=unit.device)
        taken = torch.zeros(len(unit), dtype=torch.bool, device=unit.device)
        picks, history = [], []
        with one_thread(unit.device):  # one matrix-vector product per step
            for step in range(k):
                values = (relevance - (1 - trade_off) * closest).masked_fill_(taken, -torch.inf)
                # the first maximum: ties to the lower row; the first pick by quality alone
                best = int((z if step == 0 else values).argmax())
                picks.append(best)
                taken[best] = True
                similarity = (unit @ unit[best]).double()
                closest = similarity if step == 0 else torch.maximum(closest, similarity)
                history.append({"step": step, "row": best, "mmr": values[best].item()})
        return (*picks_output(len(data), picks), history)

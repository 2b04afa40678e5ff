"""`pair-greedy`: greedy on the pair-wise diversity (minus the mean cosine over selected pairs).

With s the running sum of the selected unit rows, adding x adds e_x . s to the sum of pair
cosines (`datamask.objectives.pair_cosine_sum`), and every candidate of a step shares the pair
count, so the greedy pick is the row with the smallest e_x . s: one (N x d) matrix-vector product
per step, no kernel matrix. The objective ties on every single row, so the first pick is a seeded
random row (as DiSF's reference greedy starts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from datamask.data import Dataset
from datamask.objectives import pair_cosine_sum
from datamask.selectors import Selector

from .common import device_option, first_picks, ground_set, one_thread, picks_output, seed_option


@dataclass
class PairGreedyOptions:
    seed: int = seed_option()
    device: str = device_option()


class PairGreedy(Selector):
    """Greedy pair-wise diversity: each step adds the row least similar to the running sum."""

    name = "pair-greedy"
    Options = PairGreedyOptions

    def _select(self, data: Dataset, k: int):
        unit = ground_set(data, self.options.device).unit
        taken = torch.zeros(len(unit), dtype=torch.bool, device=unit.device)
        running = torch.zeros(unit.shape[1], device=unit.device)
        sum_sq = torch.zeros((), device=unit.device)
        best = int(first_picks([len(unit)], self.options.seed)[0])
        picks, history = [], []
        with one_thread(unit.device):  # one matrix-vector product per step
            for step in range(k):
                if step:
                    best = int((unit @ running).masked_fill_(taken, torch.inf).argmin())
                picks.append(best)
                taken[best] = True
                running += unit[best]
                sum_sq += unit[best].square().sum()
                pairs = step * (step + 1) / 2
                mean_cos = pair_cosine_sum(running, sum_sq).item() / pairs if pairs else 0.0
                history.append({"step": step, "row": best, "Pair_simi": -mean_cos})
        return (*picks_output(len(data), picks), history)

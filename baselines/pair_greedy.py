"""`pair-greedy`: greedy on the pair-wise diversity (minus the mean cosine over selected pairs).

With s the running sum of the selected unit rows, adding x adds e_x . s to the sum of pair
cosines (`datamask.objectives.PairGains`), and every candidate of a step shares the pair count,
so the greedy pick is the row with the smallest e_x . s: one (N x d) matrix-vector product per
step, no kernel matrix. The objective ties on every single row, so the first pick is a seeded
random row (as DiSF's reference greedy starts). The loop is `datamask.greedy`'s: naive (every
row scored per step) or stochastic (a seeded random sample of (N / k) ln(1 / epsilon) of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from datamask.data import Dataset
from datamask.greedy import greedy
from datamask.objectives import PairGains, PairSimilarity
from datamask.options import option
from datamask.selectors import Selector

from .common import (device_option, epsilon_option, first_picks, ground_set,
                     optimiser_of, picks_output, rounds_option, seed_option)


@dataclass
class PairGreedyOptions:
    # lazy bounds do not hold: a row's gain -(e_x . s) may grow as S grows
    optimizer: str = option("naive", "naive (every row per step), stochastic or batched",
                            choices=("naive", "stochastic", "batched"))
    epsilon: float = epsilon_option()
    rounds: int = rounds_option()
    seed: int = seed_option()
    device: str = device_option()


class PairGreedy(Selector):
    """Greedy pair-wise diversity: each step adds the row least similar to the running sum."""

    name = "pair-greedy"
    Options = PairGreedyOptions

    def _select(self, data: Dataset, k: int):
        ground = ground_set(data, self.options.device)
        term = PairGains(ground)
        picks, history = greedy(
            term, k, first=int(first_picks([len(data)], self.options.seed)[0]),
            optimizer=optimiser_of(self.options, ground.device),
            record=lambda s: {"step": s.step, "row": s.row, "Pair_simi": term.value(),
                              "elapsed_s": s.elapsed_s},
            single_thread=True)  # one matrix-vector product per step
        return (*picks_output(len(data), picks), history, (PairSimilarity(), ground))

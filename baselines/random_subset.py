"""`random`: k rows uniformly at random, seeded."""

from __future__ import annotations

import numpy as np

from datamask.data import Dataset
from datamask.selectors import Selector, register


@register
class RandomSubset(Selector):
    name = "random"

    def __init__(self, seed: int = 0):
        super().__init__(seed=seed)

    def _select(self, data: Dataset, k: int):
        score = np.random.default_rng(self.params["seed"]).random(len(data))
        selected = np.zeros(len(data), dtype=bool)
        selected[np.argsort(-score, kind="stable")[:k]] = True
        return selected, score, []

"""`random`: k rows uniformly at random, seeded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datamask.data import Dataset
from datamask.options import option
from datamask.selectors import Selector


@dataclass
class RandomOptions:
    seed: int = option(0, "seed of the random draw")


class RandomSubset(Selector):
    name = "random"
    Options = RandomOptions

    def _select(self, data: Dataset, k: int):
        score = np.random.default_rng(self.options.seed).random(len(data))
        selected = np.zeros(len(data), dtype=bool)
        selected[np.argsort(-score, kind="stable")[:k]] = True
        return selected, score, []

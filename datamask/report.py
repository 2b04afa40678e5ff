"""Scores any selection on the whole input with the same set functions the optimisers use.

Every selector (the learner and each baseline) is judged here, on all N rows with masks of the
full budget, so that numbers in one table are comparable whatever the selector optimised inside.
"""

from __future__ import annotations

import numpy as np
import torch

from .data import Dataset, budget
from .objectives import DIVERSITY, GroundSet, Joint, Quality, TermScale, certificate, diversity


class Report:
    """Mean quality, every diversity metric, and the joint objective at `lamb` for each metric."""

    def __init__(self, data: Dataset, select_ratio: float, lamb: float, device="cpu",
                 seed: int = 0, metrics=tuple(DIVERSITY)):
        self.ground = GroundSet.from_arrays(data.features, data.quality, device)
        self.k = budget(select_ratio, len(data))
        self.lamb = lamb
        self.metrics = {name: diversity(name) for name in metrics}
        self.seed = seed
        self._joints: dict[str, Joint] = {}

    def joint(self, name: str) -> Joint:
        """The joint objective for one metric, its scale (`TermScale.scored`) fitted once."""
        if name not in self._joints:
            scale = TermScale.scored(self.ground, self.k, self.metrics[name], self.seed)
            self._joints[name] = Joint(self.metrics[name], self.lamb, scale)
        return self._joints[name]

    def rows(self, selected: np.ndarray) -> torch.Tensor:
        """The selected rows of a (N,) bool selection, which must hold the budget."""
        idx = torch.as_tensor(np.flatnonzero(selected), device=self.ground.device)
        if len(idx) != self.k:
            raise ValueError(f"a selection must hold {self.k} rows, this one holds {len(idx)}")
        return idx

    def certificates(self, selected: np.ndarray) -> dict:
        """How near the optimum of each joint the selection is (`datamask.objectives.certificate`):
        `joint_<metric>_bound`, an upper bound on the best value of any selection of the budget;
        `joint_<metric>_random`, a random selection's mean, the floor of
        `joint_<metric>_share_above_random`; null where the metric has no bound, and
        `joint_<metric>_no_bound_reason` says why. Apart from `__call__`: for Facility it costs a
        pass over the N x N similarities, which a curve's every point need not pay."""
        idx, values = self.rows(selected), {}
        for name in self.metrics:
            found = certificate(self.joint(name), self.ground, idx)
            values.update({f"joint_{name}_bound": found.bound,
                           f"joint_{name}_random": found.random,
                           f"joint_{name}_share_above_random": found.share_above_random(),
                           f"joint_{name}_no_bound_reason": found.no_bound_reason})
        return values

    def __call__(self, selected: np.ndarray) -> dict:
        idx = self.rows(selected)
        quality = Quality()(self.ground, idx)
        values = {"quality": quality.item()}
        for name, metric in self.metrics.items():
            div = metric(self.ground, idx)
            values[name] = div.item()
            values[f"joint_{name}"] = self.joint(name).combine(quality, div).item()
        return values

"""Scores any selection on the whole input with the same set functions the optimisers use.

Every selector (the learner and each baseline) is judged here, on all N rows with masks of the
full budget, so that numbers in one table are comparable whatever the selector optimised inside.

With an arithmetic budget (`budget_flops`, what `--report` gives), a metric whose report would
cost more is estimated instead, and the report says how: Facility's coverage on a seeded sample
of the rows (an unbiased estimate of it, whose kernel then fits memory), another metric's term
scale on fewer of its random masks (its first ones: the same stream). Without one, all is exact.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from .data import Dataset, budget
from .objectives import DIVERSITY, GroundSet, Joint, Quality, TermScale, certificate, diversity
from .objectives.certificates import certificate_flops
from .objectives.facility import FacilityLocation
from .objectives.joint import MASKS_PER_GROUND, SCALE_GROUNDS

# --report's arithmetic per metric (its term scale's random masks, the selection's value and
# its certificate) past which that metric is estimated: about 10 s on the 2-core box
REPORT_FLOPS = 1e12
SMALLEST_SAMPLE = 1_000  # Facility's sample of covered rows is halved down to no fewer


class Report:
    """Mean quality, every diversity metric, and the joint objective at `lamb` for each metric;
    with `budget_flops`, a metric past it estimated as the module says (`estimates`: how, by
    metric); with `progress`, a line on stderr as each part of `scored` ends."""

    def __init__(self, data: Dataset, select_ratio: float, lamb: float, device="cpu",
                 seed: int = 0, metrics=tuple(DIVERSITY), budget_flops: float | None = None,
                 progress: bool = False):
        self.ground = GroundSet.from_arrays(data.features, data.quality, device)
        self.k = budget(select_ratio, len(data))
        self.lamb = lamb
        self.metrics = {name: diversity(name) for name in metrics}
        self.seed = seed
        self.progress = progress
        self.grounds = dict.fromkeys(metrics, SCALE_GROUNDS)  # each term scale's draws of masks
        self.estimates: dict[str, str] = {}
        self._joints: dict[str, Joint] = {}
        if budget_flops is not None:
            for name in metrics:
                self._afford(name, budget_flops)

    def cost(self, name: str, metric=None) -> dict[str, float]:
        """The arithmetic of each part of metric `name`'s report as it will be computed (or as
        `metric` in its place would compute it)."""
        metric = self.metrics[name] if metric is None else metric
        n, d = len(self.ground), self.ground.features.shape[1]
        masks = self.grounds[name] * MASKS_PER_GROUND
        return {"term scale": metric.batch_flops(n, d, masks, self.k),
                "value": metric.batch_flops(n, d, 1, self.k),
                "bound": certificate_flops(metric, n, d, self.k)}

    def _afford(self, name: str, flops: float) -> None:
        """Estimate metric `name` where its exact report costs more than `flops`: Facility on a
        seeded sample of the covered rows, halved until it fits, another metric's term scale on
        as many of its draws of masks as fit (at least one)."""
        n, metric = len(self.ground), self.metrics[name]
        if sum(self.cost(name).values()) <= flops:
            return
        if isinstance(metric, FacilityLocation):
            size = n
            while size > SMALLEST_SAMPLE and sum(self.cost(
                    name, metric.covering(torch.arange(size))).values()) > flops:
                size = max(SMALLEST_SAMPLE, size // 2)
            if size < n:
                draw = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
                cover = draw[:size].sort().values.to(self.ground.device)
                self.metrics[name] = metric.covering(cover)
                self.estimates[name] = (f"on a sample of {size:,} rows: the coverage of {size:,} "
                                        f"of the {n:,} rows, drawn with seed {self.seed}")
            return
        exact = self.cost(name)
        per_draw = exact["term scale"] / SCALE_GROUNDS
        spare = flops - exact["value"] - exact["bound"]
        self.grounds[name] = max(1, int(spare // per_draw))
        self.estimates[name] = (f"term scale on a sample of "
                                f"{self.grounds[name] * MASKS_PER_GROUND} of the "
                                f"{SCALE_GROUNDS * MASKS_PER_GROUND} random masks")

    def joint(self, name: str) -> Joint:
        """The joint objective for one metric, its scale (`TermScale.scored`) fitted once."""
        if name not in self._joints:
            scale = TermScale.scored(self.ground, self.k, self.metrics[name], self.seed,
                                     self.grounds[name])
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
            values.update(self._certificate(name, idx))
        return values

    def _certificate(self, name: str, idx: torch.Tensor) -> dict:
        found = certificate(self.joint(name), self.ground, idx)
        return {f"joint_{name}_bound": found.bound, f"joint_{name}_random": found.random,
                f"joint_{name}_share_above_random": found.share_above_random(),
                f"joint_{name}_no_bound_reason": found.no_bound_reason}

    def __call__(self, selected: np.ndarray) -> dict:
        idx = self.rows(selected)
        quality = Quality()(self.ground, idx)
        values = {"quality": quality.item()}
        for name in self.metrics:
            values.update(self._value(name, idx, quality))
        return values

    def _value(self, name: str, idx: torch.Tensor, quality: torch.Tensor) -> dict:
        div = self.metrics[name](self.ground, idx)
        return {name: div.item(), f"joint_{name}": self.joint(name).combine(quality, div).item()}

    def scored(self, selected: np.ndarray) -> dict:
        """`__call__` and `certificates` together, part by part (each metric's term scale,
        value and bound), with a progress line as each ends, the time left estimated from the
        parts' arithmetic; `report_estimates` says how each estimated metric was."""
        idx = self.rows(selected)
        quality = Quality()(self.ground, idx)
        values, bounds = {"quality": quality.item()}, {}
        parts = [(name, part, flops) for name in self.metrics
                 for part, flops in self.cost(name).items()]
        total, done, started = sum(flops for *_, flops in parts), 0.0, time.time()
        for i, (name, part, flops) in enumerate(parts, 1):
            if part == "term scale":
                self.joint(name)
            elif part == "value":
                values.update(self._value(name, idx, quality))
            else:
                bounds.update(self._certificate(name, idx))
            done += flops
            if self.progress:
                spent = time.time() - started
                left = (f"; about {spent / done * (total - done):.0f} s left"
                        if done and i < len(parts) else "")
                print(f"datamask: report {i}/{len(parts)}: {name} {part} ({spent:.0f} s in"
                      f"{left})", file=sys.stderr, flush=True)
        for name, how in self.estimates.items():
            print(f"datamask: report: {name} {how}", file=sys.stderr, flush=True)
        return {**values, **bounds,
                **({"report_estimates": dict(self.estimates)} if self.estimates else {})}

"""The joint objective lamb * quality + (1 - lamb) * diversity, on a common scale.

Mean quality and a diversity metric live on unrelated scales (a DiSF score grows with d^2, a mean
cosine is below 1), so mixing them raw would make `lamb` mean something different for every metric
and data set. Each term is therefore standardised by its mean and standard deviation over masks
drawn uniformly at random from the same ground-set shape, fitted once (`TermScale.fit`). On that
scale 0 is what a random selection scores and 1 is one standard deviation of random selections,
so `lamb` weighs "how much better than random" in quality against the same in diversity. The
learner only sees advantages standardised within each group of G masks, so the means cancel for it
and only the ratio of the two standard deviations matters; the means make reported values
readable (random ~ 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import GroundSet, SetFunction
from .quality import Quality, QualityGains


def random_masks(n: int, k: int, n_masks: int, generator: torch.Generator,
                 device: torch.device) -> torch.Tensor:
    """`n_masks` uniformly random k-subsets of range(n), as a (n_masks, k) index tensor on
    `device`, drawn from `generator`'s stream on its own device (a CPU generator draws the same
    masks whatever `device` is)."""
    keys = torch.rand(n_masks, n, generator=generator, device=generator.device)
    return keys.topk(k, dim=1).indices.to(device)


SCALE_GROUNDS = 8  # a term scale's draws of random masks (of rows, with `subset_size`)
MASKS_PER_GROUND = 32


@dataclass(frozen=True)
class TermScale:
    """Mean and standard deviation of each term under uniformly random masks."""

    quality_mean: float
    quality_std: float
    diversity_mean: float
    diversity_std: float

    @classmethod
    def fit(cls, ground: GroundSet, k: int, diversity: SetFunction, generator: torch.Generator,
            subset_size: int | None = None, n_grounds: int = SCALE_GROUNDS,
            masks_per_ground: int = MASKS_PER_GROUND) -> "TermScale":
        """Fit on random k-masks; with `subset_size`, inside random subsets of that many rows
        (the learner's `partial` steps score masks on such subsets, so it is scaled on them)."""
        quality, qual, div = Quality(), [], []
        for _ in range(n_grounds):
            sub = ground
            if subset_size is not None:
                rows = torch.randperm(len(ground), generator=generator,
                                      device=generator.device).to(ground.device)
                sub = ground.subset(rows[:subset_size])
            idx = random_masks(len(sub), k, masks_per_ground, generator, ground.device)
            qual.append(quality.batch(sub, idx))
            div.append(diversity.batch(sub, idx))
        q, d = torch.cat(qual).double(), torch.cat(div).double()
        return cls(q.mean().item(), _positive(q.std().item()), d.mean().item(),
                   _positive(d.std().item()))

    @classmethod
    def scored(cls, ground: GroundSet, k: int, diversity: SetFunction, seed: int,
               n_grounds: int = SCALE_GROUNDS) -> "TermScale":
        """The scale full-budget selections are scored on (the report's, joint-greedy's):
        k-masks over all rows, drawn on the CPU whatever the device, since CPU and CUDA
        generators draw different streams from one seed and a score must not change with the
        device. Fewer `n_grounds`: an estimate of it from the report's own first masks."""
        return cls.fit(ground, k, diversity, torch.Generator().manual_seed(seed),
                       n_grounds=n_grounds)


def _positive(std: float) -> float:
    """A constant term (all qualities equal, say) has std 0; scale it by 1 instead of dividing by 0."""
    return std if std > 0 else 1.0


class Joint(SetFunction):
    """lamb * standardised quality + (1 - lamb) * standardised diversity."""

    def __init__(self, diversity: SetFunction, lamb: float, scale: TermScale):
        if not 0.0 <= lamb <= 1.0:
            raise ValueError(f"--lamb must lie in [0, 1], got {lamb}")
        self.diversity = diversity
        self.lamb = lamb
        self.scale = scale
        self.quality = Quality()
        self.name = f"joint({diversity.name}, lamb={lamb:g})"

    def terms(self, ground: GroundSet, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both raw terms (quality, diversity) of a batch of masks; a term weighted 0 is skipped."""
        zeros = torch.zeros(idx.shape[0], device=idx.device)
        qual = self.quality.batch(ground, idx) if self.lamb > 0 else zeros
        div = self.diversity.batch(ground, idx) if self.lamb < 1 else zeros
        return qual, div

    def batch_flops(self, rows: int, dim: int, n_masks: int, k: int) -> float:
        """The terms' arithmetic, each where `terms` computes it (a term weighted 0 is skipped)."""
        return ((self.quality.batch_flops(rows, dim, n_masks, k) if self.lamb > 0 else 0.0)
                + (self.diversity.batch_flops(rows, dim, n_masks, k) if self.lamb < 1 else 0.0))

    def weights(self) -> tuple[float, float]:
        """The factors of the raw quality and diversity terms in `combine` (its means only
        shift it): what a selection's certificate weighs the terms' gains by."""
        return self.lamb / self.scale.quality_std, (1 - self.lamb) / self.scale.diversity_std

    def combine(self, qual: torch.Tensor, div: torch.Tensor) -> torch.Tensor:
        s = self.scale
        return (self.lamb * (qual - s.quality_mean) / s.quality_std
                + (1 - self.lamb) * (div - s.diversity_mean) / s.diversity_std)

    def batch(self, ground: GroundSet, idx: torch.Tensor) -> torch.Tensor:
        return self.combine(*self.terms(ground, idx))

    def batch_with_credit(self, ground: GroundSet, idx: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values (G,) and each selected row's marginal contribution (G, k) on the joint's
        scale: the terms' contributions weighted and divided by their spreads (the means
        cancel in a difference); a term weighted 0 is skipped, as in `terms`."""
        skipped = (torch.zeros(idx.shape[0], device=idx.device),
                   torch.zeros(idx.shape, device=idx.device))
        qual, qual_credit = (self.quality.batch_with_credit(ground, idx) if self.lamb > 0
                             else skipped)
        div, div_credit = (self.diversity.batch_with_credit(ground, idx) if self.lamb < 1
                           else skipped)
        s = self.scale
        return self.combine(qual, div), (self.lamb / s.quality_std * qual_credit
                                         + (1 - self.lamb) / s.diversity_std * div_credit)

    def with_diversity(self, diversity: SetFunction) -> "Joint":
        """The same objective, its diversity term replaced by an estimate of the same function
        (Facility's coverage on a sample of rows, DiSF's score from probes), on the same scale."""
        return Joint(diversity, self.lamb, self.scale)


class JointGains:
    """The joint objective in incremental form for the greedy engine (`datamask.greedy`).

    Its gains are the diversity term's (those a lazy greedy keeps as bounds); `value_with` adds
    the exact quality term and combines both on the joint's scale, so it grows with the diversity
    gain (lamb < 1) and lazy bounds stay valid. With no diversity term (lamb = 1) it is quality.
    """

    def __init__(self, joint: Joint, ground: GroundSet, diversity=None):
        self.joint = joint
        self.n = len(ground)
        self.quality = QualityGains(ground)
        self.diversity = diversity

    def __len__(self) -> int:
        return self.n

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        if self.diversity is None:
            return torch.zeros(self.n if idx is None else len(idx), device=self.quality.quality.device)
        return self.diversity.gains(idx)

    def value_with(self, gains: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """The joint of S + {x} for each candidate x. Weighed 0 (lamb 0), quality's term is 0
        whatever its value and diversity's weight 1, so `combine` reduces to the diversity's
        standardisation: the same values, bit for bit, without two passes over the candidates'
        quality and two products at every look of the greedy."""
        div = gains if self.diversity is None else self.diversity.value_with(gains, idx)
        if self.joint.lamb == 0:
            scale = self.joint.scale
            return (div - scale.diversity_mean).div_(scale.diversity_std)
        return self.joint.combine(self.quality.value_with(idx), div)

    def add(self, row: int, gain: torch.Tensor) -> None:
        self.quality.add(row)
        if self.diversity is not None:
            self.diversity.add(row, gain)

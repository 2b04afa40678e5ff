"""`joint-greedy`: greedy on the learner's own objective, the fair yardstick for DATAMASK.

It maximises lamb * quality + (1 - lamb) * diversity (`datamask.objectives.Joint`) with the term
scale fitted on the whole ground set at budget k, exactly as `datamask.report.Report` fits it
(the Report's own Joint is used), so its values are the numbers the reports print. Each step
scores S + {x} for every row x at once and combines the two raw terms with `Joint.combine`; the
raw terms come from exact incremental forms that equal the objective module's (tested against
`Joint.batch`):
- quality: (sum of q over S + q_x) / (m + 1);
- Pair_simi: -(pair-cosine sum of S + e_x . s) / C(m + 1, 2), s the running sum of unit rows;
- DiSF: the rank-1 collapse score of disf-greedy-fast (float64); on one row DiSF is undefined, so
  the first pick is by quality alone;
- Facility: (coverage of S + gain of x) / N through facility-greedy's naive or lazy engine (the
  joint value grows with the gain, so lazy bounds stay valid); the N x N kernel is precomputed
  when it fits `memory_gb`, else its rows are computed on demand.
Ties go to the lowest row, so lamb = 1 picks exactly the quality top-k.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from datamask.data import Dataset
from datamask.learner import LearnerConfig
from datamask.objectives import GroundSet, clipped_cosine, pair_cosine_sum
from datamask.options import option
from datamask.report import Report
from datamask.selectors import Selector
from datamask.shared import resolve_device

from .common import check, device_option, picks_output
from .disf_greedy_fast import ScatterState
from .facility_greedy import facility_greedy, kernel_rows, memory_option, optimizer_option


class PairTerm:
    """Pair_simi of S + {x} for every row x, from the running sum of the selected unit rows."""

    def __init__(self, ground: GroundSet):
        self.unit = ground.unit
        self.running = torch.zeros(self.unit.shape[1], device=ground.device)
        self.sum_sq = torch.zeros((), device=ground.device)
        self.count = 0

    def values(self) -> torch.Tensor:
        if self.count == 0:
            return torch.zeros(len(self.unit), device=self.unit.device)
        pairs = self.count * (self.count + 1) / 2
        return -(pair_cosine_sum(self.running, self.sum_sq) + self.unit @ self.running) / pairs

    def add(self, row: int) -> None:
        self.running += self.unit[row]
        self.sum_sq += self.unit[row].square().sum()
        self.count += 1


class DisfTerm:
    """DiSF of S + {x} for every row x, by rank-1 updates (0 for every row while S is empty)."""

    def __init__(self, ground: GroundSet):
        self.features = ground.features.double()
        self.state = ScatterState(self.features.shape[1], torch.float64, ground.device)

    def values(self) -> torch.Tensor:
        if self.state.count == 0:
            return torch.zeros(len(self.features), device=self.features.device)
        return -self.state.collapse_with(self.features).float()

    def add(self, row: int) -> None:
        self.state.add(self.features[row])


TERMS = {"Pair_simi": PairTerm, "DiSF": DisfTerm}


_LEARNER = {f.name: f for f in dataclasses.fields(LearnerConfig)}


@dataclass
class JointGreedyOptions:
    # the learner's own --algorithm and --lamb, so the two optimise the same objective
    algorithm: str = dataclasses.field(default="Pair_simi", metadata=_LEARNER["algorithm"].metadata)
    lamb: float = dataclasses.field(default=0.5, metadata=_LEARNER["lamb"].metadata)
    optimizer: str = optimizer_option()
    memory_gb: float = memory_option("kernel rows on demand (Facility)")
    seed: int = option(0, "seed of the random masks that scale quality against diversity")
    device: str = device_option()


class JointGreedy(Selector):
    """Greedy on the learner's objective, lamb * quality + (1 - lamb) * --algorithm."""

    name = "joint-greedy"
    Options = JointGreedyOptions

    def _select(self, data: Dataset, k: int):
        p = self.options
        check(p.algorithm != "DiSF" or k >= 2, "--algorithm DiSF needs at least 2 selected rows")
        report = Report(data, k / len(data), p.lamb, resolve_device(p.device), p.seed,
                        metrics=(p.algorithm,))
        joint, ground = report.joint(p.algorithm), report.ground
        quality = ground.quality.double()

        def quality_with(picks: list[int]) -> torch.Tensor:
            """Mean quality of S + {x} for every row x."""
            return ((quality[picks].sum() + quality) / (len(picks) + 1)).float()

        if p.algorithm == "Facility" and p.lamb < 1:
            picks, history = self._facility(ground, k, joint, quality_with)
        else:
            picks, history = [], []
            term = TERMS[p.algorithm](ground) if p.lamb < 1 else None
            taken = torch.zeros(len(ground), dtype=torch.bool, device=ground.device)
            for step in range(k):
                div = term.values() if term else torch.zeros_like(ground.quality)
                values = joint.combine(quality_with(picks), div).masked_fill_(taken, -torch.inf)
                best = int(values.argmax())
                picks.append(best)
                taken[best] = True
                if term:
                    term.add(best)
                history.append({"step": step, "row": best, "joint": values[best].item()})
        return (*picks_output(len(data), picks), history)

    def _facility(self, ground: GroundSet, k: int, joint, quality_with):
        n, unit = len(ground), ground.unit
        if 4 * n * n <= self.options.memory_gb * 2**30:
            rows = kernel_rows(clipped_cosine(unit, unit))
        else:
            def rows(idx):
                return clipped_cosine(unit[idx], unit)

        def value(cover, picks):
            return joint.combine(quality_with(picks), (cover / n).float())

        return facility_greedy(rows, n, n, k, self.options.optimizer, value, ground.device)

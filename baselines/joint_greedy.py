"""`joint-greedy`: greedy on the learner's own objective, the fair yardstick for DATAMASK.

It maximises lamb * quality + (1 - lamb) * diversity (`datamask.objectives.Joint`) with the term
scale fitted on the whole ground set at budget k, exactly as `datamask.report.Report` fits it
(the Report's own Joint is used), so its values are the numbers the reports print; given
`term_scale`, on that scale instead (select's blocks pass the whole input's). Each step scores
S + {x} for every row x at once and combines the two raw terms with `Joint.combine`; the raw
terms come from exact incremental forms that equal the objective module's (tested against
`Joint.batch`):
- quality: (sum of q over S + q_x) / (m + 1);
- Pair_simi: -(pair-cosine sum of S + e_x . s) / C(m + 1, 2), s the running sum of unit rows;
- DiSF: the rank-1 collapse score of disf-greedy-fast (float64); on one row DiSF is undefined, so
  the first pick is by quality alone;
- Facility: (coverage of S + gain of x) / N, naive or lazy (the joint value grows with the gain,
  so lazy bounds on the coverage gain stay valid); the N x N kernel is precomputed when it fits
  `memory_gb`, else its rows are computed on demand.
These are the terms of `datamask.objectives` (`JointGains` and the diversity terms) run by the
loop of `datamask.greedy`. `--optimizer stochastic` (every metric) scores a seeded random sample
of (N / k) ln(1 / epsilon) rows per step instead of all of them. Ties go to the lowest row, so
lamb = 1 picks exactly the quality top-k.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from datamask.data import Dataset
from datamask.learner import LearnerConfig
from datamask.objectives import Joint, TermScale, joint_greedy
from datamask.report import Report
from datamask.options import option
from datamask.selectors import Selector
from datamask.shared import resolve_device

from .common import (check, device_option, epsilon_option, optimiser_of, picks_output,
                     rounds_option)
from .facility_greedy import memory_option, optimizer_option


_LEARNER = {f.name: f for f in dataclasses.fields(LearnerConfig)}


@dataclass
class JointGreedyOptions:
    # the learner's own --algorithm and --lamb, so the two optimise the same objective
    algorithm: str = dataclasses.field(default="Pair_simi", metadata=_LEARNER["algorithm"].metadata)
    lamb: float = dataclasses.field(default=0.5, metadata=_LEARNER["lamb"].metadata)
    optimizer: str = optimizer_option()
    epsilon: float = epsilon_option()
    rounds: int = rounds_option()
    memory_gb: float = memory_option("kernel rows on demand (Facility)")
    term_scale: tuple[float, ...] | None = dataclasses.field(
        default=None, metadata=_LEARNER["term_scale"].metadata)
    seed: int = option(0, "seed of the random masks that scale quality against diversity, and "
                          "of the stochastic greedy's samples")
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
        ground = report.ground
        joint = (report.joint(p.algorithm) if p.term_scale is None
                 else Joint(report.metrics[p.algorithm], p.lamb, TermScale(*p.term_scale)))
        picks, history = joint_greedy(
            joint, ground, p.algorithm, k, p.memory_gb * 2**30,
            optimiser_of(p, ground.device),
            record=lambda s: {"step": s.step, "row": s.row, "joint": s.value.item(),
                              "gains_evaluated": s.gains_evaluated,
                              "elapsed_s": s.elapsed_s})
        return (*picks_output(len(data), picks), history, (joint, ground))

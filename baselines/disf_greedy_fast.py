"""`disf-greedy-fast`: the DiSF reference greedy's exact picks at O(b * d^2) per step.

Adding a row to the selected set changes its mean and scatter by rank one, so the collapse score
of S + {x} for every candidate x needs two (candidates x d) @ (d x d) GEMMs per step
(`datamask.objectives.ScatterState`, whose docstring has the expansion), instead of one
(m + 1)-row covariance per candidate. The numbers are those of `collapse_score` on the
from-scratch covariance up to float64 rounding, so the picks equal `disf-greedy`'s (tested).

`mode='batched'` follows disf-greedy's batches and budget rule exactly; `mode='global'` runs one
greedy over all N rows (random first pick, then k - 1 collapse-minimising picks), the
un-batched variant that large timings need.
"""

from __future__ import annotations

from dataclasses import dataclass

from datamask.objectives import CollapseGains
from datamask.options import option

from .disf_greedy import BatchedDiSF, DisfOptions


@dataclass
class DisfFastOptions(DisfOptions):
    mode: str = option("batched", "per batch like disf-greedy, or one greedy over all rows",
                       choices=("batched", "global"))


class DisfGreedyFast(BatchedDiSF):
    """DiSF greedy, same picks as disf-greedy via exact rank-1 updates; batched or global mode."""

    name = "disf-greedy-fast"
    Options = DisfFastOptions

    def _plan(self, n, k):
        return [(0, n, k)] if self.options.mode == "global" else super()._plan(n, k)

    def _gains(self, x):
        return CollapseGains(x)

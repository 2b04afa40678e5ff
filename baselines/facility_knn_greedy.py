"""`facility-knn-greedy`: greedy facility location on a sparse k-nearest-neighbour kernel.

The route apricot recommends for millions of rows: keep each row's similarity to its
`--neighbours` nearest rows only (`datamask.objectives.SparseFacilityLocation`; faiss, exact
`flat` search or an `ivf` index), so memory and every gain scale with N * neighbours instead of
N^2. The greedy is `datamask.greedy`'s loop over `SparseCoverageGains` (a gain is a scatter-add
over the candidate's kernel entries): lazy (Minoux) by default, naive (same picks) or stochastic.
With --neighbours at least N it is `facility-greedy` on the full kernel, pick for pick.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from datamask.data import Dataset
from datamask.objectives import knn_greedy, knn_kernel
from datamask.objectives.sparse_facility import INDEXES, NEIGHBOURS, NPROBE
from datamask.options import Range, option
from datamask.selectors import Selector

from .common import (
    check,
    device_option,
    epsilon_option,
    ground_set,
    optimiser_of,
    picks_output,
    rounds_option,
    seed_option,
)
from .facility_greedy import optimizer_option


@dataclass
class FacilityKnnGreedyOptions:
    neighbours: int = option(NEIGHBOURS, "similarities kept per row (its nearest rows, itself "
                                         "included)", within=Range(1))
    index: str = option("flat", "faiss search: flat (exact) or ivf (inverted lists, approximate, "
                        "for 100k+ rows)", choices=INDEXES)
    nlist: int | None = option(None, "ivf: lists the rows are clustered into", within=Range(1),
                               default_text="4 sqrt(N), at most N / 39")
    nprobe: int = option(NPROBE, "ivf: lists searched per row", within=Range(1))
    optimizer: str = optimizer_option()
    epsilon: float = epsilon_option()
    rounds: int = rounds_option()
    seed: int = seed_option()
    device: str = device_option()


class FacilityKnnGreedy(Selector):
    """Greedy facility location on the kNN-sparsified clipped-cosine kernel."""

    name = "facility-knn-greedy"
    Options = FacilityKnnGreedyOptions

    def _select(self, data: Dataset, k: int):
        p = self.options
        check(p.index == "ivf" or p.nlist is None, "--nlist applies to --index ivf only")
        check(p.nlist is None or p.nlist <= len(data),
              f"--nlist {p.nlist} exceeds the {len(data)} input rows")
        ground = ground_set(data, p.device)
        start = time.perf_counter()
        kernel = knn_kernel(ground.unit, p.neighbours, p.index, p.nlist, p.nprobe, p.seed)
        kernel_s = time.perf_counter() - start
        picks, history, objective = knn_greedy(
            ground, kernel, k, optimiser_of(p, ground.device),
            record=lambda s, term: {"step": s.step, "row": s.row,
                                    "facility_knn": term.covered / kernel.n,
                                    "gains_evaluated": s.gains_evaluated,
                                    "elapsed_s": s.elapsed_s})
        history[0]["kernel_s"] = kernel_s
        history[0]["kernel_entries"] = len(kernel.similarity)
        return (*picks_output(len(data), picks), history, (objective, ground))

"""`knn-density`: quality minus local density, one score per row, then its top k.

score = z(quality) - penalty * z(density), z the standardisation over all rows (mean 0, std 1; a
constant column standardises to 0), density the mean cosine similarity of a row to its
`neighbors` nearest other rows. Rows in a tight crowd of near-duplicates score lower than equally
good rows in a sparse region, so the top k trades quality against redundancy without any
optimisation. The density term is the "information density" weighting of active learning
(Settles & Craven 2008), here subtracted from a quality z-score: the simplest one-shot answer to
"is the policy gradient needed at all?".

The neighbours are exact: faiss IndexFlatIP on the unit rows, or (without faiss) a torch top-k
over blocks of unit @ unit.T. Ties of the score go to the higher quality, then the lower row
(`datamask.shared.top_rows`), so penalty 0 is exactly `quality-topk`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.options import Range, option
from datamask.selectors import Selector
from datamask.shared import top_rows

from .common import check

try:
    import faiss
except ImportError:  # the torch blocks below take over
    faiss = None

BLOCK_BYTES = 64 * 2**20  # similarity block scored at once by the torch fallback


def standardise(values: np.ndarray) -> np.ndarray:
    """(x - mean) / std in float64; 0 everywhere for a constant column."""
    values = np.asarray(values, dtype=np.float64)
    std = values.std()
    return (values - values.mean()) / std if std > 0 else np.zeros_like(values)


def knn_density(unit: torch.Tensor, neighbors: int) -> tuple[np.ndarray, str]:
    """Mean cosine of every unit row to its `neighbors` nearest other rows, and the backend."""
    n = len(unit)
    if faiss is not None:
        x = np.ascontiguousarray(unit.numpy(), dtype=np.float32)
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        sims, labels = index.search(x, neighbors + 1)  # itself is (almost always) among them
        own = labels == np.arange(n)[:, None]
        own[~own.any(axis=1), -1] = True  # itself lost a tie at 1.0: drop the farthest instead
        return np.where(own, 0.0, sims.astype(np.float64)).sum(axis=1) / neighbors, "faiss"
    density = np.empty(n)
    block = max(1, BLOCK_BYTES // (4 * n))
    for first in range(0, n, block):
        sims = unit[first:first + block] @ unit.T  # (b, n)
        rows = torch.arange(len(sims))
        sims[rows, rows + first] = -torch.inf  # not itself
        density[first:first + len(sims)] = sims.topk(neighbors, dim=1).values.double().mean(1)
    return density, "torch"


@dataclass
class KnnDensityOptions:
    neighbors: int = option(10, "nearest neighbours whose mean cosine is the density",
                            within=Range(1))
    penalty: float = option(1.0, "weight of the density z-score against quality's",
                            within=Range(0.0, float("inf"), open_high=True))


class KnnDensity(Selector):
    """Top k of z(quality) - penalty * z(mean cosine to the nearest neighbours)."""

    name = "knn-density"
    Options = KnnDensityOptions

    def _select(self, data: Dataset, k: int):
        n, p = len(data), self.options
        check(p.neighbors < n, f"--neighbors {p.neighbors} needs more than that many rows, got {n}")
        score = standardise(data.quality)
        history = []
        if p.penalty > 0:
            unit = torch.nn.functional.normalize(torch.as_tensor(data.features), dim=1)
            density, backend = knn_density(unit, p.neighbors)
            score = score - p.penalty * standardise(density)
            history.append({"density_mean": float(density.mean()),
                            "density_max": float(density.max()), "knn": backend})
        selected = np.zeros(n, dtype=bool)
        selected[top_rows(score, data.quality, k)] = True
        return selected, score.astype(np.float32), history

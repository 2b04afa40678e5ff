"""`semdedup`: semantic de-duplication (Abbas et al. 2023, "SemDeDup").

L2-normalised embeddings are clustered by spherical k-means (faiss; a torch Lloyd loop when faiss
is absent). Inside each cluster the rows are ordered by cosine distance to the centroid (the
normalised mean of its rows), farthest
first by default (`keep='hard'`; 'easy' puts the nearest first, 'random' a seeded random order),
and row j is removed when its largest cosine to an earlier row of its cluster exceeds 1 - eps, so
the first row of each duplicate group is kept and a larger eps removes more. Comparing against
every earlier row, removed or not, is the paper's rule.

Row j is therefore removed exactly when eps > 1 - r_j, r_j its largest cosine to an earlier row:
this removal eps (its score; inf for the first row of a cluster, never removed) is computed once.
SemDeDup removes by threshold, so the budget k = round(ratio * N) is reached by bisection on eps
for the largest eps that keeps at least k rows (logged in the history, with the rows removed at
every probe and at each eps of the `eps` report list). When ties at that threshold leave more
than k survivors, the rows with the smallest removal eps are dropped first (then the higher row
index): the selection is the top k of the score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.options import Range, option
from datamask.selectors import Selector

from .common import check

try:
    import faiss
except ImportError:  # the torch k-means below takes over
    faiss = None

KEEP = ("hard", "easy", "random")
KMEANS_ITERATIONS = 20
BISECTION_STEPS = 50
BLOCK_BYTES = 64 * 2**20  # similarity block of one cluster scored at once


def spherical_kmeans(unit: torch.Tensor, n_clusters: int, seed: int) -> tuple[torch.Tensor, str]:
    """Cluster label of every unit row and the backend that computed it."""
    if faiss is not None:
        x = unit.numpy()
        kmeans = faiss.Kmeans(x.shape[1], n_clusters, niter=KMEANS_ITERATIONS, spherical=True,
                              seed=seed, verbose=False)
        kmeans.train(x)
        return torch.as_tensor(kmeans.index.search(x, 1)[1][:, 0]), "faiss"
    generator = torch.Generator().manual_seed(seed)
    centroids = unit[torch.randperm(len(unit), generator=generator)[:n_clusters]]
    for _ in range(KMEANS_ITERATIONS):
        labels = (unit @ centroids.T).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, labels, unit)
        filled = torch.bincount(labels, minlength=n_clusters) > 0  # empty ones stay put
        centroids[filled] = torch.nn.functional.normalize(sums[filled], dim=1)
    return (unit @ centroids.T).argmax(dim=1), "torch"


def removal_eps(unit: torch.Tensor, labels: torch.Tensor, keep: str, seed: int) -> torch.Tensor:
    """Per row, the eps above which SemDeDup removes it: 1 - (largest cosine to an earlier row of
    its cluster), clamped at 0; inf for the first row of each cluster."""
    n = len(unit)
    n_clusters = int(labels.max()) + 1
    sums = torch.zeros(n_clusters, unit.shape[1]).index_add_(0, labels, unit)
    distance = 1 - (unit * torch.nn.functional.normalize(sums, dim=1)[labels]).sum(dim=1)
    if keep == "random":
        within = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    else:
        within = -distance if keep == "hard" else distance
    # cluster-major order, inside a cluster by `within`, ties to the lower row
    order = torch.as_tensor(np.lexsort((np.arange(n), within.numpy(), labels.numpy())))
    bounds = torch.bincount(labels, minlength=n_clusters).cumsum(0).tolist()
    eps = torch.empty(n)
    start = 0
    for stop in bounds:
        rows = order[start:stop]
        members = unit[rows]
        block = max(1, BLOCK_BYTES // (4 * len(rows) or 1))
        for first in range(0, len(rows), block):
            sims = members[first:first + block] @ members.T  # (b, c)
            later = torch.arange(first, first + len(sims)).unsqueeze(1)
            sims.masked_fill_(torch.arange(len(rows)).unsqueeze(0) >= later, -torch.inf)
            eps[rows[first:first + block]] = (1 - sims.amax(dim=1)).clamp_min_(0)
        start = stop
    return eps  # 1 - (-inf) = inf for each cluster's first row


@dataclass
class SemDeDupOptions:
    n_clusters: int | None = option(None, "spherical k-means clusters", within=Range(1),
                                    default_text="round(sqrt(N))")
    keep: str = option("hard", "order inside a cluster, whose first row of a duplicate group is "
                               "kept: farthest from the centroid first, nearest first, or random",
                       choices=KEEP)
    eps: tuple[float, ...] = option((0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.3),
                                    "eps values whose removal counts the history reports; the eps "
                                    "used is found by bisection to meet --select_ratio",
                                    within=Range(0.0, 2.0))
    seed: int = option(0, "seed of the k-means initialisation and of --keep random")


class SemDeDup(Selector):
    """SemDeDup: spherical k-means, drop rows within 1 - eps cosine of an earlier cluster row."""

    name = "semdedup"
    Options = SemDeDupOptions

    def _select(self, data: Dataset, k: int):
        p = self.options
        n = len(data)
        n_clusters = p.n_clusters or max(1, round(math.sqrt(n)))
        check(n_clusters <= n, f"--n_clusters {n_clusters} exceeds the {n} rows")
        unit = torch.nn.functional.normalize(torch.as_tensor(data.features), dim=1)
        labels, backend = spherical_kmeans(unit, n_clusters, p.seed)
        score = removal_eps(unit, labels, p.keep, p.seed).numpy()

        def removed(eps: float) -> int:
            return int((score < eps).sum())

        history = [{"eps": e, "removed": removed(e)} for e in p.eps]
        low, high = 0.0, 2.0  # removed(low) <= n - k always; search while removed(high) > n - k
        if removed(high) > n - k:
            for _ in range(BISECTION_STEPS):
                middle = (low + high) / 2
                count = removed(middle)
                history.append({"bisection_eps": middle, "removed": count})
                low, high = (middle, high) if count <= n - k else (low, middle)
        else:
            low = high
        order = np.lexsort((np.arange(n), -score))
        selected = np.zeros(n, dtype=bool)
        selected[order[:k]] = True
        history.append({"eps_for_budget": low, "removed_at_eps": removed(low),
                        "dropped_by_rank": n - removed(low) - k, "clusters": n_clusters,
                        "kmeans": backend})
        return selected, score, history

"""`cluster-quota`: quality top-k inside every cluster, each cluster holding a fixed quota.

The unit rows are clustered by spherical k-means (`semdedup.spherical_kmeans`: faiss, or torch
without it); each cluster gets a quota of the budget k and keeps its quota of highest-quality rows
(ties to the lower row). Quotas are proportional to the cluster's size (`balance='proportional'`)
or equal (`'equal'`: a water level t with sum of min(size, t) = k, so a cluster smaller than its
share gives the rest to the others), rounded by largest remainder (ties to the lower cluster) so
that they sum to exactly k and no cluster gives more rows than it holds. Cluster-stratified
selection of this kind is the classic stratified / cluster sampling of survey statistics (Cochran
1977), and in data pruning it is the balance behind SemDeDup-style and "cluster-balanced" subsets
(Abbas et al. 2023; Tirumala et al. 2023, D4).

Score: 0 for an unselected row; a selected row at rank r (0 best) of a cluster of quota Q scores
1 - r / Q, in (0, 1], so the top k of the score is the selection and its shorter prefixes stay
about as balanced (the j-th row of each cluster comes in at the same fraction of its quota).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datamask.data import Dataset
from datamask.options import Range, option
from datamask.selectors import Selector
from datamask.stratify import largest_remainder

from .semdedup import spherical_kmeans

BALANCE = ("proportional", "equal")


def water_level(sizes: np.ndarray, k: int) -> float:
    """The real t with sum(min(sizes, t)) = k (k at most sizes.sum())."""
    ordered = np.sort(sizes).astype(np.float64)
    below = np.concatenate([[0.0], np.cumsum(ordered)[:-1]])  # sum of the sizes under each
    reach = below + ordered * (len(ordered) - np.arange(len(ordered)))  # sum of min(sizes, size_j)
    j = int(np.searchsorted(reach, k))  # first cluster whose size is at or above the level
    return (k - below[j]) / (len(ordered) - j)


def quotas(sizes, k: int, balance: str = "proportional") -> np.ndarray:
    """Rows each cluster keeps: sum exactly k, each at most its cluster's size."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if k > sizes.sum():
        raise ValueError(f"a budget of {k} rows exceeds the {sizes.sum()} rows of the clusters")
    if balance == "proportional":  # the split --stratify makes, in exact integer arithmetic
        return largest_remainder(k, sizes)
    ideal = np.minimum(sizes, water_level(sizes, k))
    quota = np.minimum(np.floor(ideal).astype(np.int64), sizes)
    # largest remainder among the clusters with rows left, ties to the lower cluster; a second
    # pass (never needed for the water level, kept for safety) fills clusters with room in order
    room = np.flatnonzero(quota < sizes)
    order = room[np.lexsort((room, -(ideal - quota)[room]))]
    while quota.sum() < k:
        left = k - int(quota.sum())
        order = order[quota[order] < sizes[order]]
        quota[order[:left]] += 1
    return quota


@dataclass
class ClusterQuotaOptions:
    n_clusters: int = option(64, "spherical k-means clusters", within=Range(1))
    balance: str = option("proportional", "quota per cluster by its size, or equal",
                          choices=BALANCE)
    seed: int = option(0, "seed of the k-means initialisation")


class ClusterQuota(Selector):
    """Cluster-balanced quality top-k: spherical k-means, each cluster's quota of best rows."""

    name = "cluster-quota"
    Options = ClusterQuotaOptions

    def _select(self, data: Dataset, k: int):
        n, p = len(data), self.options
        n_clusters = min(p.n_clusters, n)
        if n_clusters == 1:
            labels, backend = np.zeros(n, dtype=np.int64), "none"
        else:
            unit = torch.nn.functional.normalize(torch.as_tensor(data.features), dim=1)
            labels, backend = spherical_kmeans(unit, n_clusters, p.seed)
            labels = labels.numpy().astype(np.int64)
        sizes = np.bincount(labels, minlength=n_clusters)
        quota = quotas(sizes, k, p.balance)
        # cluster-major order, inside a cluster by quality (best first), ties to the lower row
        order = np.lexsort((np.arange(n), -data.quality.astype(np.float64), labels))
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - starts[labels[order]]
        selected = rank < quota[labels]
        score = np.where(selected, 1 - rank / np.maximum(quota[labels], 1), 0.0)
        history = [{"clusters": n_clusters, "nonempty": int((sizes > 0).sum()), "kmeans": backend,
                    "balance": p.balance, "sizes": sizes.tolist(), "quotas": quota.tolist()}]
        return selected, score.astype(np.float32), history

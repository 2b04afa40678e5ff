"""A synthetic FineWeb-like shard in the data contract, for the demo, tests and benchmarks.

Rows fall into clusters of very uneven size (web text is dominated by a few near-duplicate
templates); the larger a cluster, the higher its mean quality, so that quality alone picks a
redundant subset and quality and diversity genuinely pull apart, as they do on real web data.
"""

from __future__ import annotations

import numpy as np

from ..data import Dataset
from ..errors import UserError


def synthetic_dataset(n_rows: int = 3000, dim: int = 64, n_clusters: int = 24,
                      cluster_spread: float = 0.35, seed: int = 0) -> Dataset:
    """`n_rows` rows of `dim` floats in `n_clusters` clusters (flags of `datamask synth`)."""
    return synthetic_clusters(n_rows, dim, n_clusters, cluster_spread, seed)[0]


def synthetic_clusters(n_rows: int = 3000, dim: int = 64, n_clusters: int = 24,
                       cluster_spread: float = 0.35, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    """`synthetic_dataset`'s rows and each row's cluster (0 .. n_clusters - 1), which tells how
    many clusters a selection covers (a real corpus has no such labels)."""
    for flag, value in (("--rows", n_rows), ("--dim", dim), ("--clusters", n_clusters)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"{flag} must be a whole number of at least 1, got {value!r}")
    if not cluster_spread >= 0:
        raise UserError(f"cluster_spread must be 0 or more, got {cluster_spread}")
    rng = np.random.default_rng(seed)
    sizes = rng.pareto(1.2, n_clusters) + 0.05  # heavy-tailed cluster weights
    cluster = rng.choice(n_clusters, size=n_rows, p=sizes / sizes.sum())
    centers = rng.standard_normal((n_clusters, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    noise = rng.standard_normal((n_rows, dim)) * cluster_spread / np.sqrt(dim)
    features = (centers[cluster] + noise).astype(np.float32)

    share = np.bincount(cluster, minlength=n_clusters) / n_rows
    rank = share.argsort().argsort() / max(1, n_clusters - 1)  # 0 smallest cluster .. 1 largest
    level = 1.0 + 2.5 * rank + 0.3 * rng.standard_normal(n_clusters)
    quality = np.clip(level[cluster] + 0.4 * rng.standard_normal(n_rows), 0.0, 5.0)

    ids = rng.choice(np.arange(10 * n_rows, dtype=np.int64) + 1000, size=n_rows, replace=False)
    return Dataset(ids=ids, quality=quality.astype(np.float32), features=features), cluster

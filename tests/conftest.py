"""Test data shared by the test files: import the helpers with `from conftest import ...` (pytest
puts this folder on the path)."""

import os
from pathlib import Path

import numpy as np

from datamask.data import Dataset, write_dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def gaussian_data(n: int, dim: int, seed: int) -> Dataset:
    """Unclustered rows: standard normal features, quality uniform in [0, 5), ids from 100."""
    rng = np.random.default_rng(seed)
    return Dataset(ids=np.arange(n, dtype=np.int64) + 100,
                   quality=rng.uniform(0, 5, n).astype(np.float32),
                   features=rng.standard_normal((n, dim)).astype(np.float32))


def write_shard(path: Path, data: Dataset, **extra) -> Path:
    """`data` as a prepared Parquet shard at `path` (extra columns as pyarrow arrays)."""
    write_dataset(path, data.ids, data.quality, data.features, extra=extra or None)
    return path

"""select in blocks: the whole input's count, apportioned once over the blocks; the selectors'
fixed term scale."""

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, write_shard

from datamask.data import Dataset, budget, read_dataset
from datamask.errors import UserError
from datamask.report import Report
from datamask.selectors import make_selector
from datamask.stratify import largest_remainder
from reproduce.pipeline.select import run_select

RATIO = 0.1


def shards_of(data: Dataset, folder, parts: int = 2) -> list[str]:
    """`data` as `parts` prepared shards, in order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, rows in enumerate(np.array_split(np.arange(len(data)), parts)):
        part = Dataset(data.ids[rows], data.quality[rows], data.features[rows])
        paths.append(str(write_shard(folder / f"{index:02d}.parquet", part,
                                     id=pa.array([f"doc-{i}" for i in part.ids]))))
    return paths


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    """440 clustered unit rows whose quality rises along one direction, as two shards."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((12, 8))
    features = centres[rng.integers(0, 12, 440)] + 0.6 * rng.standard_normal((440, 8))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    quality = 2.5 + features[:, 0] + 0.3 * rng.standard_normal(440)
    data = Dataset(np.arange(440, dtype=np.int64) + 100, quality.astype(np.float32),
                   features.astype(np.float32))
    return shards_of(data, tmp_path_factory.mktemp("clustered"))


@pytest.mark.parametrize("merge", [{}, dict(merge_ratio=0.2, merge_partition="random")])
def test_many_blocks_select_exactly_the_whole_inputs_budget(tmp_path, merge):
    """6,000 rows in 32 blocks of at most 188: each block rounding its own 10% would select 608;
    the budget apportioned once selects 600, each block its largest-remainder share."""
    paths = shards_of(gaussian_data(6000, 4, seed=0), tmp_path / "in")
    summary = run_select(paths, tmp_path / "out", "quality-topk", RATIO, block_size=188, **merge)
    table = pq.read_table(summary["output"])
    blocks, selected = table.column("block").to_numpy(), table.column("selected").to_numpy()
    sizes = np.bincount(blocks)
    assert summary["blocks"] == 32 and sum(budget(RATIO, int(n)) for n in sizes) == 608
    assert selected.sum() == summary["selected"] == budget(RATIO, 6000) == 600
    if merge:  # the blocks keep budget(0.2, N), the parts choose the 600 among them
        assert summary["union_rows"] == budget(0.2, 6000) == 1200
    else:
        assert np.bincount(blocks, weights=selected).tolist() == \
            largest_remainder(600, sizes).tolist()


def test_the_learner_scores_on_a_given_scale_and_fits_none(clustered):
    """The learner's start (n_epochs 0) on the scale it would fit itself is its own start; on a
    scale whose quality spread is tiny, quality outweighs diversity and it is the quality top-k."""
    data = read_dataset(clustered)
    options = {"n_epochs": 0, "progress": False}
    own = make_selector("datamask", **options).select(data, RATIO)
    report = Report(data, RATIO, 0.5, metrics=("Pair_simi",))
    scale = report.joint("Pair_simi").scale
    same = make_selector("datamask", term_scale=dataclasses.astuple(scale), **options)
    assert np.array_equal(same.select(data, RATIO).selected, own.selected)
    tilted = dataclasses.replace(scale, quality_std=1e-6)
    quality_first = make_selector("datamask", term_scale=dataclasses.astuple(tilted), **options)
    top = np.argsort(-data.quality, kind="stable")[:budget(RATIO, len(data))]
    assert np.flatnonzero(quality_first.select(data, RATIO).selected).tolist() == sorted(top)
    assert not np.array_equal(own.selected, quality_first.select(data, RATIO).selected)


@pytest.mark.parametrize("value", [(1.0, 2.0), (0.0, 0.0, 0.0, 1.0), (0.0, 1.0, float("nan"), 1.0)])
def test_a_term_scale_not_four_numbers_with_positive_spreads_is_refused(value):
    for name in ("datamask", "joint-greedy"):
        with pytest.raises(UserError, match="term_scale must be 4 finite numbers"):
            make_selector(name, term_scale=value)
    assert make_selector("datamask", term_scale=[0, 1, 0, 2]).params["term_scale"] == \
        (0.0, 1.0, 0.0, 2.0)

"""select in blocks: the whole input's count, apportioned once over the blocks."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, write_shard

from datamask.data import Dataset, budget
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

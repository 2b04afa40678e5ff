"""select's merge round across blocks (--merge_ratio): the count, ids and strata it keeps, the
near-copies it meets, its rerun after a killed task, and its refusals."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_shard

from datamask.data import Dataset, NeighbourhoodTree, budget, neighbourhood_blocks
from datamask.errors import UserError
from datamask.stratify import stratum_budgets
from reproduce.pipeline.select import UNION_PLAN, SelectConfig, run_select

RATIO, BLOCK = 0.1, 110


def planted_rows(n: int = 400, copies: int = 40, dim: int = 8, seed: int = 0):
    """Clustered unit rows and `copies` near-copies of some of them (noise 0.01, unit length,
    quality copied) appended with new ids: (data, original ids, copy ids)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    features = centres[rng.integers(0, 20, n)] + 0.5 * rng.standard_normal((n, dim))
    source = rng.choice(n, copies, replace=False)
    features = np.concatenate([features,
                               features[source] + 0.01 * rng.standard_normal((copies, dim))])
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    quality = rng.uniform(0, 1, n)
    data = Dataset(np.arange(n + copies, dtype=np.int64) + 100,
                   np.concatenate([quality, quality[source]]).astype(np.float32),
                   features.astype(np.float32))
    return data, source + 100, np.arange(n, n + copies) + 100


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The planted rows as two prepared shards, with a `domain` column for --stratify."""
    root = tmp_path_factory.mktemp("merge")
    data, originals, copies = planted_rows()
    domain = np.random.default_rng(1).choice(["news", "docs", "forum"], len(data),
                                             p=[0.6, 0.3, 0.1])
    paths = []
    for index, rows in enumerate((slice(0, 220), slice(220, None))):
        part = Dataset(data.ids[rows], data.quality[rows], data.features[rows])
        paths.append(str(write_shard(
            root / f"{index:02d}.parquet", part, domain=pa.array(domain[rows]),
            id=pa.array([f"doc-{i}" for i in part.ids]))))
    return paths, originals, copies, domain


def chosen(summary: dict) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    table = pq.read_table(summary["output"])
    return (table.column("chunk_id").to_numpy(),
            table.column("selected").to_numpy(zero_copy_only=False), table)


def pairs_kept(ids, selected, originals, copies) -> int:
    picked = set(ids[selected].tolist())
    return sum(a in picked and b in picked for a, b in zip(originals, copies))


@pytest.mark.parametrize("merge_rows, partition", [(0, "neighbourhood"), (30, "neighbourhood"),
                                                   (30, "random")])
def test_merge_round_selects_the_one_round_count_from_the_blocks_picks(shards, tmp_path,
                                                                       merge_rows, partition):
    paths, *_ = shards
    one = run_select(SelectConfig(input=paths, output=tmp_path / "one", method="facility-greedy",
                                  select_ratio=RATIO, block_size=BLOCK))
    two = run_select(SelectConfig(input=paths, output=tmp_path / "two", method="facility-greedy",
                                  select_ratio=RATIO, block_size=BLOCK, merge_ratio=0.25,
                                  merge_rows=merge_rows, merge_partition=partition))
    ids, selected, table = chosen(two)
    one_ids, one_selected, _ = chosen(one)
    assert np.array_equal(ids, one_ids) and len(np.unique(ids)) == 440
    # the whole input's budgets, apportioned over the blocks, not each block's rounded
    assert selected.sum() == one_selected.sum() == two["selected"] == budget(RATIO, 440) == 44
    union = table.column("union").to_numpy()
    plan = pq.read_table(tmp_path / "two" / UNION_PLAN)
    assert (union >= 0).sum() == two["union_rows"] == plan.num_rows
    assert two["union_rows"] == budget(0.25, 440) == 110 < 4 * budget(0.25, BLOCK)
    assert not selected[union < 0].any()  # the merge round chooses among the blocks' picks
    assert two["unions"] == (1 if merge_rows == 0 else 4)  # parts of at most the block size
    assert sorted(np.unique(union[union >= 0])) == list(range(two["unions"]))


def test_neighbourhood_merge_meets_the_near_copies_the_blocks_kept(shards, tmp_path):
    """Facility gains nothing from a second near-copy, but a block never sees the copy in
    another block: one round keeps planted pairs whose rows sit in different blocks; a merge
    round whose parts hold neighbours together keeps none."""
    paths, originals, copies, _ = shards
    one = run_select(SelectConfig(input=paths, output=tmp_path / "one", method="facility-greedy",
                                  select_ratio=RATIO, block_size=60))
    two = run_select(SelectConfig(input=paths, output=tmp_path / "two", method="facility-greedy",
                                  select_ratio=RATIO, block_size=60, merge_ratio=0.3,
                                  merge_rows=60))
    assert two["unions"] > 1
    assert pairs_kept(*chosen(one)[:2], originals, copies) > 0
    assert pairs_kept(*chosen(two)[:2], originals, copies) == 0


def test_merge_round_keeps_the_strata_shares_to_the_row(shards, tmp_path):
    paths, _, _, domain = shards
    summary = run_select(SelectConfig(input=paths, output=tmp_path / "s", method="quality-topk",
                                      select_ratio=RATIO, block_size=BLOCK, stratify="domain",
                                      merge_ratio=0.3, merge_rows=40))
    ids, selected, _ = chosen(summary)
    expected = stratum_budgets(domain, budget(RATIO, len(domain)))
    assert {v: int(selected[domain == v].sum()) for v in expected} == expected
    assert {s["value"]: s["selected"] for s in summary["strata"]} == expected


def test_rerun_after_a_killed_merge_task_equals_an_uninterrupted_run(shards, tmp_path):
    paths, *_ = shards
    flags = dict(block_size=BLOCK, merge_ratio=0.3, merge_rows=30)
    out = tmp_path / "select"
    before = pq.read_table(run_select(SelectConfig(input=paths, output=out,
                                                   method="facility-greedy", select_ratio=RATIO,
                                                   **flags))["output"])
    part = out / "unions" / "00001.parquet"
    kept = (out / "unions" / "00000.parquet").stat().st_mtime_ns
    part.unlink()  # as if the merge round's task 1 had been killed before it finished
    (out / "logs" / "unions" / "completions" / "00001").unlink()
    again = run_select(SelectConfig(input=paths, output=out, method="facility-greedy",
                                    select_ratio=RATIO, **flags))
    assert part.exists() and (out / "unions" / "00000.parquet").stat().st_mtime_ns == kept
    assert pq.read_table(again["output"]).equals(before)


def test_one_block_has_nothing_to_merge(shards, tmp_path):
    paths, *_ = shards
    one = run_select(SelectConfig(input=paths, output=tmp_path / "a", method="quality-topk",
                                  select_ratio=RATIO))
    merged = run_select(SelectConfig(input=paths, output=tmp_path / "b", method="quality-topk",
                                     select_ratio=RATIO, merge_ratio=0.3))
    assert "merge_ratio" not in merged and "union" not in pq.read_schema(merged["output"]).names
    assert pq.read_table(merged["output"]).equals(pq.read_table(one["output"]))


@pytest.mark.parametrize("flags, message", [
    (dict(merge_ratio=0.1), r"--merge_ratio 0.1: must be above --select_ratio 0.1"),
    (dict(merge_ratio=1.5), r"--merge_ratio 1.5: .* at most 1"),
    (dict(merge_ratio=-0.2), r"--merge_ratio -0.2: must be above"),
    (dict(merge_rows=50), r"--merge_rows .*give --merge_ratio"),
    (dict(merge_ratio=0.3, merge_partition="kmeans"), r"--merge_partition must be one of"),
    (dict(merge_ratio=0.3, merge_rows=10**12), r"--merge_rows 1,000,000,000,000: a part of the "
                                                 r"merge round .* 8-d float32 features, 29802.3 "
                                                 r"GiB .*over a task's .*; lower --merge_rows"),
    (dict(merge_ratio=0.3, merge_rows=10**9, executor="ray",
          cluster={"cpus_per_task": 1, "mem_per_cpu_gb": 4}),
     r"--merge_rows 1,000,000,000: .* 29.8 GiB .* over a task's 4.0 GiB \(--cpus_per_task x "
     r"--mem_per_cpu_gb\)"),
])
def test_bad_merge_flags_are_refused_before_any_work(shards, tmp_path, flags, message):
    paths, *_ = shards
    with pytest.raises(UserError, match=message):
        run_select(SelectConfig(input=paths, output=tmp_path / "out", method="random",
                                select_ratio=RATIO, block_size=BLOCK, **flags))
    assert not (tmp_path / "out").exists()


def test_cli_merge_flags_reach_the_stage_and_refuse_in_one_line(shards, tmp_path, capsys):
    from reproduce.cli import main

    paths, *_ = shards
    out = tmp_path / "cli"
    main(["select", "--input", *paths, "--output", str(out), "--method", "quality-topk",
          "--select_ratio", "0.1", "--block_size", "110", "--merge_ratio", "0.2"])
    assert pq.read_table(out / UNION_PLAN).num_rows == 4 * 22
    assert main(["select", "--input", *paths, "--output", str(tmp_path / "bad"), "--method",
                 "random", "--merge_ratio", "0.05"]) == 2
    assert "--merge_ratio 0.05: must be above --select_ratio 0.25" in capsys.readouterr().err


def test_neighbourhood_tree_routes_its_sample_as_it_cut_it_and_keeps_clusters_apart():
    """Four tight clusters at the corners of a rectangle (as for neighbourhood_blocks): the cuts
    fitted on them route each cluster to a block of its own, the sample exactly as
    neighbourhood_blocks cuts it, and rows moved by 1e-4 to the same blocks."""
    rng = np.random.default_rng(0)
    corners = np.array([[0, 0], [0, 10], [40, 0], [40, 10]], dtype=np.float32)
    cluster = np.repeat(np.arange(4), 50)
    features = corners[cluster] + rng.normal(scale=0.5, size=(200, 2)).astype(np.float32)
    tree = NeighbourhoodTree.fit(features, 4)
    routed = tree.route(features)
    assert sorted(len(set(routed[cluster == c])) for c in range(4)) == [1] * 4
    assert len(set(routed.tolist())) == 4
    assert sorted(map(tuple, neighbourhood_blocks(features, 4))) == sorted(
        tuple(np.flatnonzero(routed == b)) for b in range(4))
    near = features + 1e-4 * rng.standard_normal(features.shape).astype(np.float32)
    assert (tree.route(near) == routed).all()
    assert (NeighbourhoodTree.fit(features, 1).route(features) == 0).all()
    three = NeighbourhoodTree.fit(features, 3).route(features)
    assert sorted(np.bincount(three).tolist()) == [66, 67, 67]


def test_each_block_reads_its_own_rows_from_the_scatter_round(shards, tmp_path):
    """With several blocks, a scatter round writes each block's rows once; a block's selection is
    the selector's on exactly the plan's rows of that block, in prepared order, and the scattered
    copy is gone once the selection is written."""
    from datamask.data import read_dataset
    from datamask.selectors import make_selector

    paths, *_ = shards
    out = tmp_path / "select"
    summary = run_select(SelectConfig(input=paths, output=out, method="pair-greedy",
                                      select_ratio=RATIO, block_size=BLOCK, workers=2))
    plan = pq.read_table(out / "plan.parquet")
    everything = read_dataset(paths)
    _, selected, table = chosen(summary)
    for block in range(4):
        mine = np.isin(everything.ids, plan.column("chunk_id").to_numpy()[
            plan.column("block").to_numpy() == block])
        rows = Dataset(everything.ids[mine], everything.quality[mine], everything.features[mine])
        alone = make_selector("pair-greedy").select(rows, RATIO)
        assert np.array_equal(selected[mine], alone.selected)
    assert sorted(p.name for p in (out / "logs" / "scatters" / "logs").iterdir()) == \
        ["task_00000.log", "task_00001.log"]
    assert not (out / "scattered").exists()
    # block 2's selection lost after the run: the rerun scatters its rows alone and redoes it
    before = pq.read_table(summary["output"])
    (out / "blocks" / "00002.parquet").unlink()
    (out / "logs" / "blocks" / "completions" / "00002").unlink()
    kept = (out / "blocks" / "00000.parquet").stat().st_mtime_ns
    again = run_select(SelectConfig(input=paths, output=out, method="pair-greedy",
                                    select_ratio=RATIO, block_size=BLOCK, workers=2))
    assert pq.read_table(again["output"]).equals(before)
    assert (out / "blocks" / "00000.parquet").stat().st_mtime_ns == kept


def test_spilled_rows_meet_every_row_within_the_margin_once():
    """Unit rows in 4 dimensions, cut into 16 blocks: every pair at most `margin` apart that a
    cut separates meets in exactly one of its two home blocks (there one is home, the other a
    guest), and a tree routed with no margin sends no guest. Pairs a cut separates exist, so the
    guests are what brings them together."""
    rng = np.random.default_rng(1)
    features = rng.standard_normal((600, 4))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    tree = NeighbourhoodTree.fit(features, 16)
    margin = 0.25
    rows, blocks, home = tree.spill(features, margin)
    assert (rows[home] == np.arange(600)).all() and (blocks[home] == tree.route(features)).all()
    present = set(zip(rows.tolist(), blocks.tolist()))
    assert len(present) == len(rows)  # no row twice in one block
    distance = np.linalg.norm(features[:, None] - features[None], axis=-1)
    first, second = np.nonzero(np.triu(distance <= margin, 1))
    home_block = tree.route(features)
    apart = home_block[first] != home_block[second]
    assert apart.sum() > 100
    assert all(((a, home_block[b]) in present) + ((b, home_block[a]) in present) == 1
               for a, b in zip(first[apart].tolist(), second[apart].tolist()))
    assert tree.spill(features, -1.0)[0].tolist() == list(range(600))


def test_kmeans_cells_meet_every_row_within_the_margin_once():
    """The routing benchmark's k-means cells, on the same rows: every pair at most `margin` apart
    in two cells meets exactly once, in the lower cell, one row home and the other its guest;
    no row is twice in a cell, and a negative margin sends no guest."""
    from reproduce.bench.routing import kmeans_cells

    rng = np.random.default_rng(1)
    features = rng.standard_normal((800, 4)).astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    margin = 0.25
    rows, cells, home = kmeans_cells(features, np.arange(800), 16, margin, seed=0)
    assert (rows[home] == np.arange(800)).all()
    present = set(zip(rows.tolist(), cells.tolist()))
    assert len(present) == len(rows)
    own = cells[home]
    distance = np.linalg.norm(features[:, None] - features[None], axis=-1)
    first, second = np.nonzero(np.triu(distance <= margin, 1))
    apart = own[first] != own[second]
    assert apart.sum() > 50
    assert all(((a, own[b]) in present) + ((b, own[a]) in present) == 1
               for a, b in zip(first[apart].tolist(), second[apart].tolist()))
    assert all(cells[~home] < own[rows[~home]])  # a guest only of a lower cell
    assert kmeans_cells(features, np.arange(800), 16, -1.0, seed=0)[0].tolist() == list(range(800))

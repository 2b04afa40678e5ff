"""select in blocks: the whole input's count, apportioned once over the blocks, and one term scale,
the whole input's, fitted once and scored on by every block and every part of the merge round."""

import dataclasses
import json

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
from reproduce.pipeline import select
from reproduce.pipeline.select import TERM_SCALE, UNION_PLAN, SelectConfig, run_select

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


def part_rows(everything: Dataset, ids: np.ndarray) -> Dataset:
    """The rows of `ids`, in prepared order: what a block's or a part's task reads."""
    mine = np.isin(everything.ids, ids)
    return Dataset(everything.ids[mine], everything.quality[mine], everything.features[mine])


def selected_ids(path) -> np.ndarray:
    table = pq.read_table(path)
    return np.sort(table.column("chunk_id").to_numpy()[
        table.column("selected").to_numpy(zero_copy_only=False)])


@pytest.mark.parametrize("merge", [{}, dict(merge_ratio=0.2, merge_partition="random")])
def test_many_blocks_select_exactly_the_whole_inputs_budget(tmp_path, merge):
    """6,000 rows in 32 blocks of at most 188: each block rounding its own 10% would select 608;
    the budget apportioned once selects 600, each block its largest-remainder share."""
    paths = shards_of(gaussian_data(6000, 4, seed=0), tmp_path / "in")
    summary = run_select(SelectConfig(input=paths, output=tmp_path / "out", method="quality-topk",
                                      select_ratio=RATIO, block_size=188, **merge))
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


@pytest.mark.parametrize("sample", [None, 150])
def test_every_block_and_part_scores_on_the_whole_inputs_scale(clustered, tmp_path, monkeypatch,
                                                                sample):
    """The scale in term_scale.json is the report's, fitted on all rows (or, past SCALE_SAMPLE,
    on the plan's seeded sample of them); every block's and every merge part's selection is
    joint-greedy's on its own rows with that scale, and on the parts, whose rows are the blocks'
    picks, a scale fitted on those rows alone would choose otherwise."""
    if sample:
        monkeypatch.setattr(select, "SCALE_SAMPLE", sample)
    out = tmp_path / "out"
    summary = run_select(SelectConfig(input=clustered, output=out, method="joint-greedy",
                                      select_ratio=RATIO, block_size=110, merge_ratio=0.3,
                                      merge_partition="random", merge_rows=60))
    everything = read_dataset(clustered)
    plan = pq.read_table(out / "plan.parquet")
    in_sample = plan.column("scale_sample").to_numpy()
    assert in_sample.sum() == (sample or 440)
    fitted = Report(part_rows(everything, plan.column("chunk_id").to_numpy()[in_sample]), RATIO,
                    0.5, metrics=("Pair_simi",)).joint("Pair_simi").scale
    stored = json.loads((out / TERM_SCALE).read_text())
    assert stored == {**dataclasses.asdict(fitted), "sample_rows": sample or 440}
    assert summary["term_scale"] == stored
    given = make_selector("joint-greedy", term_scale=dataclasses.astuple(fitted))
    own_differs = []
    for round_plan, folder, group in ((out / "plan.parquet", "blocks", "block"),
                                      (out / UNION_PLAN, "unions", "union")):
        table = pq.read_table(round_plan)
        budgets = json.loads(table.schema.metadata[b"budgets"])
        for part, k in enumerate(budgets):
            rows = part_rows(everything, table.column("chunk_id").to_numpy()[
                table.column(group).to_numpy() == part])
            chosen = selected_ids(out / folder / f"{part:05d}.parquet")
            assert np.array_equal(chosen, np.sort(rows.ids[given.select(rows, k / len(rows))
                                                          .selected]))
            if group == "union":
                own = make_selector("joint-greedy").select(rows, k / len(rows))
                own_differs.append(not np.array_equal(chosen, np.sort(rows.ids[own.selected])))
    assert any(own_differs)


def test_a_rerun_keeps_the_fitted_scale_and_redoes_a_lost_block(clustered, tmp_path):
    out = tmp_path / "out"
    before = pq.read_table(run_select(SelectConfig(input=clustered, output=out,
                                                   method="joint-greedy", select_ratio=RATIO,
                                                   block_size=110))["output"])
    assert not (out / "scale_rows").exists() and not (out / "scattered").exists()
    fitted = (out / TERM_SCALE).stat().st_mtime_ns
    (out / "blocks" / "00001.parquet").unlink()  # as if block 1's task had been killed
    (out / "logs" / "blocks" / "completions" / "00001").unlink()
    again = run_select(SelectConfig(input=clustered, output=out, method="joint-greedy",
                                    select_ratio=RATIO, block_size=110))
    assert pq.read_table(again["output"]).equals(before)
    assert (out / TERM_SCALE).stat().st_mtime_ns == fitted


def test_one_block_fits_its_own_scale_as_before(clustered, tmp_path):
    """One block: no scale task, no budgets in the plan; the selection is the selector's on all
    rows, as `datamask baseline` would write it."""
    out = tmp_path / "out"
    summary = run_select(SelectConfig(input=clustered, output=out, method="joint-greedy",
                                      select_ratio=RATIO))
    plan = pq.read_table(out / "plan.parquet")
    assert not (out / TERM_SCALE).exists() and "term_scale" not in summary
    assert plan.column_names == ["chunk_id", "block"] and b"budgets" not in plan.schema.metadata
    alone = make_selector("joint-greedy").select(read_dataset(clustered), RATIO)
    assert np.array_equal(pq.read_table(summary["output"]).column("selected").to_numpy(),
                          alone.selected)


def test_a_selector_without_a_scale_gets_none(clustered, tmp_path):
    out = tmp_path / "out"
    summary = run_select(SelectConfig(input=clustered, output=out, method="pair-greedy",
                                      select_ratio=RATIO, block_size=110))
    assert "scale_sample" not in pq.read_schema(out / "plan.parquet").names
    assert not (out / TERM_SCALE).exists() and "term_scale" not in summary


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

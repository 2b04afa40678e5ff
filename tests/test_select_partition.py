"""select --partition neighbourhood: the first round's blocks are regions of the embedding space (the
leaves of a NeighbourhoodTree fitted on a seeded sample, every row routed), and still select
exactly the whole input's count, each block its largest-remainder share by its own row count."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_shard

from datamask.data import Dataset, budget
from datamask.errors import UserError
from datamask.stratify import largest_remainder
from reproduce.cli import main
from reproduce.pipeline.select import SelectConfig, run_select

RATIO = 0.1
CLUSTERS = 8


def clustered_rows(n: int, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    """n rows around CLUSTERS well-apart centres in 8-d, clusters of unequal sizes; each row's
    cluster."""
    rng = np.random.default_rng(seed)
    centres = 6 * rng.standard_normal((CLUSTERS, 8))
    cluster = rng.choice(CLUSTERS, n, p=np.arange(1, CLUSTERS + 1) / (CLUSTERS * (CLUSTERS + 1) / 2))
    features = centres[cluster] + 0.5 * rng.standard_normal((n, 8))
    quality = rng.uniform(0, 5, n)
    return Dataset(np.arange(n, dtype=np.int64) + 100, quality.astype(np.float32),
                   features.astype(np.float32)), cluster


def shards(data: Dataset, folder, parts: int = 3, **extra) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, rows in enumerate(np.array_split(np.arange(len(data)), parts)):
        part = Dataset(data.ids[rows], data.quality[rows], data.features[rows])
        columns = {"id": pa.array([f"doc-{i}" for i in part.ids])}
        columns.update({name: pa.array(values[rows]) for name, values in extra.items()})
        paths.append(str(write_shard(folder / f"{index:02d}.parquet", part, **columns)))
    return paths


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    data, cluster = clustered_rows(1200)
    language = np.where(np.arange(1200) % 7 == 0, "fr", np.where(cluster < 3, "de", "en"))
    return shards(data, tmp_path_factory.mktemp("pool"), language=language), cluster, language


@pytest.mark.parametrize("merge", [{}, dict(merge_ratio=0.3)])
def test_neighbourhood_blocks_select_exactly_the_whole_inputs_budget(pool, tmp_path, merge):
    """Fitted on 300 of 1,200 rows, the leaves hold unequal counts of all rows; each block selects
    its largest-remainder share of budget(select_ratio, N) by those counts, and after a merge
    round the selection is the same count."""
    paths, _, _ = pool
    summary = run_select(SelectConfig(input=paths, output=tmp_path / "out", method="quality-topk",
                                      select_ratio=RATIO, block_size=150, partition="neighbourhood",
                                      partition_sample=300, **merge))
    table = pq.read_table(summary["output"])
    blocks, selected = table.column("block").to_numpy(), table.column("selected").to_numpy()
    sizes = np.bincount(blocks)
    assert summary["blocks"] == len(sizes) == 8 and len(set(sizes.tolist())) > 1
    assert selected.sum() == summary["selected"] == budget(RATIO, 1200)
    assert summary["partition"] == "neighbourhood" and summary["partition_sample"] == 300
    if merge:
        assert summary["union_rows"] == budget(0.3, 1200)
    else:
        assert np.bincount(blocks, weights=selected).tolist() == \
            largest_remainder(budget(RATIO, 1200), sizes).tolist()


def test_strata_keep_their_shares_to_the_row(pool, tmp_path):
    paths, _, language = pool
    summary = run_select(SelectConfig(input=paths, output=tmp_path / "out", method="quality-topk",
                                      select_ratio=RATIO, block_size=150, partition="neighbourhood",
                                      partition_sample=300, stratify="language"))
    values, sizes = np.unique(language, return_counts=True)
    shares = largest_remainder(budget(RATIO, 1200), sizes)
    assert {s["value"]: s["selected"] for s in summary["strata"]} == dict(zip(values, shares))
    table = pq.read_table(summary["output"])
    blocks, selected = table.column("block").to_numpy(), table.column("selected").to_numpy()
    for value, share in zip(values, shares):  # each stratum's share over its rows in each block
        mine = language == value
        assert np.bincount(blocks[mine], weights=selected[mine], minlength=8).tolist() == \
            largest_remainder(share, np.bincount(blocks[mine], minlength=8)).tolist()


def test_a_neighbourhood_block_is_a_region_a_random_one_a_sample_of_all(pool, tmp_path):
    """Eight well-apart clusters in eight blocks: a random block draws its rows from every
    cluster, a neighbourhood block most of them from its one or two largest (balanced cuts part the larger
    clusters)."""
    paths, cluster, _ = pool

    def outside_two_largest(partition: str) -> np.ndarray:
        """Each block's share of rows outside its two largest clusters."""
        out = tmp_path / partition
        table = pq.read_table(run_select(SelectConfig(input=paths, output=out,
                                                      method="quality-topk", select_ratio=RATIO,
                                                      block_size=150,
                                                      partition=partition))["output"])
        blocks = table.column("block").to_numpy()
        counts = np.sort([np.bincount(cluster[blocks == b], minlength=CLUSTERS)
                          for b in range(8)], axis=1)
        return counts[:, :-2].sum(axis=1) / counts.sum(axis=1)

    assert outside_two_largest("neighbourhood").max() < 0.2 < 0.4 < outside_two_largest(
        "random").min()


def test_the_plan_is_the_seeds(pool, tmp_path):
    paths, _, _ = pool

    def plan(name: str, seed: int) -> pa.Table:
        run_select(SelectConfig(input=paths, output=tmp_path / name, method="quality-topk",
                                select_ratio=RATIO, block_size=150, seed=seed,
                                partition="neighbourhood", partition_sample=100))
        return pq.read_table(tmp_path / name / "plan.parquet")

    first = plan("a", 0)
    assert plan("b", 0).equals(first)
    assert not plan("c", 1).equals(first)  # another seed samples other rows to fit the cuts on


def test_a_killed_block_rerun_gives_the_uninterrupted_selection(pool, tmp_path):
    paths, _, _ = pool
    out = tmp_path / "out"
    options = dict(block_size=150, partition="neighbourhood", partition_sample=300)
    before = pq.read_table(run_select(SelectConfig(input=paths, output=out, method="joint-greedy",
                                                   select_ratio=RATIO, **options))["output"])
    (out / "blocks" / "00003.parquet").unlink()  # as if block 3's task had been killed
    (out / "logs" / "blocks" / "completions" / "00003").unlink()
    again = run_select(SelectConfig(input=paths, output=out, method="joint-greedy",
                                    select_ratio=RATIO, **options))
    assert pq.read_table(again["output"]).equals(before)


def test_one_block_is_the_whole_input_whatever_the_partition(pool, tmp_path):
    paths, _, _ = pool
    chosen = [pq.read_table(run_select(SelectConfig(
        input=paths, output=tmp_path / p, method="quality-topk", select_ratio=RATIO,
        partition=p))["output"]) for p in ("random", "neighbourhood")]
    assert chosen[0].equals(chosen[1])


def test_rows_no_cut_can_part_are_refused_naming_the_partition(tmp_path):
    """Rows sharing one feature vector cannot be cut into neighbourhoods: refused, nothing
    written."""
    data = Dataset(np.arange(300, dtype=np.int64), np.linspace(0, 5, 300, dtype=np.float32),
                   np.ones((300, 4), np.float32))
    paths = shards(data, tmp_path / "in")
    out = tmp_path / "out"
    with pytest.raises(UserError, match="^--partition neighbourhood: .* blocks would hold no row"):
        run_select(SelectConfig(input=paths, output=out, method="quality-topk", select_ratio=RATIO,
                                block_size=100, partition="neighbourhood"))
    assert not out.exists()
    run_select(SelectConfig(input=paths, output=out, method="quality-topk", select_ratio=RATIO,
                            block_size=100))  # random blocks take them


@pytest.mark.parametrize("flags, flag", [
    (["--partition", "kmeans"], "argument --partition: invalid choice: 'kmeans'"),
    (["--partition", "neighbourhood", "--partition_sample", "0"], "--partition_sample 0:"),
    (["--partition", "neighbourhood", "--partition_sample", "1201"], "--partition_sample 1201:"),
    (["--partition_sample", "300"], "--partition_sample sizes"),
])
def test_bad_partition_flags_are_one_line_before_any_work(pool, tmp_path, capsys, flags, flag):
    paths, _, _ = pool
    out = tmp_path / "out"
    try:  # a value outside the flag's choices is the parser's refusal, the others the stage's
        code = main(["select", "--input", *paths, "--output", str(out), "--method",
                     "quality-topk", "--block_size", "150", *flags])
    except SystemExit as refused:
        code = refused.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and flag in err and len(err.splitlines()) == 1
    assert not out.exists()

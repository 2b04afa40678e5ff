"""--stratify: the budget split over a column's values to the row, each stratum chosen by the
selector within it, ids kept; the column reader's errors; the pipeline's block plan."""

import json
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, write_shard

from datamask.cli import main
from datamask.data import Dataset, budget, read_column
from datamask.errors import UserError
from datamask.selectors import make_selector
from datamask.stratify import largest_remainder, select_stratified, stratum_budgets
from reproduce.pipeline.select import SelectConfig, run_select

TINY_LEARNER = {"n_epochs": 5, "n_rollout": 4, "partial": 1.0, "stop_every": 0,
                "progress": False, "device": "cpu"}


def exact_shares(total: int, sizes: list[int]) -> list[int]:
    """The largest-remainder split written out with fractions, the reference."""
    quotas = [Fraction(total * n, sum(sizes)) for n in sizes]
    share = [int(q) for q in quotas]
    ranked = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - share[i]), i))
    for i in ranked[:total - sum(share)]:
        share[i] += 1
    return share


@pytest.mark.parametrize("total, sizes, expected", [
    (10, [50, 30, 15, 5], [5, 3, 2, 0]),  # 5, 3, 1.5, 0.5: the tie at .5 goes to the earlier
    (3, [1, 1, 1, 97], [0, 0, 0, 3]),  # strata of budget 0
    (7, [10, 5, 0, 3], [4, 2, 0, 1]),  # an empty part keeps 0
    (25, [33, 33, 34], [8, 8, 9]),  # 8.25, 8.25, 8.5
    (1, [2, 2], [1, 0]),
])
def test_largest_remainder_gives_the_shares_to_the_row(total, sizes, expected):
    assert largest_remainder(total, sizes).tolist() == expected == exact_shares(total, sizes)


def test_largest_remainder_is_floor_or_ceiling_and_sums_to_the_budget():
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = rng.integers(0, 60, rng.integers(1, 8)).tolist()
        sizes[0] += 1
        total = int(rng.integers(0, sum(sizes) + 1))
        share = largest_remainder(total, sizes)
        assert share.tolist() == exact_shares(total, sizes)
        exact = np.array([Fraction(total * n, sum(sizes)) for n in sizes])
        assert share.sum() == total
        assert all(int(q) <= s <= int(q) + 1 for q, s in zip(exact, share))


def strata_data(n: int = 150, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    """Rows with uneven strata, interleaved: 'a' 60%, 'b' 30%, 'c' 8%, 'd' 2% (3 rows)."""
    data = gaussian_data(n, 6, seed)
    values = np.random.default_rng(seed + 1).choice(["a", "b", "c"], n, p=[0.62, 0.3, 0.08])
    values[[7, 70, 140]] = "d"
    return data, values


@pytest.mark.parametrize("ratio", [0.1, 0.13, 0.25, 0.5])
def test_counts_per_stratum_equal_the_input_shares_and_ids_stay(ratio):
    data, values = strata_data()
    selection = select_stratified(make_selector("random", seed=3), data, values, ratio, "domain")
    k = budget(ratio, len(data))
    names, sizes = np.unique(values, return_counts=True)
    expected = exact_shares(k, sizes.tolist())
    got = [int(selection.selected[values == name].sum()) for name in names]
    assert got == expected and sum(got) == k
    assert np.array_equal(selection.ids, data.ids)  # every id, once, in input order
    assert selection.params["stratify"] == "domain"
    assert [s["budget"] for s in selection.params["strata"]] == expected


def test_a_stratum_of_budget_zero_selects_nothing_and_a_full_one_everything():
    data, values = strata_data()
    budgets = stratum_budgets(values, budget(0.1, len(data)))
    assert budgets["d"] == 0
    selection = select_stratified(make_selector("quality-topk"), data, values, 0.1, "domain")
    assert not selection.selected[values == "d"].any()
    # a budget of all a stratum's rows takes them all without running the selector
    full = select_stratified(make_selector("quality-topk"), data, values, 0.1, "domain",
                             budgets={"a": 2, "d": 3})
    assert full.selected[values == "d"].all() and full.selected[values == "a"].sum() == 2
    assert not full.selected[(values == "b") | (values == "c")].any()


@pytest.mark.parametrize("name, params", [
    ("random", {"seed": 5}),
    ("quality-topk", {}),
    ("datamask", TINY_LEARNER),
    ("pair-greedy", {"seed": 1, "device": "cpu"}),
])
def test_each_stratum_picks_what_the_selector_picks_on_it_alone(name, params):
    data, values = strata_data()
    values = np.where(values == "d", "c", values)  # every stratum large enough for a greedy
    selection = select_stratified(make_selector(name, **params), data, values, 0.2, "domain")
    budgets = stratum_budgets(values, budget(0.2, len(data)))
    for value, k in budgets.items():
        rows = np.flatnonzero(values == value)
        alone = make_selector(name, **params).select(
            Dataset(data.ids[rows], data.quality[rows], data.features[rows]), k / len(rows))
        assert alone.selected.sum() == k
        assert np.array_equal(selection.selected[rows], alone.selected)
        assert np.array_equal(selection.score[rows], alone.score)


def test_integer_strata_and_a_selector_error_names_the_stratum():
    data = gaussian_data(60, 4, 2)
    values = np.repeat([3, 1, 2], [40, 15, 5])
    selection = select_stratified(make_selector("quality-topk"), data, values, 0.2, "cluster")
    assert [s["value"] for s in selection.params["strata"]] == [1, 2, 3]
    assert [s["budget"] for s in selection.params["strata"]] == [3, 1, 8]
    # DiSF needs 2 selected rows; stratum 2 has a budget of 1
    learner = make_selector("datamask", algorithm="DiSF", **TINY_LEARNER)
    with pytest.raises(UserError, match=r"--stratify cluster: stratum 2 \(5 rows, budget 1\).*"
                                        r"DiSF needs at least 2"):
        select_stratified(learner, data, values, 0.2, "cluster")


def test_column_reader_names_the_file_and_column(tmp_path):
    data = gaussian_data(10, 3, 0)
    good = write_shard(tmp_path / "good.parquet", data,
                       domain=pa.array(list("aabbccddee")).dictionary_encode())
    assert read_column([good, good], "domain").tolist() == list("aabbccddee") * 2
    with pytest.raises(UserError, match=r"good.parquet: missing column 'lang' \(--stratify"):
        read_column([good], "lang")
    nulls = write_shard(tmp_path / "nulls.parquet", data,
                        domain=pa.array(["a"] * 6 + [None] + ["b"] * 3))
    with pytest.raises(UserError, match=r"nulls.parquet: column 'domain' is null at row 6"):
        read_column([good, nulls], "domain")
    floats = write_shard(tmp_path / "floats.parquet", data, domain=pa.array(np.ones(10)))
    with pytest.raises(UserError, match=r"floats.parquet: column 'domain' must hold integers "
                                        r"or text"):
        read_column([floats], "domain")
    ints = write_shard(tmp_path / "ints.parquet", data, domain=pa.array(np.arange(10)))
    with pytest.raises(UserError, match="integers in some .* and text in others"):
        read_column([good, ints], "domain")


def test_cli_stratifies_a_baseline_and_refuses_a_missing_column(tmp_path, capsys):
    data, values = strata_data()
    shard = write_shard(tmp_path / "in.parquet", data, domain=pa.array(values))
    out = tmp_path / "out.parquet"
    assert main(["baseline", "quality-topk", "--input", str(shard), "--output", str(out),
                 "--select_ratio", "0.25", "--stratify", "domain"]) == 0
    table = pq.read_table(out)
    assert np.array_equal(table.column("chunk_id").to_numpy(), data.ids)
    selected = table.column("selected").to_numpy(zero_copy_only=False)
    counts = stratum_budgets(values, budget(0.25, len(data)))
    assert {v: int(selected[values == v].sum()) for v in counts} == counts
    capsys.readouterr()
    missing = tmp_path / "none.parquet"
    assert main(["select", "--input", str(shard), "--output", str(missing), "--stratify",
                 "lang", "--no_progress"]) == 2
    assert "in.parquet: missing column 'lang'" in capsys.readouterr().err
    assert not missing.exists()


def test_learner_cli_keeps_one_checkpoint_per_stratum(tmp_path, capsys):
    data, values = strata_data()
    values = np.where(values == "d", "c", values)
    shard = write_shard(tmp_path / "in.parquet", data, domain=pa.array(values))
    out = tmp_path / "sel.parquet"
    flags = ["select", "--input", str(shard), "--output", str(out), "--select_ratio", "0.2",
             "--stratify", "domain", "--n_epochs", "5", "--n_rollout", "4", "--stop_every", "0",
             "--device", "cpu", "--no_progress"]
    assert main(flags) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["value"] for s in summary["strata"]] == ["a", "b", "c"]
    assert sorted(p.name for p in tmp_path.glob("sel.parquet.ckpt*")) == [
        f"sel.parquet.ckpt.stratum{i}" for i in range(3)]
    first = pq.read_table(out)
    assert main(flags + ["--resume"]) == 0  # each stratum resumes its own finished checkpoint
    assert pq.read_table(out).equals(first)


def write_pool(tmp_path, sizes=(130, 70)):
    """A tiny prepared pool (two shards) and its FineWeb shards with an uneven `domain`."""
    rng = np.random.default_rng(4)
    prepared, fineweb = tmp_path / "prepared", tmp_path / "fineweb"
    prepared.mkdir()
    fineweb.mkdir()
    domains = []
    for shard, n in enumerate(sizes):
        ids = [f"<urn:doc:{shard}-{i}>" for i in range(n)]
        domain = rng.choice(["news", "docs", "forum"], n, p=[0.55, 0.35, 0.1])
        domain[:2] = "rare"
        domains += domain.tolist()
        data = gaussian_data(n, 5, shard)
        data.ids += 1000 * shard
        write_shard(prepared / f"{shard:02d}.parquet", data, id=pa.array(ids))
        # the FineWeb shard in another row order: the lookup goes by id
        order = rng.permutation(n)
        pq.write_table(pa.table({"text": ["x"] * n, "id": np.array(ids)[order],
                                 "domain": domain[order]}), fineweb / f"{shard:02d}.parquet")
    return prepared, fineweb, np.array(domains)


def test_pipeline_stratifies_the_whole_input_across_blocks(tmp_path):
    prepared, fineweb, domains = write_pool(tmp_path)
    out = tmp_path / "select"
    summary = run_select(SelectConfig(input=[str(prepared)], output=out, method="quality-topk",
                                      select_ratio=0.15, block_size=60, stratify="domain",
                                      strata_from=[str(fineweb)]))
    selection = pq.read_table(out / "selection.parquet")
    selected = selection.column("selected").to_numpy(zero_copy_only=False)
    assert len(selection) == len(domains)
    expected = stratum_budgets(domains, budget(0.15, len(domains)))
    assert {v: int(selected[domains == v].sum()) for v in expected} == expected
    assert {s["value"]: s["selected"] for s in summary["strata"]} == expected
    assert summary["blocks"] == 4 and summary["selected"] == budget(0.15, len(domains))


def test_pipeline_names_a_missing_stratify_column(tmp_path):
    prepared, fineweb, _ = write_pool(tmp_path, sizes=(20,))
    with pytest.raises(UserError, match=r"00.parquet: the prepared shard has no column "
                                        r"'domain'.*--strata_from"):
        run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "a", method="random",
                                select_ratio=0.2, stratify="domain"))
    with pytest.raises(UserError, match=r"00.parquet: missing column 'lang' \(--stratify"):
        run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "b", method="random",
                                select_ratio=0.2, stratify="lang", strata_from=[str(fineweb)]))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

"""`make length-bias` (reproduce/experiments/length_bias.py): each selection's mean length over
its corpus's, per seed, the chance band a random selection stays in, and the figure drawn from
the results file."""

import json

import numpy as np
import pyarrow as pa
import pytest

from conftest import write_shard
from datamask.data import Dataset
from datamask.examples.synthetic import synthetic_dataset
from figures.plots import main as figures_main
from reproduce.experiments import length_bias
from reproduce.experiments.records import LengthBiasResult, read_result


def prepared(folder, n=300, seed=0, shards=2):
    """Prepared shards whose `text_length` rises with quality, cut in `shards` files."""
    data = synthetic_dataset(n, dim=16, n_clusters=6, seed=seed)
    rank = np.argsort(np.argsort(data.quality))
    lengths = (100 + 10 * rank).astype(np.int64)
    folder.mkdir(parents=True)
    for i, rows in enumerate(np.array_split(np.arange(n), shards)):
        part = Dataset(data.ids[rows], data.quality[rows], data.features[rows])
        write_shard(folder / f"{i:03d}.parquet", part,
                    text_length=pa.array(lengths[rows]))
    return data, lengths


def test_the_chance_band_is_a_random_selections_spread():
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(7, 0.6, 400)
    k = 40
    ratios = [lengths[rng.choice(400, k, replace=False)].mean() / lengths.mean()
              for _ in range(4000)]
    assert length_bias.chance_half_width(lengths, k) == pytest.approx(1.96 * np.std(ratios),
                                                                        rel=0.05)
    # every row selected: no spread at all
    assert length_bias.chance_half_width(lengths, 400) == 0


def test_a_selection_is_long_or_short_only_when_every_seed_is_beyond_the_band():
    assert length_bias.against_chance([1.2, 1.15], 0.1) == "long"
    assert length_bias.against_chance([0.8, 0.85], 0.1) == "short"
    assert length_bias.against_chance([0.8, 0.95], 0.1) == "within chance"
    assert length_bias.against_chance([1.1], 0.1) == "within chance"  # on the edge: not beyond


def test_each_selection_per_seed_its_ratio_over_the_corpus_mean(tmp_path):
    data, lengths = prepared(tmp_path / "pool")
    prepared(tmp_path / "bbc", n=200, seed=1, shards=1)
    out = tmp_path / "results" / "length-bias"
    result = length_bias.main(["--pool", str(tmp_path / "pool"), "--bbc", str(tmp_path / "bbc"),
                               "--selections", "quality-topk", "random", "pair-greedy", "mmr",
                               "--seeds", "0", "1", "--output", str(out)])
    assert [(c.name, c.rows, c.selected) for c in result.corpora] == [("pool", 300, 30),
                                                                        ("bbc", 200, 20)]
    pool = result.of("pool")
    # quality-topk and mmr take no seed: one run each; the others one per seed
    assert [(r.selection, r.seed) for r in result.runs if r.corpus == "pool"] == [
        ("quality-topk", None), ("random", 0), ("random", 1), ("pair-greedy", 0),
        ("pair-greedy", 1), ("mmr", None)]
    # the rows are read in file order across shards: the 30 best by quality are the 30 longest
    best = np.argsort(-data.quality)[:30]
    assert pool["quality-topk"].ratio_mean == pytest.approx(lengths[best].mean() / lengths.mean())
    assert pool["quality-topk"].against_chance == "long"
    assert (pool["quality-topk"].role, pool["pair-greedy"].role, pool["random"].role) == (
        "quality", "diversity", "reported")
    assert pool["random"].distinct == 2 and pool["quality-topk"].distinct == 1
    assert pool["random"].ratio_min <= pool["random"].ratio_mean <= pool["random"].ratio_max
    back = read_result(str(out), "length-bias")
    assert isinstance(back, LengthBiasResult) and back.to_json() == result.to_json()
    table = (out / "length-bias.md").read_text()
    assert "## pool (300 rows, 30 selected;" in table and "## bbc (200 rows, 20 selected;" in table
    topk = f"{100 * pool['quality-topk'].ratio_mean:.0f}%"
    assert f"| quality-topk | quality | 1 (1) | {topk} | long |" in table
    written = figures_main(["--results", str(tmp_path / "results"), "--pipeline",
                            str(tmp_path / "none"), "--output", str(tmp_path / "fig")])
    assert {p.rsplit("/", 1)[1] for p in written} == {"5-length-bias.png", "5-length-bias.pdf"}


@pytest.mark.parametrize("case", ["missing", "no_length"])
def test_a_corpus_without_prepared_rows_is_refused_by_its_flag(tmp_path, capsys, case):
    folder = tmp_path / "pool"
    if case == "no_length":
        folder.mkdir()
        write_shard(folder / "000.parquet", synthetic_dataset(20, dim=4, seed=0))
    with pytest.raises(SystemExit) as stop:
        length_bias.main(["--corpora", "pool", "--pool", str(folder), "--output",
                          str(tmp_path / "out")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--pool {folder}" in err and ("no prepared Parquet files" in err
                                          if case == "missing" else "'text_length'" in err)
    assert not (tmp_path / "out").exists()


def test_the_results_file_names_what_ran(tmp_path):
    prepared(tmp_path / "bbc", n=120, shards=1)
    length_bias.main(["--corpora", "bbc", "--bbc", str(tmp_path / "bbc"), "--selections",
                      "quality-topk", "--output", str(tmp_path / "out")])
    record = json.loads((tmp_path / "out" / "length-bias.json").read_text())
    assert record["experiment"] == "length-bias"
    assert record["config"]["corpora"] == ["bbc"] and record["config"]["ratio"] == 0.1

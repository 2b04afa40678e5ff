"""`make bench-blocks` on a tiny synthetic family: every run keeps every row id once, the planted
pairs are counted as the selections and block plans say, each selector's one-block run is its own
share 1, a rerun reuses the records, and bad flags are refused in one line. Times are not
checked."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from datamask.data import ID_COLUMN, Dataset, budget, read_dataset
from datamask.examples.synthetic import synthetic_dataset
from reproduce.bench import blocks as bench
from reproduce.pipeline.prepare import chunk_id

ROWS = 2_000
SELECTORS = ["random", "quality-topk", "datamask:n_epochs=50"]


def flags(work, *more):
    return ["--work", str(work), "--families", "synthetic", "--synthetic_rows", str(ROWS),
            "--blocks", "1", "2", "4", "--selectors", *SELECTORS, *more]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench-blocks") / "work"
    assert bench.main(flags(work)) == 0
    return work, json.loads((work / "results.json").read_text())


def selection(work, spec, b, family="synthetic"):
    return pq.read_table(work / "select" / family / bench.slug(spec) / f"B{b}" /
                         "selection.parquet")


def test_every_run_keeps_every_row_id_once_and_the_originals_unchanged(run):
    work, results = run
    inputs = work / "inputs" / "synthetic"
    original = read_dataset([inputs / "rows.parquet"])
    made = synthetic_dataset(ROWS, bench.SYNTHETIC_DIM, bench.SYNTHETIC_CLUSTERS, seed=0)
    assert np.array_equal(original.ids, made.ids)
    copies = read_dataset([inputs / "planted.parquet"])
    everything = np.concatenate([original.ids, copies.ids])
    assert len(np.unique(everything)) == len(everything) == ROWS + 100
    assert [(r["selector"], r["B"]) for r in results["runs"]] == [
        (s, b) for s in SELECTORS for b in (1, 2, 4)]
    for r in results["runs"]:
        table = selection(work, r["selector"], r["B"])
        assert np.array_equal(table.column(ID_COLUMN).to_numpy(), everything)
        assert r["selected"] == sum(table.column("selected").to_pylist()) == budget(0.25, 2100)
        assert r["blocks"] == r["B"] == len(set(table.column("block").to_pylist()))


def test_the_copies_are_noisy_unit_copies_with_new_ids(run):
    work, _ = run
    inputs = work / "inputs" / "synthetic"
    original = read_dataset([inputs / "rows.parquet"])
    copies = read_dataset([inputs / "planted.parquet"])
    pairs = np.array(json.loads((inputs / "family.json").read_text())["pairs"])
    assert pairs.shape == (100, 2) and len(np.unique(pairs[:, 0])) == 100
    assert np.array_equal(pairs[:, 1], ROWS + np.arange(100))
    sources = original.features[pairs[:, 0]]
    assert np.allclose(np.linalg.norm(copies.features, axis=1), 1, atol=1e-5)
    cosine = np.sum(sources * copies.features, axis=1)
    # noise 0.01 per dimension in 64 dimensions: about 1 / sqrt(1 + 64 * 1e-4)
    assert np.all(cosine > 0.99) and np.all(cosine < 1)
    assert np.array_equal(copies.quality, original.quality[pairs[:, 0]])
    strings = pq.read_table(inputs / "planted.parquet").column("id").to_pylist()
    assert strings[0] == f"synthetic-0-{pairs[0, 0]}{bench.COPY_SUFFIX}"
    assert copies.ids.tolist() == [chunk_id(s) for s in strings]


def test_the_planted_pairs_are_counted_as_the_selection_and_plan_say(run):
    work, results = run
    pairs = np.array(json.loads((work / "inputs" / "synthetic" / "family.json")
                             .read_text())["pairs"])
    for r in results["runs"]:
        table = selection(work, r["selector"], r["B"])
        chosen = np.array(table.column("selected").to_pylist())
        block = np.array(table.column("block").to_pylist())
        plan = pq.read_table(work / "select" / "synthetic" / bench.slug(r["selector"]) /
                             f"B{r['B']}" / "plan.parquet")
        planned = dict(zip(plan.column(ID_COLUMN).to_pylist(), plan.column("block").to_pylist()))
        ids = table.column(ID_COLUMN).to_pylist()
        split = [planned[ids[a]] != planned[ids[b]] for a, b in pairs]
        both = [chosen[a] and chosen[b] for a, b in pairs]
        assert r["pairs"] == 100
        assert r["pairs_split"] == sum(split) == np.sum(block[pairs[:, 0]] != block[pairs[:, 1]])
        assert r["both_selected"] == sum(both)
        assert r["both_selected_split"] == sum(s and k for s, k in zip(split, both))
        n = ROWS + 100
        assert r["both_selected_random"] == pytest.approx(
            100 * r["selected"] * (r["selected"] - 1) / (n * (n - 1)))
    one_block = [r for r in results["runs"] if r["B"] == 1]
    assert one_block and all(r["pairs_split"] == 0 for r in one_block)
    assert all(r["pairs_split"] > 0 for r in results["runs"] if r["B"] == 4)


def test_pair_counts_on_a_selection_made_by_hand():
    pairs = np.array([[0, 5], [1, 6], [2, 7], [3, 8]])
    selected = np.array([1, 1, 0, 1, 0, 1, 1, 1, 0, 0], bool)
    block = np.array([0, 0, 1, 1, 0, 1, 0, 0, 1, 0])
    assert bench.pair_counts(pairs, selected, block) == {
        "pairs": 4, "pairs_split": 2, "both_selected": 2, "both_selected_split": 1,
        "both_selected_random": 4 * 6 * 5 / (10 * 9)}


def test_each_one_block_run_is_its_own_share_and_the_scores_are_reports(run):
    work, results = run
    for r in results["runs"]:
        if r["B"] == 1:
            assert r["share_of_one_block"] == 1.0
        assert r["metric"] == "Pair_simi"  # datamask's default; --metric for the others
    data = read_dataset(sorted((work / "inputs" / "synthetic").glob("*.parquet"))[::-1])
    report = bench.make_report(data, 0.25, 0.5, ["Pair_simi"], 10_000, 0)
    datamask = [r for r in results["runs"] if r["selector"] == SELECTORS[2]]
    for r in datamask:
        chosen = np.array(selection(work, r["selector"], r["B"]).column("selected").to_pylist())
        assert r["joint"] == pytest.approx(bench.score(report, "Pair_simi", chosen)["joint"])
        # every B selects the full budget, so the report's own scoring agrees
        assert r["joint"] == pytest.approx(report(chosen)["joint_Pair_simi"], rel=1e-5)
    assert datamask[0]["joint"] > 0  # the learner beats a random selection's mean
    top = [r for r in results["runs"] if r["selector"] == "quality-topk"]
    assert top[0]["quality"] >= max(r["quality"] for r in top)  # blocks can only cost quality
    text = (work / "results.md").read_text()
    assert "## synthetic (2,100 rows, 100 planted pairs)" in text
    assert "\n| datamask:n_epochs=50 | Pair_simi | 4 | 525 | 525 | 525 | " in text


def test_a_rerun_reuses_every_record(run, capsys):
    work, results = run
    capsys.readouterr()
    assert bench.main(flags(work)) == 0
    out = capsys.readouterr().out
    assert out.count("(done before)") == len(results["runs"])
    again = json.loads((work / "results.json").read_text())
    assert again["runs"] == results["runs"]


def test_facility_is_skipped_past_max_rows_and_scored_on_a_cover_sample(tmp_path):
    work = tmp_path / "work"
    assert bench.main(["--work", str(work), "--families", "synthetic", "--synthetic_rows", "300",
                       "--blocks", "1", "2", "--selectors", "random", "--metric", "Facility",
                       "--max_rows", "Pair_simi=10", "--cover_rows", "100"]) == 0
    results = json.loads((work / "results.json").read_text())
    assert [r["metric"] for r in results["runs"]] == ["Facility", "Facility"]
    data = read_dataset([work / "inputs" / "synthetic" / n for n in ("rows.parquet",
                                                                     "planted.parquet")])
    report = bench.make_report(data, 0.25, 0.5, ["Facility"], 100, 0)
    assert len(report.metrics["Facility"].cover) == 100
    assert bench.main(["--work", str(tmp_path / "skip"), "--families", "synthetic",
                       "--synthetic_rows", "300", "--blocks", "1", "--selectors", "random",
                       "--metric", "Facility", "--max_rows", "Facility=100"]) == 0
    skipped = json.loads((tmp_path / "skip" / "results.json").read_text())
    assert skipped["runs"] == [] and skipped["skipped"][0]["why"] == "--max_rows Facility=100"


@pytest.mark.parametrize("more, named", [
    (["--blocks", "2", "4"], "--blocks"),
    (["--blocks", "0"], "--blocks"),
    (["--planted", "0"], "--planted"),
    (["--noise", "-1"], "--noise"),
    (["--max_rows", "Cosine=5"], "--max_rows"),
    (["--select_ratio", "1.5"], "--select_ratio"),
    (["--lamb", "2"], "--lamb"),
    (["--selectors", "nosuch"], "nosuch"),
    (["--selectors", "datamask:steps=3"], "steps"),
    (["--families", "pool", "--pool", "/nonexistent/pool"], "--pool"),
    (["--synthetic_rows", "20", "--select_ratio", "0.01"], "--select_ratio"),
    (["--merge_ratio", "0.2"], "--merge_ratio 0.2"),
    (["--merge_ratio", "0.5", "--merge_partitions", "kmeans"], "--merge_partitions"),
    (["--merge_ratio", "0.5", "--merge_blocks", "8"], "--merge_blocks"),
    (["--partitions", "kmeans"], "--partitions"),
    (["--dedup_thresholds", "1.5"], "--dedup_thresholds"),
    (["--dedup_thresholds", "0.9", "--dedup_blocks", "8"], "--dedup_blocks"),
])
def test_bad_flags_are_refused_in_one_line_before_any_work(tmp_path, capsys, more, named):
    work = tmp_path / "work"
    assert exit_status(flags(work, *more)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err
    assert not work.exists()


def exit_status(argv) -> int:
    """main's status: a flag the parser refuses exits (SystemExit), a UserError returns 2."""
    try:
        return bench.main(argv)
    except SystemExit as exit:
        return exit.code


def test_merge_arms_run_at_the_merge_blocks_with_each_partition(tmp_path):
    work = tmp_path / "work"
    assert bench.main(flags(work, "--selectors", "datamask:n_epochs=50", "--merge_ratio", "0.5",
                            "--merge_partitions", "neighbourhood", "random",
                            "--merge_blocks", "4")) == 0
    runs = json.loads((work / "results.json").read_text())["runs"]
    assert [(r["arm"], r["B"]) for r in runs if r["merge_ratio"]] == [
        ("datamask:n_epochs=50, merge 0.5 neighbourhood", 4),
        ("datamask:n_epochs=50, merge 0.5 random", 4)]
    plain = {r["B"]: r["selected"] for r in runs if r["merge_ratio"] is None}
    assert all(r["selected"] == plain[4] for r in runs if r["merge_ratio"])


def test_partition_arms_run_each_block_count_above_one_on_neighbourhood_blocks(tmp_path):
    """The one-block run once, read as share 1 by both partitions; above it the neighbourhood arm's
    blocks are the select stage's neighbourhood plan, and select the same count as random ones."""
    work = tmp_path / "work"
    assert bench.main(flags(work, "--selectors", "quality-topk", "--partitions", "neighbourhood",
                            "random")) == 0
    runs = json.loads((work / "results.json").read_text())["runs"]
    assert [(r["arm"], r["partition"], r["B"]) for r in runs] == [
        ("quality-topk", "random", 1), ("quality-topk", "random", 2), ("quality-topk", "random", 4),
        ("quality-topk, neighbourhood blocks", "neighbourhood", 2),
        ("quality-topk, neighbourhood blocks", "neighbourhood", 4)]
    assert len({r["selected"] for r in runs}) == 1
    folder = work / "select" / "synthetic" / bench.slug("quality-topk, neighbourhood blocks")
    config = json.loads((folder / "B4" / "config.json").read_text())
    assert config["partition"] == "neighbourhood"
    assert not selection(work, "quality-topk", 4).column("block").equals(
        pq.read_table(folder / "B4" / "selection.parquet").column("block"))


def test_the_merge_verdict_reads_random_blocks_only():
    """Runs on neighbourhood blocks (a plain one and a merge arm, better shares) leave the verdict,
    which compares merge arms against random blocks' one round, as it was without them."""
    def record(merge, share, partition=None):
        return {"family": "pool", "selector": "s", "B": 8, "merge_ratio": merge,
                "merge_partition": merge and "random", "select_wall_s": 1.0,
                "share_of_one_block": share, "both_selected": 0,
                **({"partition": partition} if partition else {})}

    runs = [record(None, 0.5), record(0.5, 0.7)]
    before = bench.merge_verdict(runs, 8, ["pool"], "pool", 0.01, 2.0)
    after = bench.merge_verdict(runs + [record(None, 0.9, "neighbourhood"),
                                        record(0.5, 0.95, "neighbourhood")],
                                8, ["pool"], "pool", 0.01, 2.0)
    assert after == before and after["worst_share"] == 0.7 and after["rows"][0]["one"] == runs[0]


def test_plant_copies_never_touches_the_originals_and_noise_zero_copies_exactly():
    rng = np.random.default_rng(1)
    features = bench.unit_rows(rng.standard_normal((40, 8)))
    data = Dataset(np.arange(40, dtype=np.int64), rng.random(40).astype(np.float32), features)
    before = data.features.copy()
    copies, strings, originals = bench.plant_copies(
        data, np.array([f"doc{i}" for i in range(40)], dtype=object), 0.1, 0.0, seed=3)
    assert np.array_equal(data.features, before) and len(copies) == 4
    assert np.allclose(copies.features, features[originals], atol=1e-6)
    assert strings.tolist() == [f"doc{i}{bench.COPY_SUFFIX}" for i in originals]
    again = bench.plant_copies(data, np.array([f"doc{i}" for i in range(40)], dtype=object), 0.1,
                               0.0, seed=3)
    assert np.array_equal(again[2], originals)


def test_the_pool_family_is_prepared_here_and_planted_beside_its_shards(pool, tmp_path, capsys):
    """The text path on the tests' small pool: prepare (MiniLM at 32 tokens) into --work, the
    prepared shards kept as prepare wrote them, the copies in a shard of their own."""
    work = tmp_path / "work"
    argv = ["--work", str(work), "--families", "pool", "--pool", str(pool[0]),
            "--max_seq_length", "32", "--blocks", "1", "2", "--selectors", "random"]
    assert bench.main(argv) == 0
    prepared = sorted((work / "prepared" / "pool").glob("*.parquet"))
    rows = pq.read_table(prepared[0]).num_rows
    before = [f.stat().st_mtime_ns for f in prepared]
    table = selection(work, "random", 2, "pool").to_pandas()
    n = len(pool[2])
    copies = round(0.05 * n)
    assert len(table) == n + copies and table[ID_COLUMN].is_unique
    assert set(table["id"][:n]) == {r["id"] for r in pool[2]}
    assert (table["id"][n:].str.endswith(bench.COPY_SUFFIX)).all()
    capsys.readouterr()
    assert bench.main(argv) == 0  # prepared and planted once: the rerun reuses both
    assert "(done before)" in capsys.readouterr().out
    assert [f.stat().st_mtime_ns for f in prepared] == before and rows > 0


def test_the_bbc_shards_are_written_once_into_work(tmp_path):
    shards = bench.text_shards("bbc", tmp_path, None)
    files = sorted(shards.glob("*.parquet"))
    stamps = [f.stat().st_mtime_ns for f in files]
    assert sum(pq.read_metadata(f).num_rows for f in files) == 2_003  # 2,225 less 222 held out
    assert bench.text_shards("bbc", tmp_path, None) == shards
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bbc"]


def test_a_dedup_arm_selects_from_what_the_keep_list_keeps_and_no_planted_pair_twice(tmp_path):
    """The synthetic copies (noise 0.01 in 64 dimensions: cosine about 0.997 to their originals)
    are removed by dedup at 0.99 before select, so no pair has both rows kept, while the plain arm
    keeps some; removed rows sit in no block and count toward no budget; the shares read the plain
    one-block run."""
    work = tmp_path / "work"
    assert bench.main(["--work", str(work), "--families", "synthetic", "--synthetic_rows", "600",
                       "--blocks", "1", "2", "--selectors", "datamask:n_epochs=50",
                       "--dedup_thresholds", "0.99", "--dedup_blocks", "2"]) == 0
    runs = {(r["arm"], r["B"]): r for r in
            json.loads((work / "results.json").read_text())["runs"]}
    assert sorted(runs) == [("datamask:n_epochs=50", 1), ("datamask:n_epochs=50", 2),
                            ("datamask:n_epochs=50, dedup 0.99", 2)]
    plain, dedup = runs["datamask:n_epochs=50", 2], runs["datamask:n_epochs=50, dedup 0.99", 2]
    assert plain["both_selected"] > 0 and dedup["both_selected"] == 0
    assert dedup["dedup_removed"] >= dedup["pairs"] == 30
    table = selection(work, "datamask:n_epochs=50, dedup 0.99", 2)
    removed = table.column("block").to_numpy() == -1
    assert removed.sum() == dedup["dedup_removed"] and not table.column(
        "selected").to_numpy()[removed].any()
    assert dedup["selected"] == round(0.25 * (630 - dedup["dedup_removed"]))
    assert dedup["pairs_split"] == 0  # a removed copy is in no block, so splits no pair
    assert runs["datamask:n_epochs=50", 1]["share_of_one_block"] == 1.0


def test_the_partition_rule_moves_a_metric_to_neighbourhood_blocks_only_past_the_tie():
    def record(metric, partition, share, family="pool"):
        return {"family": family, "selector": metric, "metric": metric, "B": 32,
                "merge_ratio": None, "partition": partition, "share_of_one_block": share}

    runs = [record("Facility", "random", 0.4), record("Facility", "neighbourhood", 0.96),
            record("Facility", "random", 0.5, "bbc"),
            record("Facility", "neighbourhood", 0.97, "bbc"),
            record("Pair_simi", "random", 0.98), record("Pair_simi", "neighbourhood", 0.985)]
    verdicts = {v["metric"]: v for v in bench.partition_verdict(runs)}
    assert verdicts["Facility"] == {"metric": "Facility", "blocks": 32, "random": 0.4,
                                    "neighbourhood": 0.96, "default": "neighbourhood",
                                    "goal": 0.95, "met": True}
    assert verdicts["Pair_simi"]["default"] == "random" and not verdicts["Pair_simi"]["met"]


def test_a_run_the_selector_refuses_is_listed_as_skipped_and_the_others_go_on(tmp_path):
    """DiSF's probes need at least two rows per mask: blocks of 20 rows at ratio 0.25 leave it
    one, so that run is refused (one line, named with its B) and the one-block run stands."""
    work = tmp_path / "work"
    assert bench.main(["--work", str(work), "--families", "synthetic", "--synthetic_rows", "600",
                       "--blocks", "1", "32",
                       "--selectors", "datamask:algorithm=DiSF,n_epochs=20"]) == 0
    results = json.loads((work / "results.json").read_text())
    assert [r["B"] for r in results["runs"]] == [1]
    assert [(s["B"], "--partial" in s["why"]) for s in results["skipped"]] == [(32, True)]
    assert "at B=32" in (work / "results.md").read_text()

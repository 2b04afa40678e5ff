"""`make bench-dedup` on the tiny pool: the copies are planted as asked (exact, a few words
changed, a vector at the asked cosine), no input is rewritten, both MinHash libraries' runs find
the exact and embedding copies, the counts add up and the verdict follows them, a rerun redoes
nothing, and bad flags are refused in one line. Times are not checked."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from datamask.data import FEATURE_COLUMN
from reproduce.bench import dedup as bench

DOCUMENTS = 300


def flags(pool_dir, work, *more):
    return ["--pool", str(pool_dir), "--work", str(work), "--documents", str(DOCUMENTS),
            "--shard_documents", "150", "--planted", "0.05", "--workers", "1", *more]


@pytest.fixture(scope="module")
def run(pool, small_static, tmp_path_factory):
    work = tmp_path_factory.mktemp("bench-dedup") / "work"
    assert bench.main(flags(pool[0], work, "--static_model", f"static:{small_static}")) == 0
    return work, json.loads((work / "results.json").read_text())


def test_each_kind_is_planted_and_the_counts_add_up(run):
    work, out = run
    plants = json.loads((work / "copies" / "plants.json").read_text())
    assert [p["kind"] for p in plants["pairs"]] == list(bench.KINDS) * 5
    assert len({p["original"] for p in plants["pairs"]}) == 15  # drawn without replacement
    assert out["rows"] == DOCUMENTS + 15
    corpus = out["corpus"]
    assert corpus["distinct"] <= DOCUMENTS - 15 - corpus["text_repeated"] + 15
    assert set(out["libraries"]) == {"datatrove", "rensa"}
    for library in out["libraries"].values():
        assert [row["kind"] for row in library["kinds"]] == list(bench.KINDS)
        for row in library["kinds"]:
            assert row["planted"] == 5
            assert row["both_kept"] + row["copy_removed"] + row["original_removed"] >= 5
        assert library["distinct"]["documents"] == corpus["distinct"]
    assert set(out["stages"]) == {"prepare", "dedup-datatrove", "dedup-rensa"}


@pytest.mark.parametrize("library", ["datatrove", "rensa"])
def test_exact_and_embedding_copies_inside_one_region_are_found(run, library):
    _, out = run
    found = out["libraries"][library]
    assert found["dedup"]["regions"] == 1
    # one region: no cut, no guest; the rows MinHash kept
    assert found["dedup"]["routed_rows"] == out["rows"] - found["dedup"]["removed"]["minhash"]
    assert {"signatures", "region_plans", "pairs", "merge"} <= set(found["dedup"]["round_task_s"])
    assert found["dedup"]["hash_precision"] == {"datatrove": 64, "rensa": 32}[library]
    kinds = {row["kind"]: row for row in found["kinds"]}
    assert kinds["exact"]["both_kept"] == 0 and kinds["embedding"]["both_kept"] == 0
    assert found["pairs_both_kept"] == kinds["words"]["both_kept"]


def test_the_pairs_between_the_libraries_and_the_verdict_follow_the_counts(run):
    _, out = run
    found, libraries, verdict = out["between"], out["libraries"], out["verdict"]
    for at, row in enumerate(found["kinds"]):
        whole = {name: lib["kinds"][at]["both_kept"] for name, lib in libraries.items()}
        # pairs found by one run only differ the two runs' counts of pairs kept whole
        assert whole["rensa"] - whole["datatrove"] == (row["found_by_datatrove_only"]
                                                      - row["found_by_rensa_only"])
    assert found["kept_by_rensa_removed_by_datatrove"] == sum(
        row["found_by_datatrove_only"] for row in found["kinds"])
    minhash = {name: lib["dedup"]["removed"]["minhash"] for name, lib in libraries.items()}
    assert minhash == {"datatrove": found["minhash_removed_by_both"]
                       + found["minhash_removed_by_datatrove_only"],
                       "rensa": found["minhash_removed_by_both"]
                       + found["minhash_removed_by_rensa_only"]}
    tests = ("no_pair_kept_that_datatrove_removes", "distinct_removed_within_slack",
             "signatures_speedup_at_least")
    assert verdict["no_pair_kept_that_datatrove_removes"] == (
        found["kept_by_rensa_removed_by_datatrove"] == 0)
    assert verdict["default"] == ("rensa" if all(verdict[t] for t in tests) else "datatrove")
    shingles = out["shingles"]
    assert shingles["documents"] == DOCUMENTS and 0 < shingles["mean_jaccard"] <= 1
    assert (shingles["documents_differing"] == 0) == (shingles["share_shingles_differing"] == 0)


def test_copies_are_what_their_kind_says(run):
    work, _ = run
    plants = json.loads((work / "copies" / "plants.json").read_text())
    texts = {}
    for path in sorted((work / "input" / "fineweb").glob("*.parquet")):
        table = pq.read_table(path, columns=["id", "text"])
        texts.update(zip(table.column("id").to_pylist(), table.column("text").to_pylist()))
    vectors = {}
    for path in sorted((work / "planted").glob("*.parquet")):
        table = pq.read_table(path, columns=["id", FEATURE_COLUMN])
        vectors.update(zip(table.column("id").to_pylist(),
                           map(np.array, table.column(FEATURE_COLUMN).to_pylist())))
    for pair in plants["pairs"]:
        original, copy = texts[pair["original"]], texts[pair["copy"]]
        assert len(original.split()) >= bench.MIN_WORDS
        if pair["kind"] == "exact":
            assert copy == original
        elif pair["kind"] == "words":
            a, b = original.split(" "), copy.split(" ")
            assert len(a) == len(b) and 1 <= sum(x != y for x, y in zip(a, b)) <= 3
        else:
            assert copy != original
            u, v = vectors[pair["original"]], vectors[pair["copy"]]
            cosine = u @ v / np.linalg.norm(u) / np.linalg.norm(v)
            assert cosine == pytest.approx(0.995, abs=1e-5)


def test_no_input_is_rewritten(run):
    work, _ = run
    for path in sorted((work / "corpus" / "fineweb").glob("*.parquet")):
        assert os.path.samefile(path, work / "input" / "fineweb" / path.name)
    for path in sorted((work / "prepared").glob("*.parquet")):
        if path.name != bench.PLANTED_SHARD:
            assert os.path.samefile(path, work / "planted" / path.name)
    assert not os.path.samefile(work / "prepared" / bench.PLANTED_SHARD,
                                work / "planted" / bench.PLANTED_SHARD)


def test_a_rerun_redoes_nothing(run, pool, small_static, capsys):
    work, out = run
    assert bench.main(flags(pool[0], work, "--static_model", f"static:{small_static}")) == 0
    printed = capsys.readouterr().out
    assert "bench-dedup: prepare: done before" in printed
    for library in ("datatrove", "rensa"):
        assert f"bench-dedup: dedup-{library}: done before" in printed
    again = json.loads((work / "results.json").read_text())
    for name, library in again["libraries"].items():
        assert {k: library[k] for k in ("kinds", "distinct")} == {
            k: out["libraries"][name][k] for k in ("kinds", "distinct")}


def test_one_library_alone_is_timed_without_the_comparison(run, pool, small_static, capsys,
                                                           tmp_path):
    """--minhash rensa on the same work: its stages are done before, the results hold its
    library alone, and neither the libraries' comparison nor the plan's verdict is claimed."""
    work, out = run
    assert bench.main(flags(pool[0], work, "--static_model", f"static:{small_static}",
                            "--minhash", "rensa", "--results", str(tmp_path / "one"))) == 0
    assert "bench-dedup: dedup-rensa: done before" in capsys.readouterr().out
    alone = json.loads((tmp_path / "one" / "results.json").read_text())
    assert set(alone["libraries"]) == {"rensa"} and set(alone["stages"]) == {"prepare",
                                                                            "dedup-rensa"}
    assert alone["verdict"] is None and alone["between"] is None and alone["shingles"] is None
    assert alone["libraries"]["rensa"]["kinds"] == out["libraries"]["rensa"]["kinds"]
    text = (tmp_path / "one" / "results.md").read_text()
    assert "no verdict" in text and "Verdict" not in text


def test_a_rerun_with_other_copies_is_refused_before_any_work(run, pool, capsys):
    work, _ = run
    before = sorted(p.name for p in work.iterdir())
    assert bench.main(flags(pool[0], work, "--copy_cosine", "0.99")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--work" in err and "0.995" in err, err
    assert sorted(p.name for p in work.iterdir()) == before


def test_change_words_replaces_words_with_others_of_the_text():
    rng = np.random.default_rng(0)
    text = " ".join(f"w{i}" for i in range(60))
    changed = bench.change_words(text, 3, rng)
    a, b = text.split(" "), changed.split(" ")
    assert sum(x != y for x, y in zip(a, b)) == 3 and set(b) <= set(a)


@pytest.mark.parametrize("more, words", [
    (["--planted", "0"], "--planted"),
    (["--planted", "0.6"], "--planted"),
    (["--planted", "0.001"], "fewer than one copy of each kind"),
    (["--copy_cosine", "1"], "--copy_cosine"),
    (["--threshold", "0"], "--threshold"),
    (["--threshold", "1.5"], "--threshold"),
    (["--changed_words", "0"], "--changed_words"),
    (["--static_model", "all-MiniLM-L6-v2"], "--static_model must be static or static:DIR"),
    (["--static_model", "static:/no/such/folder"], "--static_model static:/no/such/folder: no such"),
])
def test_bad_flags_are_refused_in_one_line_before_any_work(pool, tmp_path, capsys, more, words):
    work = tmp_path / "work"
    try:
        code = bench.main(flags(pool[0], work, *more))
    except SystemExit as exit_:  # argparse's refusals
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert not work.exists()


def test_routing_counts_the_guests_and_finds_every_pair_at_the_full_margin(run, tmp_path,
                                                                           capsys):
    """On the run's rows: one region routes each row once and separates nothing; with more
    regions the full margin leaves no planted pair apart, and a smaller one routes fewer rows;
    the pair search with the bound finds what comparing in full finds."""
    from reproduce.bench import routing

    work, out = run
    assert routing.main(["--work", str(work), "--regions", "1", "2", "4", "--margins", "1",
                         "0.25", "--pair_regions", "2", "--results", str(tmp_path / "routing")]) == 0
    found = json.loads((tmp_path / "routing" / "results.json").read_text())
    assert found["rows"] == out["rows"]
    (search,) = found["rows_by_region"][0]["pair_search"]  # one region: every row its own
    assert search["own_rows"] == search["rows"] == out["rows"] and search["same_pairs"]
    assert search["pairs"] >= 2 * 10  # the exact and embedding copies, each pair both ways
    one, *more = found["rows_by_region"]
    assert one["split"] == 0 and [m["routed_per_row"] for m in one["margins"]] == [1.0, 1.0]
    for row in more:
        full, quarter = row["margins"]
        assert full["pairs_apart"] == 0 and row["pairs"] == 5
        assert full["routed_per_row"] >= quarter["routed_per_row"] > 1
    assert "| 4 |" in (tmp_path / "routing" / "results.md").read_text()
    planted = json.loads((work / "copies" / "plants.json").read_text())["pairs"]
    for kind, threshold in (("exact", "0.99"), ("words", "0.01")):  # every pair of the kind
        assert routing.main(["--work", str(work), "--regions", "2", "--kind", kind,
                             "--threshold", threshold, "--results", str(tmp_path / kind)]) == 0
        found = json.loads((tmp_path / kind / "results.json").read_text())
        assert found["kind"] == kind and found["planted"] == sum(p["kind"] == kind
                                                                 for p in planted)
        assert found["rows_by_region"][0]["pairs"] == found["planted"] > 0
    assert routing.main(["--work", str(work), "--regions", "4", "--cells", "tree", "kmeans",
                         "--results", str(tmp_path / "cells")]) == 0
    tree, kmeans = json.loads((tmp_path / "cells" / "results.json").read_text())["rows_by_region"]
    assert (tree["cells"], kmeans["cells"]) == ("tree", "kmeans")
    assert kmeans["margins"][0]["pairs_apart"] == 0 and kmeans["margins"][0]["pair_work"] > 0
    capsys.readouterr()
    for more, words in ((["--margins", "0"], "--margins 0"), (["--regions", "10000"], "--regions"),):
        assert routing.main(["--work", str(work), *more]) == 2
        assert words in capsys.readouterr().err
    assert routing.main(["--work", str(tmp_path)]) == 2
    assert "no planted" in capsys.readouterr().err

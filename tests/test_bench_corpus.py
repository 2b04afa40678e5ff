"""`make bench-corpus` on the tiny pool: the whole run writes every stage's row and the
projection, the corpus has the documents asked for with unique ids and the pool's lengths, a rerun
redoes only what is missing, and bad flags are refused in one line. Times are not checked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from reproduce.bench import corpus as bench

DOCUMENTS = 400
STAGES = ["corpus", "prepare", "select", "tokenizer", "tokenize", "export",
          "prepare slice, transformer"]


def flags(pool_dir, work, *more):
    return ["--pool", str(pool_dir), "--work", str(work), "--documents", str(DOCUMENTS),
            "--shard_documents", "150", "--slice", "20", "--workers", "1", *more]


@pytest.fixture(scope="module")
def run(pool, small_static, tmp_path_factory):
    """One whole run (with the suite's small static model); the selection it made, read before
    any test touches the folder."""
    work = tmp_path_factory.mktemp("bench-corpus") / "work"
    assert bench.main(flags(pool[0], work, "--static_model", f"static:{small_static}")) == 0
    return work, pq.read_table(work / "select" / "selection.parquet")


def test_the_run_writes_every_stage_and_the_projection(run):
    work, _ = run
    results = json.loads((work / "results.json").read_text())
    assert list(results["stages"]) == STAGES
    for row in results["stages"].values():
        assert row["wall_s"] > 0 and row["peak_rss_largest_mb"] > 0 and not row["resumed"]
    assert results["stages"]["prepare"]["documents"] == DOCUMENTS
    assert results["stages"]["prepare slice, transformer"]["documents"] == 20
    assert results["select"]["rows"] == DOCUMENTS
    assert results["tokenize"]["documents"] == results["select"]["selected"]
    exported = json.loads((work / "export" / "summary.json").read_text())
    assert exported["counts"]["selected"] == results["select"]["selected"]
    table = (work / "results.md").read_text()
    for name in STAGES:
        assert f"\n| {name} | " in table, name
    for part in ("static embedding", "transformer embedding", "quality scorer"):
        assert part in table
    projection = results["projection"]
    assert projection["documents"] == 1e8
    assert set(projection["node_hours"]) == {
        "prepare (static model, heuristic scorer)", "select (datamask, select's defaults)",
        "tokenizer training (once)", "tokenize (the selected documents)",
        "export (the selected documents as a dataset)"}
    assert projection["total_node_hours"] > 0
    assert "Projection (computed, not measured): 1e+08 documents" in table


def test_the_corpus_has_the_documents_ids_and_lengths_asked(pool, run):
    work, _ = run
    corpus = pa.concat_tables([pq.read_table(f) for f in
                               sorted((work / "corpus" / "fineweb").glob("*.parquet"))])
    assert corpus.num_rows == DOCUMENTS
    assert len(set(corpus.column("id").to_pylist())) == DOCUMENTS
    assert {"text", "id", "dump", "url", "language", "domain"} <= set(corpus.column_names)
    _, _, rows = pool
    pool_lengths = np.array([len(r["text"]) for r in rows])
    lengths = pc.utf8_length(corpus.column("text")).to_numpy()
    q = [0.1, 0.25, 0.5, 0.75, 0.9]
    assert np.allclose(np.quantile(lengths, q), np.quantile(pool_lengths, q), rtol=0.15)
    # the text is the pool's own sentences
    pool_text = "\n".join(r["text"] for r in rows)
    sentence = corpus.column("text")[0].as_py().split(". ")[0]
    assert len(sentence) > 20 and sentence in pool_text


def test_a_shard_removed_is_rebuilt_as_it_was_and_the_others_kept(pool, tmp_path):
    folder = tmp_path / "corpus"
    bench.build_corpus(pool[0], folder, 300, 100, seed=1)
    shards = sorted((folder / "fineweb").glob("*.parquet"))
    before = {p.name: (pq.read_table(p), p.stat().st_mtime_ns) for p in shards}
    shards[1].unlink()
    bench.build_corpus(pool[0], folder, 300, 100, seed=1)
    for path in shards:
        table, mtime = before[path.name]
        assert pq.read_table(path).equals(table)
        assert (path.stat().st_mtime_ns == mtime) == (path != shards[1])


def test_a_rerun_redoes_only_the_stage_whose_output_is_gone(pool, small_static, run):
    work, selection = run
    records = {p.name: p.read_bytes() for p in (work / "stages").glob("*.json")}
    shutil.rmtree(work / "select")
    assert bench.main(flags(pool[0], work, "--static_model", f"static:{small_static}")) == 0
    after = {p.name: p.read_bytes() for p in (work / "stages").glob("*.json")}
    assert after.keys() == records.keys()
    assert [name for name in records if after[name] != records[name]] == ["select.json"]
    assert pq.read_table(work / "select" / "selection.parquet").equals(selection)


@pytest.mark.parametrize("bad, message", [
    (["--documents", "0"], "argument --documents: must be at least 1, got 0"),
    (["--documents", "-5"], "argument --documents: must be at least 1, got -5"),
])
def test_bad_counts_are_refused_in_one_line(pool, tmp_path, capsys, bad, message):
    with pytest.raises(SystemExit) as exit_:
        bench.main(flags(pool[0], tmp_path / "work", *bad))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "work").exists()


def test_a_work_folder_that_is_a_file_is_refused_in_one_line(pool, tmp_path, capsys):
    work = tmp_path / "work"
    work.write_text("not a folder")
    assert bench.main(flags(pool[0], work)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--work {work} is a file" in err
    assert work.read_text() == "not a folder"


def test_a_work_folder_holding_another_corpus_is_refused_in_one_line(pool, tmp_path, capsys):
    work = tmp_path / "work"
    bench.build_corpus(pool[0], work / "corpus", DOCUMENTS, 150, seed=0)
    assert bench.main(flags(pool[0], work, "--shard_documents", "100")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "holds a corpus of other settings" in err
    assert not (work / "stages").exists()

"""The score stage (reproduce/pipeline/score.py) and prepare's --scores: scoring on its own, then
embedding with the scores read back, gives prepare's shards; the shards do not depend on the
task count; a killed run reruns only what is missing; what does not fit is refused before any
work. Three BBC shards of a few dozen rows each, embedded with the suite's small static model."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.errors import UserError
from reproduce.cli import main
from reproduce.pipeline.bbc import write_bbc_fineweb
from reproduce.pipeline.prepare import PrepareConfig, Scorer, chunk_id, prepare
from reproduce.pipeline.score import ScoreConfig, run_score

pytest.importorskip("model2vec.distill")

SCORE_KEY = b"datamask.score"


@pytest.fixture(scope="module")
def fineweb(tmp_path_factory):
    root = tmp_path_factory.mktemp("score-fineweb")
    write_bbc_fineweb(root / "fineweb", root / "tasks", n_shards=3, limit=120, seed=2)
    return root / "fineweb"


@pytest.fixture(scope="module")
def scored(fineweb, tmp_path_factory):
    """The shards scored in one task and in three."""
    root = tmp_path_factory.mktemp("scored")
    return {tasks: (root / f"tasks{tasks}", run_score(ScoreConfig(
        input=[fineweb], output=root / f"tasks{tasks}", quality="heuristic", tasks=tasks,
        no_progress=True))) for tasks in (1, 3)}


def prepared(fineweb, output, small_static, **settings):
    return prepare(PrepareConfig(input=[fineweb], output=output, no_progress=True,
                                 embedding_model=f"static:{small_static}", **settings))


def shards(folder):
    return sorted(folder.glob("*.parquet"))


def test_score_shards_hold_each_input_row_in_order_and_name_the_scorer(fineweb, scored):
    out, summary = scored[1]
    assert [p.name for p in shards(out)] == [p.name for p in shards(fineweb)]
    for source in shards(fineweb):
        table = pq.read_table(out / source.name)
        ids = pq.read_table(source, columns=["id"]).column("id").to_pylist()
        assert table.column_names == ["chunk_id", "id", "quality_score"]
        assert table.column("id").to_pylist() == ids
        assert table.column("chunk_id").to_pylist() == [chunk_id(i) for i in ids]
        record = json.loads(pq.read_schema(out / source.name).metadata[SCORE_KEY])
        assert record["config"] == {"quality": "datatrove-heuristics"}
    assert summary["scored"] == summary["rows"] > 100
    # a rerun of a finished run scores nothing and starts no executor
    again = run_score(ScoreConfig(input=[fineweb], output=out, quality="heuristic",
                                  no_progress=True))
    assert again["scored"] == 0 and again["rows"] == summary["rows"]


def test_one_and_three_tasks_write_the_same_score_shards(scored):
    (one, first), (three, second) = scored[1], scored[3]
    for path in shards(one):
        assert pq.read_table(three / path.name).replace_schema_metadata(None).equals(
            pq.read_table(path).replace_schema_metadata(None))
    assert first["files"] == second["files"]


def test_prepare_with_scores_equals_prepare_scoring_itself(fineweb, scored, small_static,
                                                           tmp_path):
    scores, _ = scored[3]
    alone, with_scores = tmp_path / "alone", tmp_path / "with-scores"
    first = prepared(fineweb, alone, small_static, quality="heuristic")
    second = prepared(fineweb, with_scores, small_static, scores=scores)
    assert second["quality"] == first["quality"] == "datatrove-heuristics"
    for path in shards(alone):
        ours, theirs = pq.read_table(with_scores / path.name), pq.read_table(path)
        assert ours.column_names == theirs.column_names
        for column in theirs.column_names:
            assert ours.column(column).equals(theirs.column(column)), column
        assert ours.column("quality_score").equals(pq.read_table(scores / path.name)
                                                   .column("quality_score"))
    records = [json.loads((out / "prepare.json").read_text())["files"]
               for out in (alone, with_scores)]
    assert [{n: r["config"] for n, r in rec.items()} for rec in records] == \
        [{n: r["config"] for n, r in records[0].items()}] * 2
    # the same scorer to prepare's reuse: each way finds the other's shards up to date
    assert prepared(fineweb, alone, small_static, scores=scores)["embedded"] == 0
    assert prepared(fineweb, with_scores, small_static, quality="heuristic")["embedded"] == 0


def copy_of(scores, tmp_path):
    out = tmp_path / "scores"
    shutil.copytree(scores, out)
    return out


def refused_before_work(fineweb, small_static, tmp_path, scores, *words):
    out = tmp_path / "prepared"
    with pytest.raises(UserError) as err:
        prepared(fineweb, out, small_static, scores=scores)
    assert all(w in str(err.value) for w in words), err.value
    assert not out.exists()  # refused before any embedding: nothing written


def test_prepare_refuses_a_missing_shorter_or_other_score_shard(fineweb, scored, small_static,
                                                                tmp_path):
    scores = copy_of(scored[1][0], tmp_path)
    first, second, third = shards(scores)
    table = pq.read_table(second)
    pq.write_table(table.slice(1).replace_schema_metadata(table.schema.metadata), second)
    refused_before_work(fineweb, small_static, tmp_path, scores, str(second), "rows")
    ids = table.column("id").to_pylist()
    swapped = table.set_column(1, "id", pa.array([ids[1], ids[0], *ids[2:]]))
    pq.write_table(swapped.replace_schema_metadata(table.schema.metadata), second)
    refused_before_work(fineweb, small_static, tmp_path, scores, str(second), "row 0", ids[1])
    third.unlink()
    refused_before_work(fineweb, small_static, tmp_path, scores, str(third), "no score shard")
    pq.write_table(table.replace_schema_metadata(None), third)
    refused_before_work(fineweb, small_static, tmp_path, scores, str(third), "not a shard")


def test_the_stages_refuse_what_would_overwrite_or_contradict_before_any_work(
        fineweb, scored, small_static, tmp_path, capsys):
    inside = fineweb / "scores"
    with pytest.raises(UserError, match="inside the input folder"):
        run_score(ScoreConfig(input=[fineweb], output=inside, quality="heuristic"))
    assert not inside.exists()
    scores = scored[1][0]
    with pytest.raises(UserError, match="--output .* is the input --scores"):
        prepared(fineweb, scores, small_static, scores=scores)
    with pytest.raises(UserError, match="--scores .* leave out --quality"):
        PrepareConfig(input=[fineweb], output=tmp_path / "p", scores=scores, quality="heuristic")
    # a prepared folder is not the score stage's to write over
    prepared_folder = tmp_path / "prepared"
    prepared(fineweb, prepared_folder, small_static, quality="heuristic")
    stamps = {p: p.stat().st_mtime_ns for p in prepared_folder.rglob("*")}
    assert main(["score", "--input", str(fineweb), "--output", str(prepared_folder)]) == 2
    assert "did not write; score into a new folder" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in prepared_folder.rglob("*")} == stamps


def test_a_killed_run_rescores_only_what_is_missing(fineweb, scored, tmp_path):
    """As a kill -9 leaves it: score.json not written, task 1 without its marker and shard, and
    what its killed writer left half-written beside the shard."""
    done, first = scored[3]
    out = copy_of(done, tmp_path)
    (out / "score.json").unlink()
    (out / "logs" / "tasks" / "completions" / "00001").unlink()
    victim = shards(out)[1]
    victim.unlink()
    half_written = out / f".{victim.name}.0badc0de.tmp"
    half_written.write_bytes(b"PAR1")
    untouched = {p: p.stat().st_mtime_ns for p in shards(out)}
    again = run_score(ScoreConfig(input=[fineweb], output=out, quality="heuristic", tasks=3,
                                  no_progress=True))
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    assert not half_written.exists()
    assert {n: c["scored"] for n, c in again["files"].items()} == \
        {n: c["rows"] if n == victim.name else 0 for n, c in first["files"].items()}
    assert pq.read_table(victim).replace_schema_metadata(None).equals(
        pq.read_table(done / victim.name).replace_schema_metadata(None))


class Failing(Scorer):
    """A scorer that fails on its first rows, as a scorer's bug would."""

    name = "failing"

    def __call__(self, table, path):
        raise ValueError("broken scorer")


def test_a_failed_run_leaves_no_file(fineweb, tmp_path):
    out = tmp_path / "scores"
    with pytest.raises(ValueError, match="broken scorer"):  # one worker: the task's own error
        run_score(ScoreConfig(input=[fineweb], output=out, no_progress=True), scorer=Failing())
    assert not out.exists()

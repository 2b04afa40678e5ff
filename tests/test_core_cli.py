"""The command line end to end on generated Parquet, and the data contract's errors."""

import json
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.cli import main
from datamask.data import read_dataset, write_dataset
from datamask.errors import UserError
from datamask.synthetic import synthetic_dataset


@pytest.fixture
def shard(tmp_path):
    data = synthetic_dataset(400, dim=8, n_clusters=5, seed=0)
    path = tmp_path / "in.parquet"
    write_dataset(path, data.ids, data.quality, data.features)
    return path, data


def test_select_end_to_end(tmp_path, shard, capsys):
    path, data = shard
    out = tmp_path / "out.parquet"
    code = main(["select", "--input", str(path), "--output", str(out), "--algorithm", "DiSF",
                 "--select_ratio", "0.1", "--n_epochs", "30", "--no_progress", "--report"])
    assert code == 0
    table = pq.read_table(out)
    assert table.schema.names == ["chunk_id", "selected", "score"]
    assert table.schema.field("selected").type == pa.bool_()
    np.testing.assert_array_equal(table.column("chunk_id").to_numpy(), data.ids)  # input order
    assert table.column("selected").to_numpy().sum() == 40
    summary = json.loads(capsys.readouterr().out)
    assert summary["selected"] == 40 and set(summary["metrics"]) >= {"quality", "joint_DiSF"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_train_mask_module_takes_the_original_flags(tmp_path, shard):
    path, data = shard
    out = tmp_path / "out.parquet"
    log = tmp_path / "log.jsonl"
    subprocess.run([sys.executable, "-m", "datamask.train_mask", "--input", str(path),
                    "--output", str(out), "--device", "cpu", "--n_epochs", "12",
                    "--algorithm", "Facility", "--partial", "0.5", "--max_lr", "5",
                    "--min_lr", "0.5", "--n_rollout", "32", "--select_ratio", "0.2",
                    "--init", "quality", "--lamb", "0.3", "--log_jsonl", str(log),
                    "--no_progress"], check=True, capture_output=True)
    assert pq.read_table(out).column("selected").to_numpy().sum() == 80
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(12))
    # the original's linear decay, although `datamask select` defaults to a constant rate
    assert records[0]["lr"] == 5 and records[-1]["lr"] == pytest.approx(0.5)


def test_several_inputs_and_variable_length_lists(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for part in range(2):
        ids = np.arange(part * 50, part * 50 + 50)
        table = pa.table({"doc": ids, "q": rng.random(50),
                          "emb": pa.array([list(v) for v in rng.random((50, 4))])})
        paths.append(tmp_path / f"part{part}.parquet")
        pq.write_table(table, paths[-1])
    data = read_dataset(paths, "doc", "q", "emb")
    assert data.features.shape == (100, 4) and data.features.flags.c_contiguous
    np.testing.assert_array_equal(data.ids, np.arange(100))
    out = tmp_path / "out.parquet"
    assert main(["baseline", "quality-topk", "--input", *map(str, paths), "--output", str(out),
                 "--id_column", "doc", "--quality_column", "q", "--feature_column", "emb"]) == 0
    assert pq.read_table(out).column_names == ["doc", "selected", "score"]


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["select", "--help"])
    text = capsys.readouterr().out
    for flag in ("--input", "--output", "--device", "--n_epochs", "--algorithm", "--partial",
                 "--max_lr", "--min_lr", "--n_rollout", "--select_ratio", "--init", "--lamb",
                 "--seed", "--prune_ratio", "--lr_schedule", "--logprob", "--readoff", "--log_jsonl",
                 "--scale_on"):
        assert flag in text


def _write(tmp_path, name, **columns):
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize("make_input,message", [
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], feature_arr=[[0.0], [1.0]]),
     "missing column 'quality_score'"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0, 1.0], [1.0]]), "inconsistent length.*row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0], [float("nan")]]), "NaN or inf at row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, float("nan")],
                      feature_arr=[[0.0], [1.0]]), "quality column 'quality_score'.*row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 1], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0], [1.0]]), "duplicate id 1"),
    (lambda t: (t / "b.txt").write_text("not parquet") and t / "b.txt", "not a readable Parquet"),
])
def test_bad_input_is_named_and_writes_nothing(tmp_path, capsys, make_input, message):
    path = make_input(tmp_path)
    out = tmp_path / "out.parquet"
    code = main(["select", "--input", str(path), "--output", str(out), "--no_progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and re.search(message, err), err
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_duplicate_ids_across_files_are_refused(tmp_path, shard):
    path, _ = shard
    with pytest.raises(UserError, match="duplicate id .* and "):
        read_dataset([path, path])


def test_missing_output_folder_is_refused_before_work(tmp_path, shard, capsys):
    path, _ = shard
    assert main(["select", "--input", str(path), "--output", str(tmp_path / "no" / "o.parquet")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("flags,message", [
    (["--select_ratio", "0"], "--select_ratio must lie strictly between 0 and 1"),
    (["--select_ratio", "1"], "--select_ratio must lie strictly between 0 and 1"),
    (["--select_ratio", "0.001"], "selects zero rows"),
    (["--n_rollout", "1"], "--n_rollout must be at least 2"),
    (["--partial", "0"], r"--partial must lie in \(0, 1\]"),
    (["--partial", "1.2"], r"--partial must lie in \(0, 1\]"),
    (["--max_lr", "inf"], "--max_lr and --min_lr must be finite"),
    (["--lr_schedule", "linear", "--min_lr", "nan"], "--max_lr and --min_lr must be finite"),
    (["--min_lr", "0.5"], "--min_lr has no effect with --lr_schedule constant"),
    (["--algorithm", "Nope"], "argument --algorithm: invalid choice"),
    (["--checkpoint_every", "-1"], "--checkpoint_every must be 0 or more"),
])
def test_bad_flags_are_named_and_write_nothing(tmp_path, shard, capsys, flags, message):
    path, _ = shard
    out = tmp_path / "out.parquet"
    try:
        code = main(["select", "--input", str(path), "--output", str(out), "--no_progress", *flags])
    except SystemExit as exit_:  # argparse's own refusals (choices) exit 2 as well
        code = exit_.code
    assert code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.glob("out.parquet*"))


def test_empty_file_and_unknown_baseline(tmp_path, shard, capsys):
    empty = _write(tmp_path, "empty.parquet", chunk_id=pa.array([], pa.int64()),
                   quality_score=pa.array([], pa.float32()),
                   feature_arr=pa.array([], pa.list_(pa.float32())))
    out = tmp_path / "out.parquet"
    assert main(["select", "--input", str(empty), "--output", str(out)]) == 2
    assert f"{empty}: the file has no rows" in capsys.readouterr().err
    path, _ = shard
    assert main(["baseline", "no-such", "--input", str(path), "--output", str(out)]) == 2
    assert "unknown selector 'no-such'" in capsys.readouterr().err
    assert not out.exists()


def test_feature_length_must_agree_across_files(tmp_path):
    a = _write(tmp_path, "a.parquet", chunk_id=[1], quality_score=[0.1], feature_arr=[[0.0, 1.0]])
    b = _write(tmp_path, "b.parquet", chunk_id=[2], quality_score=[0.1], feature_arr=[[0.0]])
    with pytest.raises(UserError, match=f"{b}: column 'feature_arr' has 1-d vectors at row 0"):
        read_dataset([a, b])

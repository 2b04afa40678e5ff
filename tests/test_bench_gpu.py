"""`make gpu-bench` without a GPU: no CUDA is one line, exit 0 and nothing written; bad flags are
one line and exit 2; --parts select runs without a pool; and the code path runs on the CPU (--device cpu) at tiny sizes, the
transformer cut to 16 tokens and the suite's small static model (conftest's SMALL_STATIC, 16
dimensions), writing results.json with every part. Rates are not checked."""

from __future__ import annotations

import json

import pytest
import torch

from reproduce.bench import gpu as bench


def refused(capsys, argv, *words):
    """Exit 2 (argparse's or a UserError's) with one line on stderr holding `words`."""
    try:
        code = bench.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the bench would measure")
def test_without_cuda_it_says_so_in_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default results folder is relative
    assert bench.main(["--pool", str(tmp_path / "no-pool"), "--results",
                       str(tmp_path / "results")]) == 0
    captured = capsys.readouterr()
    assert captured.out == bench.NO_CUDA + "\n" and captured.err == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--documents", "--select_rows", "--batch_sizes",
                                  "--prepare_documents"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_counts_below_one_are_refused_in_one_line(tmp_path, capsys, flag, value):
    refused(capsys, ["--pool", str(tmp_path), "--device", "cpu", flag, value],
            f"argument {flag}: must be at least 1, got {value}")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_or_wrong_pool_and_a_bad_device_are_refused_in_one_line(tmp_path, capsys):
    refused(capsys, ["--device", "cpu"], "--pool")
    refused(capsys, ["--pool", str(tmp_path / "none"), "--device", "cpu"], "--pool",
            "no such folder")
    (tmp_path / "folder").mkdir()
    refused(capsys, ["--pool", str(tmp_path / "folder"), "--device", "cpu"], "--pool",
            "not a built pool")
    refused(capsys, ["--pool", str(tmp_path / "folder"), "--device", "mps"], "--device")
    refused(capsys, ["--device", "cpu", "--parts", "whole", "select"], "--parts whole",
            "transformer or static")
    refused(capsys, ["--device", "cpu", "--parts", "select", "gpu"], "--parts")
    refused(capsys, ["--device", "cpu", "--parts", "transformer", "--pool",
                     str(tmp_path / "folder"), "--precisions", "fp16"], "--precision fp16",
            "GPU")
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]


def test_select_alone_needs_no_pool_and_writes_its_part_only(tmp_path):
    results = tmp_path / "results"
    assert bench.main(["--device", "cpu", "--parts", "select", "--select_rows", "300",
                       "--results", str(results)]) == 0
    out = json.loads((results / "results.json").read_text())
    assert out["finished"] and "prepare" not in out and "corpus" not in out
    assert (out["select"]["rows"], out["select"]["selected"]) == (300, 30)


def test_a_cpu_smoke_run_writes_every_part(pool, small_static, tmp_path, capsys):
    results = tmp_path / "results"
    assert bench.main(["--pool", str(pool[0]), "--device", "cpu", "--documents", "40",
                       "--prepare_documents", "20", "--batch_sizes", "8", "300",
                       "--precisions", "fp32", "bf16",
                       "--max_seq_length", "16", "--select_rows", "500",
                       "--static_model", f"static:{small_static}",
                       "--results", str(results), "--work", str(tmp_path / "work")]) == 0
    out = json.loads((results / "results.json").read_text())
    assert out["finished"] and not out["gpu_measurement"]
    assert out["machine"]["device"] == "cpu" and out["machine"]["gpu"] is None
    assert out["corpus"]["documents"] == 40
    prepare = out["prepare"]
    assert (prepare["documents"], prepare["prepare_documents"]) == (40, 20)
    rows = {r["route"]: r for r in prepare["rows"]}
    assert list(rows) == ["transformer fp32, batch 8", "transformer fp32, batch 300",
                          "transformer bf16, batch 8", "transformer bf16, batch 300",
                          "static (distilled)"]
    assert rows["transformer fp32, batch 8"]["chunk"] == 256  # prepare's rows per call
    assert rows["transformer bf16, batch 300"]["chunk"] == 2400  # eight batches a call
    assert rows["transformer bf16, batch 8"]["precision"] == "bf16"
    assert prepare["transformer"]["fitted_batch"] == {"fp32": 32, "bf16": 32}  # the CPU's
    assert (rows["transformer fp32, batch 8"]["dim"], rows["static (distilled)"]["dim"]) == (384, 16)
    for row in rows.values():
        assert row["device"] == "cpu" and row["peak_gpu_mib"] is None
        assert row["embedding_docs_per_s"] > 0 and row["whole_prepare_docs_per_s"] > 0
    select = out["select"]
    assert (select["rows"], select["dim"], select["selected"]) == (500, 384, 50)
    assert select["wall_s"] > 0 and select["steps_run"] >= 0 and select["peak_gpu_mib"] is None
    assert "Gaussian" in select["features"]
    table = (results / "results.md").read_text()
    assert "not a GPU measurement" in table and "runs on the CPU" in table
    assert table in capsys.readouterr().out

"""`make bench-prepare`'s tables on the tiny pool: every row is printed, the backends' rows too
(measured where onnxruntime is installed, else saying so). Times are not checked."""

from __future__ import annotations

import json

import pytest

from datamask.errors import UserError
from reproduce.bench import prepare as bench


def test_every_row_is_printed(pool, tmp_path, capsys):
    out, _, _ = pool
    bench.main(["--pool", str(out), "--work", str(tmp_path), "--repeats", "1", "--workers", "1",
                "--max_seq_length", "32", "--method", "datamask:n_epochs=20", "--seeds", "0", "1",
                "--nodes", "1", "8", "--scorer_documents", "20"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    for start in ("| prepare | 1 |", "| tokenize (", "| embedding (torch fp32) |",
                  "| quality scorer (datatrove-heuristics) |", "| heuristic quality scorer, ",
                  "| datatrove's filters one by one", "| one split per chunk", "| speed-up |",
                  "| encoder parameters counted",
                  "| achieved: 2 x parameters", "| fp32 GEMM (", "| achieved / GEMM |",
                  "| torch fp32, seed 1 (noise between seeds) |", "| onnx", "| onnx-int8",
                  "| 1 |", "| 8 |"):
        assert any(row.startswith(start) for row in rows), start
    assert any(line.startswith("Projection (not a measurement)") for line in lines)


def test_only_scorer_prints_the_scorer_table(pool, tmp_path, capsys):
    out, _, _ = pool
    bench.main(["--pool", str(out), "--work", str(tmp_path), "--repeats", "1", "--only", "scorer",
                "--scorer_documents", "20"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| heuristic quality scorer, 20 documents, median of 1 |")
    assert [row.split(" |")[0] for row in rows[1:]] == [
        "| datatrove's filters one by one (reference_score)",
        "| one split per chunk (HeuristicScorer, empty cache, batches of 256)", "| speed-up",
        "| scores equal to datatrove's, float for float"]
    assert rows[-1].startswith("| scores equal to datatrove's, float for float | 20 of 20 |")


def test_only_tokenize_scale_splits_start_up_from_rate(pool, tmp_path, capsys):
    out, _, _ = pool
    bench.main(["--pool", str(out), "--work", str(tmp_path), "--repeats", "1",
                "--only", "tokenize_scale", "--tokenize_scale", "40", "10"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row.split(" |")[0] for row in rows] == [
        "| tokenize, documents (1 task, 1 worker, median of 1)", "| 10", "| 40",
        "| start-up (the line's value at 0 documents)", "| per document (the line's slope)"]
    summary = json.loads((tmp_path / "scale-40" / "tokens-0" / "summary.json").read_text())
    assert summary["documents"] == 40


@pytest.mark.parametrize("flags", [["--tokenize_scale", "10", "10"],
                                   ["--tokenize_scale", "0", "10"], ["--only", "tokenize_scale"]])
def test_tokenize_scale_refuses_what_it_cannot_fit(flags, tmp_path):
    with pytest.raises(UserError, match="--tokenize_scale|--only"):
        bench.main(["--work", str(tmp_path / "work"), *flags])
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())

"""`make bench-prepare`'s tables on the tiny pool: every row is printed, the backends' rows too
(measured where onnxruntime is installed, else saying so). Times are not checked."""

from __future__ import annotations

from reproduce.bench import prepare as bench


def test_every_row_is_printed(pool, tmp_path, capsys):
    out, _, _ = pool
    bench.main(["--pool", str(out), "--work", str(tmp_path), "--repeats", "1", "--workers", "1",
                "--max_seq_length", "32", "--method", "datamask:n_epochs=20", "--seeds", "0", "1",
                "--nodes", "1", "8"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    for start in ("| prepare | 1 |", "| tokenize (", "| embedding (torch fp32) |",
                  "| quality scorer (datatrove-heuristics) |", "| encoder parameters counted",
                  "| achieved: 2 x parameters", "| fp32 GEMM (", "| achieved / GEMM |",
                  "| torch fp32, seed 1 (noise between seeds) |", "| onnx", "| onnx-int8",
                  "| 1 |", "| 8 |"):
        assert any(row.startswith(start) for row in rows), start
    assert any(line.startswith("Projection (not a measurement)") for line in lines)

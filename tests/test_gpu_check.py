"""`make gpu-check` (reproduce/pipeline/gpu_check.py) in the suite: on a machine without CUDA it runs the
CPU parts and names every CUDA part it skipped; every comparison it makes on a GPU is exercised
here with the CPU standing in for the GPU, and a comparison that differs fails."""

import json

import numpy as np
import pytest
import torch

from reproduce.pipeline import gpu_check


def test_gpu_check_runs_on_this_machine_and_names_what_it_skipped(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert gpu_check.main(["--repeats", "2", "--rows", "600", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    statuses = {r["part"]: r["status"] for r in report["records"]}
    assert "FAIL" not in statuses.values()
    assert statuses["learner repeatable on cpu"] == "pass"
    assert report["records"][-1]["cpu_losses"][-1] < report["records"][-1]["cpu_losses"][0]
    printed = capsys.readouterr().out
    if not torch.cuda.is_available():
        assert report["device"] is None
        assert statuses["greedy joint-greedy Facility"] == "skipped: no CUDA device"
        assert "16 CUDA parts skipped" in printed and "objective DiSF" in printed


def test_every_comparison_passes_with_the_cpu_standing_in_for_the_gpu():
    records = gpu_check.run_checks(torch.device("cpu"), repeats=1, rows=600)
    parts = {r["part"]: r for r in records}
    for name in ("quality", "Pair_simi", "Facility", "DiSF", "joint_Pair_simi", "joint_DiSF"):
        assert parts[f"objective {name}"]["status"] == "pass"
    for part in ("learner step update", "greedy joint-greedy Facility", "training losses"):
        assert parts[part]["status"] == "pass", parts[part]
    assert parts["learner cpu vs gpu selection"]["overlap"] == 1.0  # same device, same stream
    assert parts["learner step time"]["gpu_median_s"] > 0
    for label in gpu_check.SELECT_ROWS:  # each learner row of the downstream experiment
        record = parts[f"select {label}"]
        assert record["overlap"] == 1.0 and record["gpu_objective"] == record["cpu_objective"]


def test_a_deviation_beyond_tolerance_fails():
    cpu = np.array([1.0, 2.0, 3.0])
    assert gpu_check.compare("x", cpu, cpu * (1 + 5e-5), rtol=1e-4)["status"] == "pass"
    failed = gpu_check.compare("x", cpu, cpu + [0, 0, 1e-3], rtol=1e-4)
    assert failed["status"] == "FAIL" and failed["max_abs_deviation"] == pytest.approx(1e-3)
    assert gpu_check.compare("x", cpu, cpu[:2], rtol=1)["status"] == "FAIL"

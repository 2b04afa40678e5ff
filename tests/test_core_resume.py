"""Crash and resume: a run killed with SIGKILL after a checkpoint and resumed gives exactly the
selection of an uninterrupted run with the same seed."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from datamask.cli import main
from datamask.data import write_dataset
from datamask.synthetic import synthetic_dataset

STEPS = 400
EVERY = 20


def command(shard, out, *extra):
    return [sys.executable, "-m", "datamask", "select", "--input", str(shard), "--output", str(out),
            "--algorithm", "Pair_simi", "--partial", "1", "--n_epochs", str(STEPS),
            "--checkpoint_every", str(EVERY), "--device", "cpu", "--seed", "3", "--no_progress",
            "--log_jsonl", f"{out}.jsonl", *extra]


@pytest.fixture
def shard(tmp_path):
    data = synthetic_dataset(3000, dim=64, n_clusters=24, seed=1)
    path = tmp_path / "in.parquet"
    write_dataset(path, data.ids, data.quality, data.features)
    return path


def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path, shard):
    whole = tmp_path / "whole.parquet"
    subprocess.run(command(shard, whole), check=True, capture_output=True)

    out = tmp_path / "killed.parquet"
    ckpt = f"{out}.ckpt"
    kill_after = random.Random(os.getpid()).randint(1, STEPS // EVERY - 6) * EVERY
    proc = subprocess.Popen(command(shard, out), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    saved_step = 0
    while proc.poll() is None and saved_step < kill_after:
        time.sleep(0.02)
        if os.path.exists(ckpt):
            saved_step = torch.load(ckpt, weights_only=False)["step"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not out.exists() and EVERY <= saved_step < STEPS

    subprocess.run(command(shard, out, "--resume"), check=True, capture_output=True)
    a, b = pq.read_table(whole), pq.read_table(out)
    np.testing.assert_array_equal(a.column("selected").to_numpy(), b.column("selected").to_numpy())
    np.testing.assert_array_equal(a.column("score").to_numpy(), b.column("score").to_numpy())
    steps = [json.loads(line)["step"] for line in open(f"{out}.jsonl")]
    assert steps == list(range(STEPS))  # each step logged once across the crash


def test_resume_refuses_other_settings(tmp_path, shard, capsys):
    out = tmp_path / "out.parquet"
    args = ["select", "--input", str(shard), "--output", str(out), "--n_epochs", "5",
            "--no_progress"]
    assert main(args) == 0 and os.path.exists(f"{out}.ckpt")
    assert main(args[:-2] + ["7", "--no_progress", "--resume"]) == 2
    assert "--n_epochs 5 -> 7" in capsys.readouterr().err


def test_resume_without_checkpoint_starts_fresh(tmp_path, shard, capsys):
    out = tmp_path / "out.parquet"
    assert main(["select", "--input", str(shard), "--output", str(out), "--n_epochs", "3",
                 "--no_progress", "--resume"]) == 0
    assert "no checkpoint" in capsys.readouterr().err and out.exists()

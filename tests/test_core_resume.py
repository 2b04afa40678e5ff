"""Crash and resume: a run killed with SIGKILL after a checkpoint and resumed gives exactly the
selection of an uninterrupted run with the same seed."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from conftest import write_shard
from datamask.cli import main
from datamask.examples.synthetic import synthetic_dataset

STEPS = 120
EVERY = 20
KILL_AT = 60  # the run dies right after saving the checkpoint of this step

# `datamask select` in a process that SIGKILLs itself once the checkpoint of step argv[1] is on
# disk: the crash point is known, not a race against a sleeping parent
SELECT_THEN_CRASH = """
import os, signal, sys
import datamask.learner as learner
save, kill_at = learner.save_checkpoint, int(sys.argv[1])

def save_then_die(path, state):
    save(path, state)
    if state["step"] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

learner.save_checkpoint = save_then_die
from datamask.cli import main
sys.exit(main(sys.argv[2:]))
"""


def select_args(shard, out, *extra):
    """From equal logits, whose steps the runs below pin (a greedy start's resume is tested in
    test_learner_variants)."""
    return ["select", "--input", str(shard), "--output", str(out), "--algorithm", "Pair_simi",
            "--partial", "1", "--n_epochs", str(STEPS), "--checkpoint_every", str(EVERY),
            "--device", "cpu", "--seed", "3", "--no_progress", "--log_jsonl", f"{out}.jsonl",
            "--init", "same", *extra]


@pytest.fixture
def shard(tmp_path):
    return write_shard(tmp_path / "in.parquet", synthetic_dataset(1000, dim=32, n_clusters=16,
                                                                  seed=1))


# the stopping rule's checks every 10 steps: its best read-off and the checks so far are in the
# checkpoint, so the resumed run stops where the whole one did (step 110) and writes the same best
STOPPING = ("--stop_every", "10", "--stop_window", "2", "--stop_tolerance", "0.01")


@pytest.mark.parametrize("rule, steps_run", [((), STEPS), (STOPPING, 110)],
                         ids=["default-rule", "rule-stops-after-the-kill"])
def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path, shard, rule, steps_run):
    whole = tmp_path / "whole.parquet"
    ran = subprocess.run([sys.executable, "-m", "datamask", *select_args(shard, whole, *rule)],
                         check=True, capture_output=True)
    whole_steps = [json.loads(line)["step"] for line in open(f"{whole}.jsonl")]
    assert whole_steps == list(range(steps_run))

    out = tmp_path / "killed.parquet"
    crashed = subprocess.run([sys.executable, "-c", SELECT_THEN_CRASH, str(KILL_AT),
                              *select_args(shard, out, *rule)], capture_output=True, text=True)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert not out.exists()
    assert torch.load(f"{out}.ckpt", weights_only=False)["step"] == KILL_AT

    resumed = subprocess.run([sys.executable, "-m", "datamask",
                              *select_args(shard, out, *rule, "--resume")], check=True,
                             capture_output=True)
    a, b = pq.read_table(whole), pq.read_table(out)
    np.testing.assert_array_equal(a.column("selected").to_numpy(), b.column("selected").to_numpy())
    np.testing.assert_array_equal(a.column("score").to_numpy(), b.column("score").to_numpy())
    steps = [json.loads(line)["step"] for line in open(f"{out}.jsonl")]
    assert steps == whole_steps  # each step logged once across the crash
    # what the run did, the start's objective scored before the crash included
    said, said_resumed = json.loads(ran.stdout), json.loads(resumed.stdout)
    for key in ("steps_run", "stop_reason", "written_step", "objective_start",
                "objective_written"):
        assert said[key] == said_resumed[key] is not None, key
    assert said["steps_run"] == steps_run


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


def test_a_checkpoint_from_before_probes_resumes_exact_not_at_todays_default(tmp_path, shard,
                                                                               capsys):
    """--probes -1 (64 probes for DiSF) is the default now; a checkpoint saved before the flag
    existed ran the exact score, so resuming it at the default is refused by name, and resuming
    with --probes 0 goes on."""
    out = tmp_path / "out.parquet"
    args = ["select", "--input", str(shard), "--output", str(out), "--algorithm", "DiSF",
            "--n_epochs", "3", "--no_progress"]
    assert main(args + ["--probes", "0"]) == 0
    state = torch.load(f"{out}.ckpt", weights_only=True)
    del state["config"]["probes"]
    torch.save(state, f"{out}.ckpt")
    assert main(args + ["--resume"]) == 2
    assert "--probes 0 -> -1" in capsys.readouterr().err
    assert main(args + ["--probes", "0", "--resume"]) == 0


def test_a_checkpoint_from_before_the_stopping_rule_is_refused_at_todays_default(tmp_path, shard,
                                                                                 capsys):
    """A checkpoint saved before --stop_every existed ran every step and wrote the last read-off,
    and holds no best read-off: resuming it with the rule on (the default) is refused by name;
    with --stop_every 0 it goes on."""
    out = tmp_path / "out.parquet"
    args = ["select", "--input", str(shard), "--output", str(out), "--n_epochs", "3",
            "--no_progress"]
    assert main(args + ["--stop_every", "0"]) == 0
    state = torch.load(f"{out}.ckpt", weights_only=True)
    del state["config"]["stop_every"], state["best"]
    torch.save(state, f"{out}.ckpt")
    assert main(args + ["--resume"]) == 2
    assert "--stop_every 0 -> 50" in capsys.readouterr().err
    assert main(args + ["--stop_every", "0", "--resume"]) == 0

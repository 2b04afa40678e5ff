"""Downstream runs that need no shared fixture run, kept apart from test_downstream.py so that
pytest-xdist (`--dist loadfile`) runs them beside that file's fixture rather than after it: a kill
-9 mid-training leaves no process and the rerun finishes; the proxy probe predicts a run's
seconds from a short run."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_downstream import TINY
from test_orphans import session_processes

from reproduce.experiments.downstream import epoch_steps, main


def test_kill_9_mid_training_leaves_no_process_and_the_rerun_finishes(pool, prepared,
                                                                       tmp_path):
    out = tmp_path / "killed"
    argv = ["--pool", str(pool[0]), "--output", str(out), "--methods", "random", "--arms", "free",
            "--no_null", "--junk", "--dup", "--seeds", "0", "--config", "demo",
            "--select_ratio", "0.3", "--block_size", "0", "--vocab_size", "300",
            "--heldout_docs", "2", "--tasks", "--set", "max_steps=400",
            *[a for s in TINY[:-2] for a in ("--set", s)]]
    command = [sys.executable, "-m", "reproduce.experiments.downstream", *argv]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (out / "logs" / "random.seed0.log").is_file():  # training has started
            assert process.poll() is None and time.time() < deadline
            time.sleep(0.5)
        time.sleep(3)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.time() + 20
        while session_processes(process.pid) and time.time() < deadline:
            time.sleep(0.5)
        assert session_processes(process.pid) == []
    finally:
        subprocess.run(["pkill", "-9", "-s", str(process.pid)])
    assert not (out / "train" / "random" / "seed0" / "summary.json").is_file()
    argv[argv.index("max_steps=400")] = "max_steps=4"  # the same run, finished quickly
    assert main(argv) == 0
    assert (out / "eval" / "random.seed0.json").is_file()


def test_the_proxy_probe_predicts_a_runs_seconds_from_a_short_run(pool, prepared,
                                                                  tmp_path):
    from reproduce.experiments import proxy

    tiny = {"vocab": 300, "set": TINY[:-2], "epochs": 2.0}
    found = proxy.probe(pool[0], tmp_path, "tiny", tiny)
    summary = json.loads((tmp_path / "tiny" / "probe" / "train" / "random" / "seed0" /
                          "summary.json").read_text())
    assert summary["train"]["max_steps"] == proxy.PROBE_STEPS
    assert (tmp_path / "tiny" / "probe" / "train" / "random" / "seed0" / "ema").is_dir()
    assert found["steps"] == epoch_steps(found["random_tokens"], 2.0, 4, 32)
    assert found["tokens_per_run"] == found["steps"] * 4 * 33
    assert found["non_embedding"] == summary["parameters"] - 300 * 32
    assert found["predicted_s"] == pytest.approx(
        found["tokens_per_run"] / found["tokens_per_s"] + found["eval_s"], abs=0.05)
    assert found["eligible"] == (found["predicted_s"] <= proxy.MAX_RUN_S)

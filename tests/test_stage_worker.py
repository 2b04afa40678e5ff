"""The stage worker (reproduce/experiments/stage_worker.py) that trains and scores the downstream
experiment's runs: a stage run in a worker, after another stage in the same process, writes the
weights a fresh `python -m reproduce` process writes, bit for bit; a failing stage is one error
naming its log, and the worker goes on serving."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from datamask.errors import UserError
from reproduce.pipeline.gpu_check import write_tiny_token_set
from reproduce.experiments.stage_worker import StageWorker

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["--set", "max_steps=6", "--set", "seq_len=32", "--set", "threads=1", "--set",
         "batch_size=4", "--set", "ema_decay=0.9", "--no_progress"]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tiny_token_set(tmp_path_factory.mktemp("worker"))


@pytest.fixture(scope="module")
def worker():
    """One worker for the file: it imports torch and transformers once (about 5 CPU-seconds a
    worker), and each test's stages follow others in the same process, as in a downstream run.
    The last test closes it and checks how it ends."""
    worker = StageWorker()
    yield worker
    worker.close()


def train_argv(root: Path, name: str, seed: int) -> list[str]:
    return ["train", "--tokens", str(root / "tokens"), "--tokenizer", str(root / "tokenizer.json"),
            "--output", str(root / name), "--set", f"seed={seed}", *STEPS]


def test_a_stage_in_a_worker_writes_what_a_fresh_process_writes(tokens, worker):
    # another seed first, so the compared run follows a stage in the same process
    worker.run(train_argv(tokens, "before", 1), tokens / "worker.log")
    worker.run(train_argv(tokens, "in-worker", 0), tokens / "worker.log")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "reproduce", *train_argv(tokens, "fresh", 0)],
                   check=True, cwd=ROOT, env=env, capture_output=True)
    for name in ("model.safetensors", "ema/model.safetensors"):
        fresh = (tokens / "fresh" / name).read_bytes()
        assert (tokens / "in-worker" / name).read_bytes() == fresh
        assert (tokens / "before" / name).read_bytes() != fresh  # the seed matters
    assert (tokens / "worker.log").read_text().count('"train_wall_s"') == 2  # both summaries


def test_a_failing_stage_names_its_log_and_the_worker_goes_on(tokens, worker):
    try:
        log = tokens / "bad.log"
        with pytest.raises(UserError, match=f"failed \\(exit 2\\); see {log}"):
            worker.run(["train", "--tokens", str(tokens / "tokens"), "--tokenizer",
                        str(tokens / "tokenizer.json"), "--output", str(tokens / "bad"),
                        "--set", "bogus=1"], log)
        assert "--set bogus: not a model or train setting" in log.read_text()
        assert not (tokens / "bad").exists()
        worker.run(train_argv(tokens, "after-failure", 0), tokens / "after.log")
        assert (tokens / "after-failure" / "summary.json").is_file()
    finally:
        worker.close()
    assert worker.process.returncode == 0  # a closed pipe ends it cleanly

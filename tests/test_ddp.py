"""Data-parallel training (reproduce/pipeline/train.py under torchrun): two CPU ranks (gloo on
loopback) train the same model as one process at the same global batch, replicated (DDP) and
sharded (FSDP2), on tiny datatrove token files cut from the BBC corpus.

Tolerance: the two runs see the same windows in the same steps, from the same initial weights, so
they differ only in the order of floating-point sums: one process sums the gradient over the whole
batch in one reduction, two ranks sum their halves and then add the halves in the all-reduce.
fp32 addition is not associative, so each step's gradient differs in its last bits (~1e-7
relative) and Adam carries that into the next steps. Measured on 8 steps: losses agree to ~1e-7
relative, weights to ~6e-6 absolute. The test allows 1e-5 relative on every logged loss and 1e-4
absolute on every weight: 10-100x what rounding gives, while a rank reading the wrong windows
changes the loss in the third decimal.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from reproduce.pipeline.gpu_check import write_tiny_token_set
from reproduce.pipeline.train import TrainConfig, rank_rows, window_order

ROOT = Path(__file__).resolve().parents[1]
# 8 steps of 2 micro-batches; the global batch is 4 windows of 33 tokens either way.
STEPS = ["--set", "max_steps=8", "--set", "seq_len=32", "--set", "threads=1", "--set",
         "log_every=1", "--set", "warmup_steps=2", "--set", "grad_accum=2", "--no_progress"]
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-4


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """A 400-entry BPE tokenizer and one datatrove .ds file of 40 BBC articles."""
    return write_tiny_token_set(tmp_path_factory.mktemp("ddp"))


def run_train(root: Path, name: str, nproc: int, *extra: str) -> dict:
    """`python -m reproduce train` as a user runs it: plain for one process, under torchrun
    (standalone rendezvous on a free loopback port) for more."""
    launcher = [sys.executable] + (["-m", "torch.distributed.run", "--standalone",
                                    f"--nproc_per_node={nproc}"] if nproc > 1 else [])
    command = launcher + ["-m", "reproduce", "train", "--tokens", str(root / "tokens"),
                          "--tokenizer", str(root / "tokenizer.json"),
                          "--output", str(root / name)] + STEPS + list(extra)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    done = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # one summary: rank 0 prints, the others do not
    assert summary == json.loads((root / name / "summary.json").read_text())
    summary["losses"] = [json.loads(line)["loss"]
                         for line in (root / name / "train_log.jsonl").read_text().splitlines()]
    return summary


@pytest.fixture(scope="module")
def one_process(tokens):
    return run_train(tokens, "one", 1, "--set", "batch_size=4")


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def test_ranks_read_what_one_process_reads_per_micro_batch():
    cfg1, cfg3 = TrainConfig(batch_size=6, grad_accum=2), TrainConfig(batch_size=2, grad_accum=2)
    order = window_order(50, 3 * 12, seed=1)
    for step in range(3):
        for micro in range(2):
            together = np.concatenate([rank_rows(order, step, micro, cfg3, r, 3)
                                       for r in range(3)])
            assert together.tolist() == rank_rows(order, step, micro, cfg1).tolist()
    # one process: consecutive batches of the order, as before torchrun was supported
    assert rank_rows(order, 1, 1, cfg1).tolist() == order[18:24].tolist()


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_follow_one_process_loss_curve(tokens, one_process, parallel):
    two = run_train(tokens, parallel, 2, "--set", "batch_size=2", "--set", f"parallel={parallel}")
    assert len(two["losses"]) == len(one_process["losses"]) == 8
    np.testing.assert_allclose(two["losses"], one_process["losses"], rtol=LOSS_RTOL)
    assert one_process["losses"][-1] < one_process["losses"][0] - 0.3  # it learns
    a, b = weights(tokens / "one"), weights(tokens / parallel)
    assert a.keys() == b.keys()  # FSDP's gathered checkpoint has the same (tied) tensors
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=WEIGHT_ATOL)
    assert (two["world_size"], two["parallel"]) == (2, parallel)
    assert (one_process["world_size"], one_process["parallel"]) == (1, "none")
    assert two["tokens_seen"] == one_process["tokens_seen"] == 8 * 2 * 4 * 33
    assert two["tokens_per_s"] > 0 and len(two["peak_memory_mib_per_rank"]) == 2
    assert all(m > 0 for m in two["peak_memory_mib_per_rank"])
    model = AutoModelForCausalLM.from_pretrained(tokens / parallel)  # what lm-eval loads
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    torch.testing.assert_close(model.lm_head.weight.detach(), a["model.embed_tokens.weight"],
                               rtol=0, atol=WEIGHT_ATOL)


def test_unknown_parallel_mode_is_refused():
    from datamask.errors import UserError
    from reproduce.pipeline.train import load_config

    with pytest.raises(UserError, match="train.parallel"):
        load_config("demo", {"parallel": "pipeline"})

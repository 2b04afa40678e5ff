"""Every flag of the data stages and the pool's commands that takes a number, a path or an engine
resource, given a value no run can use (zero, a negative, a file of the wrong kind, a missing
file, more CPUs or GPUs than the machine has): refused before any model loads or any engine
starts, with exit 2, one line naming the flag or file, no traceback, and the folder as it was.
In-process, through reproduce.cli.main; one parametrised test per command."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from test_adversarial import refused
from datamask.data import write_dataset
from datamask.examples.synthetic import synthetic_dataset
from reproduce.cli import main
from reproduce.pipeline.tokenize import train_tokenizer

TOO_MANY_CPUS = str((os.cpu_count() or 1) + 1)
TOO_MANY_GPUS = str((torch.cuda.device_count() if torch.cuda.is_available() else 0) + 1)


@pytest.fixture(autouse=True)
def no_ray_address(monkeypatch):
    """--executor ray without an address starts a Ray instance on this machine."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def files(tmp_path):
    """FineWeb shards (and one with no rows), a prepared shard, selections of them, a tokenizer
    and a text file."""
    shards = tmp_path / "fineweb"
    shards.mkdir()
    ids = []
    for s in range(2):
        ids += [f"doc-{s}-{i}" for i in range(20)]
        pq.write_table(pa.table({"id": ids[-20:], "text": [f"Text {i} of shard {s} on the sea."
                                                          for i in range(20)]}),
                       shards / f"{s:05d}.parquet")
    pq.write_table(pa.table({"id": ids, "selected": [i % 2 == 0 for i in range(40)]}),
                   tmp_path / "selection.parquet")
    pq.write_table(pa.table({"id": ids, "selected": [False] * 40}), tmp_path / "none.parquet")
    train_tokenizer([str(shards)], tmp_path / "tokenizer.json", vocab_size=300)
    data = synthetic_dataset(40, dim=4, n_clusters=3, seed=2)
    (tmp_path / "prepared").mkdir()
    write_dataset(tmp_path / "prepared" / "a.parquet", data,
                  extra={"id": pa.array([f"doc{i}" for i in data.ids]),
                         "text_length": pa.array(np.full(40, 10))})
    (tmp_path / "notes.txt").write_text("not Parquet, not JSON\n")
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}),
                   tmp_path / "empty.parquet")
    return tmp_path


def refuse(tmp, capsys, argv, named):
    """`argv` with {tmp} filled in is refused by one line naming each of `named`."""
    argv = [a.format(tmp=tmp) for a in argv]
    refused(main, argv, capsys, tmp, *[n.format(tmp=tmp) for n in named])


def cases(table):
    """One test per (flags, named) row, called by its flags."""
    return pytest.mark.parametrize("flags,named", table, ids=[" ".join(f) for f, _ in table])


SHARD = "{tmp}/fineweb/00000.parquet"
RAY = ["--executor", "ray"]


DATA = [
    (["--seed", "-1"], ["--seed"]),
    (["--shards", "0"], ["--shards"]),
    (["--held_out", "1"], ["--held_out"]),
    (["--limit", "0"], ["--limit"]),
]


@cases(DATA)
def test_data_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["data", "--output", "{tmp}/bbc", "--tasks_output", "{tmp}/tasks",
                           *flags], named)


PREPARE = [
    (["--batch_size", "0"], ["--batch_size"]),
    (["--batch_size", "-1"], ["--batch_size"]),
    (["--max_seq_length", "0"], ["--max_seq_length"]),
    (["--tasks", "0"], ["--tasks"]),
    (["--workers", "0"], ["--workers"]),
    (["--workers", "two"], ["--workers"]),
    (["--gpus_per_task", "-1"], ["--gpus_per_task"]),
    (["--mem_per_cpu_gb", "0"], ["--mem_per_cpu_gb"]),
    (["--slurm_time", "tomorrow"], ["--slurm_time"]),
    ([*RAY, "--cpus_per_task", "0"], ["--cpus_per_task"]),  # Ray would wait forever
    ([*RAY, "--cpus_per_task", TOO_MANY_CPUS], ["--cpus_per_task", "this machine"]),
    ([*RAY, "--cpus_per_task", "1", "--gpus_per_task", TOO_MANY_GPUS], ["--gpus_per_task"]),
    (["--gpus_per_task", TOO_MANY_GPUS], ["--gpus_per_task"]),
    (["--quality", "fasttext", "--quality_model", SHARD], ["--quality_model", SHARD]),
    (["--quality", "fasttext", "--quality_model", "{tmp}/no.bin"], ["--quality_model"]),
    (["--input", "{tmp}/notes.txt"], ["notes.txt", "Parquet"]),
    (["--input", "{tmp}/prepared"], ["a.parquet", "'text'"]),
    (["--embedding_model", "{tmp}/prepared"], ["--embedding_model", "prepared"]),  # no model
    # before the model loads: one that cannot load would be named first
    (["--input", "{tmp}/empty.parquet", "--embedding_model", "{tmp}/prepared"],
     ["empty.parquet", "no rows"]),
]


@cases(PREPARE)
def test_prepare_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["prepare", "--input", "{tmp}/fineweb", "--output", "{tmp}/out",
                           *flags], named)


TOKENIZER = [
    (["--vocab_size", "0"], ["--vocab_size"]),
    (["--vocab_size", str(2**64)], ["--vocab_size"]),  # beyond what tokenizers' Rust side takes
    (["--output", SHARD], ["--output", SHARD, "written over"]),
    (["--output", "{tmp}/prepared"], ["--output", "is a folder"]),
    (["--input", "{tmp}/notes.txt"], ["notes.txt", "Parquet"]),
    (["--input", "{tmp}/prepared"], ["a.parquet", "'text'"]),
    (["--input", "{tmp}/missing"], ["--input", "missing"]),
]


@cases(TOKENIZER)
def test_tokenizer_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["tokenizer", "--input", "{tmp}/fineweb", "--output",
                           "{tmp}/new/tokenizer.json", *flags], named)


TOKENIZE = [
    (["--selection", "{tmp}/none.parquet"], ["--selection", "selects no row"]),
    (["--selection", "{tmp}/notes.txt"], ["--selection", "notes.txt"]),
    (["--selection", "{tmp}/prepared"], ["--selection", "selection.parquet"]),
    (["--selection", SHARD], ["--selection", "id and selected"]),
    (["--tokenizer", SHARD], ["--tokenizer", SHARD]),
    (["--tokenizer", "{tmp}/notes.txt"], ["--tokenizer", "notes.txt"]),
    (["--tokenizer", "{tmp}/missing.json"], ["--tokenizer", "missing.json"]),
    (["--input", SHARD], ["--input", "not a folder"]),
    (["--seed", "-1"], ["--seed"]),
    (["--tasks", "0"], ["--tasks"]),
    (["--workers", "0"], ["--workers"]),
    ([*RAY, "--cpus_per_task", "0"], ["--cpus_per_task"]),
    ([*RAY, "--cpus_per_task", TOO_MANY_CPUS], ["--cpus_per_task"]),
    ([*RAY, "--cpus_per_task", "1", "--mem_per_cpu_gb", "-1"], ["--mem_per_cpu_gb"]),
]


@cases(TOKENIZE)
def test_tokenize_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["tokenize", "--input", "{tmp}/fineweb", "--selection",
                           "{tmp}/selection.parquet", "--tokenizer", "{tmp}/tokenizer.json",
                           "--output", "{tmp}/tokens", *flags], named)


SELECT = [
    (["--seed", "-1"], ["--seed"]),
    (["--block_size", "-1"], ["--block_size"]),
    (["--select_ratio", "0"], ["--select_ratio"]),
    (["--merge_ratio", "1.5"], ["--merge_ratio 1.5: must be at most 1"]),
    (["--merge_ratio", "0.1"], ["--merge_ratio 0.1: must be above --select_ratio 0.25"]),
    (["--workers", "0"], ["--workers"]),
    (["--input", "{tmp}/notes.txt"], ["notes.txt", "Parquet"]),
    (["--input", "{tmp}/fineweb"], ["00000.parquet", "prepare"]),
    (["--stratify", "lang", "--strata_from", "{tmp}/missing"], ["--strata_from"]),
    ([*RAY, "--cpus_per_task", "0"], ["--cpus_per_task"]),
    ([*RAY, "--cpus_per_task", TOO_MANY_CPUS], ["--cpus_per_task"]),
    ([*RAY, "--mem_per_cpu_gb", "0"], ["--mem_per_cpu_gb"]),
]


@cases(SELECT)
def test_select_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["select", "--input", "{tmp}/prepared", "--output", "{tmp}/sel",
                           "--method", "random", *flags], named)


POOL = [
    (["--seed", "-1"], ["--seed"]),
    (["--shards", "0"], ["--shards"]),
    (["--heldout_chars", "0"], ["--heldout_chars"]),
    (["--task_articles", "0"], ["--task_articles"]),
    (["--max_mb_per_domain", "0"], ["--max_mb_per_domain"]),
    (["--junk", "-0.1"], ["--junk"]),
    (["--cache", "{tmp}/notes.txt"], ["--cache", "notes.txt"]),
    (["--output", "{tmp}/notes.txt"], ["--output", "notes.txt"]),
]


@cases(POOL)
def test_pool_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["pool", "--output", "{tmp}/pool", "--cache", "{tmp}/cache", *flags],
           named)


OUTSIDE = [
    (["--seed", "-1"], ["--seed"]),
    (["--chars", "0"], ["--chars"]),
    (["--cache", "{tmp}/notes.txt"], ["--cache", "notes.txt"]),
    (["--output", "{tmp}/notes.txt"], ["--output", "notes.txt"]),
]


@cases(OUTSIDE)
def test_outside_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["outside", "--output", "{tmp}/outside", "--cache", "{tmp}/cache",
                           *flags], named)


# the pool is looked at last: each of these is refused before it, so none is needed
NO_POOL = "{tmp}/no-pool"
RATIO = [
    (["--select_ratio", "0"], ["--select_ratio"]),
    (["--select_ratio", "1"], ["--select_ratio"]),
    (["--select_ratio", "-0.1"], ["--select_ratio"]),
    (["--select_ratio", "nan"], ["--select_ratio"]),
    (["--seed", "-1"], ["--seed"]),
    (["--seed", str(2**63)], ["--seed"]),
]


@cases(RATIO)
def test_control_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["control", "--pool", NO_POOL, "--prepared", "{tmp}/prepared",
                           "--output", "{tmp}/control", *flags], named)


CALIBRATE = RATIO + [
    (["--dose", "0"], ["--dose"]),
    (["--dose", "1"], ["--dose"]),
    (["--dose", "-0.5"], ["--dose"]),
    (["--dose", "1.5"], ["--dose"]),
    (["--series", "noise"], ["--series"]),
    (["--base", "{tmp}/notes.txt"], ["--base", "notes.txt"]),
]


@cases(CALIBRATE)
def test_calibrate_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["calibrate", "--pool", NO_POOL, "--prepared", "{tmp}/prepared",
                           "--output", "{tmp}/calibration", "--series", "junk", "--dose", "0.1",
                           *flags], named)


PLANTED = [
    (["--output", "{tmp}/prepared"], ["--output", "is a folder"]),
    (["--output", "{tmp}/selection.parquet"], ["--output", "--selection", "written over"]),
    (["--output", "{tmp}/missing/report.json"], ["missing"]),
    (["--selection", "{tmp}/missing.parquet"], ["--selection", "missing.parquet"]),
]


@cases(PLANTED)
def test_planted_refuses(files, capsys, flags, named):
    refuse(files, capsys, ["planted", "--pool", NO_POOL, "--selection",
                           "{tmp}/selection.parquet", *flags], named)


def test_tokenizer_makes_the_folder_of_its_output(files, capsys):
    """A missing folder of --output is made, not refused: the Makefile's pipeline writes
    tokenizer/tokenizer.json into a new run folder."""
    out = files / "new" / "tokenizer.json"
    assert main(["tokenizer", "--input", str(files / "fineweb"), "--output", str(out),
                 "--vocab_size", "300"]) == 0
    assert out.is_file()

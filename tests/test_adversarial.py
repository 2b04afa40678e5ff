"""Adversarial input to every command, generated on tiny data: each bad case exits 2 with one line
naming the file, column, row or flag, shows no traceback, leaves every file of the temp folder
byte-identical and adds none; each accepted case keeps the ids exactly and writes no NaN.

The commands run in-process through their `main` (stderr captured); a subprocess only where the
console script or a signal is under test."""

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from datamask.cli import main as datamask_main
from datamask.data import write_dataset
from datamask.learner import save_checkpoint
from datamask.examples.synthetic import synthetic_dataset
from reproduce.cli import main as pipeline_main

LEARN = ["--n_epochs", "3", "--n_rollout", "4", "--partial", "1", "--device", "cpu",
         "--no_progress"]


def tree(root: Path) -> dict[str, str]:
    """Every file under root (hidden ones included) -> a hash of its bytes (a link: its target)."""
    found = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[rel] = "folder"
    return found


def run(main, argv, capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit:
        code = exit.code
    except KeyboardInterrupt:  # escaped the command's handler: a failure, not pytest's Ctrl-C
        code = "KeyboardInterrupt escaped"
    return code, capsys.readouterr().err


def refused(main, argv, capsys, root: Path, *named, usage: bool = False) -> str:
    """Run a command that must be refused: exit 2, one error line naming each of `named`, no
    traceback, and the folder exactly as it was. `usage`: argparse's own refusal, whose one error
    line follows its usage text."""
    before = tree(root)
    code, err = run(main, argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err, err
    assert [line for line in lines if "error:" in line] == lines[-1:], err
    if not usage:
        assert len(lines) == 1, err
    for name in named:
        assert str(name) in lines[-1], (name, err)
    assert tree(root) == before, "a refused command changed or added files"
    return lines[-1]


def shard_table(ids=None, quality=None, features=None, id_column="chunk_id") -> pa.Table:
    base = synthetic_dataset(40, dim=4, n_clusters=3, seed=1)
    ids = base.ids if ids is None else ids
    quality = base.quality if quality is None else quality
    features = base.features if features is None else features
    if not isinstance(features, pa.Array):
        features = np.asarray(features)
        features = pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)),
                                                     features.shape[1])
    return pa.table({id_column: ids, "quality_score": quality, "feature_arr": features})


def write(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


@pytest.fixture
def shard(tmp_path):
    return write(tmp_path / "in.parquet", shard_table())


def select(shard, out, *extra):
    return ["select", "--input", shard, "--output", out, *LEARN, *extra]


def accepted(tmp_path, capsys, source: Path, *argv) -> pa.Table:
    """Run a command that must succeed; its output keeps every input id, in order, and no NaN."""
    out = tmp_path / "out.parquet"
    code, err = run(datamask_main, [*argv, "--input", source, "--output", out], capsys)
    assert code == 0, err
    table = pq.read_table(out)
    ids_in = pq.read_table(source).column(0)
    assert table.column(0).type == ids_in.type and table.column(0).equals(ids_in)
    assert not np.isnan(table.column("score").to_numpy()).any()
    return table


# ---- paths: no output may be an input, every output writable, checked before any work ----

def test_output_over_an_input_is_refused_naming_both(tmp_path, shard, capsys):
    refused(datamask_main, select(shard, shard), capsys, tmp_path, "--output", shard, "--input")
    refused(datamask_main, ["baseline", "random", "--input", shard, "--output", shard], capsys,
            tmp_path, "--output", shard)
    out = tmp_path / "out.parquet"
    refused(datamask_main, select(shard, out, "--log_jsonl", shard), capsys, tmp_path,
            "--log_jsonl", shard)
    refused(datamask_main, select(shard, out, "--checkpoint", shard), capsys, tmp_path,
            "--checkpoint", shard)
    refused(datamask_main, select(shard, out, "--log_jsonl", out), capsys, tmp_path,
            "--log_jsonl", "--output", "same path")


def test_links_to_an_input_are_followed(tmp_path, shard, capsys):
    link = tmp_path / "link.parquet"
    link.symlink_to(shard)
    refused(datamask_main, select(shard, link), capsys, tmp_path, "--output", link)
    refused(datamask_main, select(link, shard), capsys, tmp_path, "--output", shard)
    hard = tmp_path / "hard.parquet"
    os.link(shard, hard)
    refused(datamask_main, select(shard, hard), capsys, tmp_path, "--output", hard)


@pytest.mark.parametrize("flag,value,message", [
    ("--output", "{tmp}", "is a folder"),
    ("--output", "", "--output is empty"),
    ("--log_jsonl", "{tmp}/missing/log.jsonl", "does not exist"),
    ("--checkpoint", "{tmp}/missing/x.ckpt", "does not exist"),
    ("--output", "/proc/out.parquet", "cannot write"),
])
def test_unwritable_outputs_are_refused_before_work(tmp_path, shard, capsys, flag, value,
                                                    message):
    argv = select(shard, tmp_path / "out.parquet")
    argv += [flag, value.format(tmp=tmp_path)]  # argparse keeps the last --output
    refused(datamask_main, argv, capsys, tmp_path, flag, message)


# ---- flags: types, ranges and devices ----

@pytest.mark.parametrize("argv,flag", [
    (["--device", "foo"], "--device"),
    (["--device", "mps"], "--device"),
    (["--device", "meta"], "--device"),
    (["--seed", "100000000000000000000000"], "--seed"),
    (["--seed", "-1"], "--seed"),
    (["--max_lr", "-10"], "--max_lr"),
    (["--eval_every", "-5", "--log_jsonl", "{tmp}/log.jsonl"], "--eval_every"),
    (["--checkpoint_every", "-1"], "--checkpoint_every"),
])
def test_bad_select_flags_are_named(tmp_path, shard, capsys, argv, flag):
    argv = [a.format(tmp=tmp_path) for a in argv]
    refused(datamask_main, select(shard, tmp_path / "out.parquet", *argv), capsys, tmp_path, flag)


def test_seed_that_is_not_a_whole_number_is_argparses_refusal(tmp_path, shard, capsys):
    refused(datamask_main, select(shard, tmp_path / "o.parquet", "--seed", "1e23"), capsys,
            tmp_path, "--seed", usage=True)


def test_bad_baseline_flags_are_named(tmp_path, shard, capsys):
    out = tmp_path / "out.parquet"
    refused(datamask_main, ["baseline", "random", "--input", shard, "--output", out, "--seed",
                            "-1"], capsys, tmp_path, "--seed")
    refused(datamask_main, ["baseline", "semdedup", "--input", shard, "--output", out,
                            "--device", "foo"], capsys, tmp_path, "--device")


# ---- ids: exactly as they went in, or refused ----

def test_uint64_ids_above_2_63_come_out_exactly(tmp_path, capsys):
    ids = np.arange(40, dtype=np.uint64) + np.uint64(2**63 + 5)
    source = write(tmp_path / "u64.parquet", shard_table(ids=pa.array(ids, pa.uint64())))
    table = accepted(tmp_path, capsys, source, "select", *LEARN)
    assert table.column(0).type == pa.uint64() and table.column(0).to_pylist()[0] == 2**63 + 5
    accepted(tmp_path, capsys, source, "baseline", "quality-topk")


@pytest.mark.parametrize("name", ["score", "selected"])
def test_an_id_column_the_output_would_overwrite_is_refused(tmp_path, capsys, name):
    source = write(tmp_path / "in.parquet", shard_table(id_column=name))
    refused(datamask_main, select(source, tmp_path / "o.parquet", "--id_column", name), capsys,
            tmp_path, "--id_column", name)


# ---- numbers: computed scale-invariantly or refused, never NaN ----

def test_features_beyond_float32_are_rescaled_exactly(tmp_path, capsys):
    """One power of two brings them into float32: cosines do not move, so the selection and
    the scores equal those of the unscaled input, bit for bit."""
    base = synthetic_dataset(40, dim=4, n_clusters=3, seed=1).features.astype(np.float64)
    source = write(tmp_path / "in.parquet", shard_table())
    reference = accepted(tmp_path, capsys, source, "select", *LEARN)
    for name, features in [("f64_2^130", base * 2.0**130), ("f32_2^100", base * 2.0**100),
                           ("f32_2^-100", base * 2.0**-100)]:
        if name.startswith("f32"):
            features = features.astype(np.float32)
        scaled = write(tmp_path / f"{name}.parquet", shard_table(features=features))
        assert accepted(tmp_path, capsys, scaled, "select", *LEARN).equals(reference), name
    for value in (1e39, 1e30, 1e-30):  # not powers of two: no NaN, ids intact
        features = base * value
        scaled = write(tmp_path / f"{value}.parquet", shard_table(
            features=features if value > 3e38 else features.astype(np.float32)))
        accepted(tmp_path, capsys, scaled, "select", *LEARN)
    accepted(tmp_path, capsys, write(tmp_path / "sd.parquet", shard_table(features=base * 1e39)),
             "baseline", "semdedup", "--n_clusters", "3")


def _features_with(rows: dict[int, list]) -> np.ndarray:
    features = synthetic_dataset(40, dim=4, n_clusters=3, seed=1).features.astype(np.float64)
    for row, values in rows.items():
        features[row] = values
    return features


@pytest.mark.parametrize("table,named", [
    (lambda: shard_table(quality=np.full(40, 1e39)), ["quality_score", "row 0"]),
    (lambda: shard_table(features=_features_with({7: [0, 0, 0, 0]})), ["feature_arr", "row 7"]),
    (lambda: shard_table(features=_features_with({0: [1e30] * 4, 9: [1e-30] * 4})),
     ["feature_arr", "row 0", "row 9"]),
    (lambda: shard_table(quality=[str(q) for q in range(40)]), ["quality_score", "string"]),
    (lambda: shard_table(quality=[True] * 40), ["quality_score", "bool"]),
    (lambda: shard_table(quality=[[1.0]] * 40), ["quality_score", "list"]),
    (lambda: shard_table(features=pa.array([[[1.0, 2.0]]] * 40)), ["feature_arr", "list"]),
    (lambda: shard_table(features=pa.array([["1", "2"]] * 40)), ["feature_arr", "string"]),
])
def test_bad_numbers_are_refused_naming_column_and_row(tmp_path, capsys, table, named):
    source = write(tmp_path / "bad.parquet", table())
    refused(datamask_main, select(source, tmp_path / "out.parquet"), capsys, tmp_path, source,
            *named)


def test_corrupt_page_data_with_an_intact_footer_is_refused(tmp_path, capsys):
    source = tmp_path / "corrupt.parquet"
    pq.write_table(shard_table(), source, compression="snappy")
    raw = bytearray(source.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8  # metadata length + its length + magic
    for i in range(8, len(raw) - footer, 7):  # every 7th byte of the pages
        raw[i] ^= 0x5A
    source.write_bytes(bytes(raw))
    assert pq.read_metadata(source).num_rows == 40  # the footer still reads
    refused(datamask_main, select(source, tmp_path / "out.parquet"), capsys, tmp_path, source)


# ---- checkpoints: resume only on the same data, never a stray file ----

def test_resume_on_changed_features_is_refused(tmp_path, shard, capsys):
    out = tmp_path / "out.parquet"
    assert run(datamask_main, select(shard, out), capsys)[0] == 0
    table = pq.read_table(shard)
    features = np.stack(table.column("feature_arr").to_numpy(zero_copy_only=False))
    changed = write(tmp_path / "changed.parquet", shard_table(features=features[::-1].copy()))
    refused(datamask_main, select(changed, out, "--resume"), capsys, tmp_path, "features")


def test_a_checkpoint_that_is_not_ours_is_refused(tmp_path, shard, capsys):
    ckpt = tmp_path / "x.ckpt"
    torch.save([1, 2, 3], ckpt)
    refused(datamask_main, select(shard, tmp_path / "o.parquet", "--checkpoint", ckpt,
                                  "--resume"), capsys, tmp_path, ckpt, "not a datamask checkpoint")


def test_a_failed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full_disk(state, path):
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError):
        save_checkpoint(str(tmp_path / "x.ckpt"), {"step": 1})
    assert tree(tmp_path) == {}


def test_a_run_that_fails_leaves_no_checkpoint(tmp_path, shard, capsys):
    """DiSF needs 2 rows per mask; with these flags a step has 1: refused inside the learner."""
    refused(datamask_main, select(shard, tmp_path / "o.parquet", "--algorithm", "DiSF",
                                  "--partial", "0.05"), capsys, tmp_path, "--partial")


KILL_INSIDE_SAVE = """
import os, signal, sys, torch
real_save = torch.save
def save(state, path, *args, **kwargs):
    if state["step"] == int(os.environ["KILL_AT_STEP"]):
        os.kill(os.getpid(), signal.SIGKILL)  # inside the save: its temporary file exists, empty
    return real_save(state, path, *args, **kwargs)
torch.save = save
from datamask.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_inside_a_checkpoint_save_then_resume(tmp_path, shard, capsys):
    steps = ["--n_epochs", "30", "--checkpoint_every", "10"]
    whole = tmp_path / "whole.parquet"
    assert run(datamask_main, select(shard, whole, *steps), capsys)[0] == 0
    os.unlink(f"{whole}.ckpt")

    out = tmp_path / "out.parquet"
    argv = [str(a) for a in select(shard, out, *steps)]
    killed = subprocess.run([sys.executable, "-c", KILL_INSIDE_SAVE, *argv], check=False,
                            capture_output=True,
                            env={**os.environ, "KILL_AT_STEP": "20"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    stray = list(tmp_path.glob(".out.parquet.ckpt.*.tmp"))
    assert len(stray) == 1 and stray[0].stat().st_size == 0 and not out.exists()
    assert torch.load(f"{out}.ckpt", weights_only=True)["step"] == 10

    code, err = run(datamask_main, [*argv, "--resume"], capsys)
    assert code == 0, err
    assert not list(tmp_path.glob(".*.tmp"))
    assert pq.read_table(out).equals(pq.read_table(whole))


def test_ctrl_c_keeps_the_checkpoint_and_says_how_to_resume(tmp_path, shard, capsys,
                                                           monkeypatch):
    steps = ["--n_epochs", "30", "--checkpoint_every", "10"]
    whole = tmp_path / "whole.parquet"
    assert run(datamask_main, select(shard, whole, *steps), capsys)[0] == 0
    os.unlink(f"{whole}.ckpt")
    real_save = torch.save

    def interrupt_at_20(state, path, *args, **kwargs):
        if state["step"] == 20:
            raise KeyboardInterrupt
        return real_save(state, path, *args, **kwargs)

    out = tmp_path / "out.parquet"
    monkeypatch.setattr(torch, "save", interrupt_at_20)
    code, err = run(datamask_main, select(shard, out, *steps), capsys)
    assert code == 130 and len(err.strip().splitlines()) == 1, err
    assert f"{out}.ckpt" in err and "--resume" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))
    monkeypatch.setattr(torch, "save", real_save)
    assert run(datamask_main, select(shard, out, *steps, "--resume"), capsys)[0] == 0
    assert pq.read_table(out).equals(pq.read_table(whole))


# ---- synth and demo ----

@pytest.mark.parametrize("flag,value", [("--rows", "0"), ("--rows", "-5"), ("--dim", "0"),
                                        ("--clusters", "0")])
def test_synth_sizes_must_be_positive(tmp_path, capsys, flag, value):
    refused(datamask_main, ["synth", "--output", tmp_path / "s.parquet", flag, value], capsys,
            tmp_path, flag)


def test_demo_workdir_must_be_writable(tmp_path, capsys):
    refused(datamask_main, ["demo", "--workdir", "/proc/nope"], capsys, tmp_path, "--workdir")


# ---- pipeline prepare and select ----

def fineweb(path: Path, **changes) -> Path:
    columns = {"text": [f"document number {i} about the weather" for i in range(12)],
               "id": [f"<urn:uuid:{i}>" for i in range(12)],
               "score": [2.5 + i / 10 for i in range(12)]}
    columns.update(changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize("make,named", [
    (lambda d: fineweb(d / "a.parquet", score=[float("nan")] + [3.0] * 11), ["score", "row 0"]),
    (lambda d: fineweb(d / "a.parquet", score=["3"] * 12), ["score", "string"]),
    (lambda d: fineweb(d / "a.parquet", text=list(range(12))), ["text", "int64"]),
    (lambda d: fineweb(d / "a.parquet").write_bytes(b"PAR1 not really") and d / "a.parquet",
     ["not a readable Parquet"]),
])
def test_prepare_refuses_bad_shards_before_loading_a_model(tmp_path, capsys, make, named):
    source = make(tmp_path / "fineweb")
    refused(pipeline_main, ["prepare", "--input", tmp_path / "fineweb", "--output",
                            tmp_path / "prepared"], capsys, tmp_path, source, *named)


def test_prepare_refuses_outputs_that_would_destroy_something(tmp_path, capsys):
    source = fineweb(tmp_path / "fineweb" / "a.parquet")
    folder = tmp_path / "fineweb"
    refused(pipeline_main, ["prepare", "--input", folder, "--output", folder], capsys, tmp_path,
            "--output", folder)
    refused(pipeline_main, ["prepare", "--input", source, "--output", folder], capsys, tmp_path,
            "--output", "holds")
    (tmp_path / "file").write_text("x")
    refused(pipeline_main, ["prepare", "--input", folder, "--output", tmp_path / "file"], capsys,
            tmp_path, "--output", "is a file")
    earlier = tmp_path / "prepared" / "a.parquet"
    earlier.parent.mkdir()
    earlier.write_bytes(b"not parquet")
    refused(pipeline_main, ["prepare", "--input", folder, "--output", tmp_path / "prepared"],
            capsys, tmp_path, earlier, "earlier output")


@pytest.fixture
def prepared(tmp_path):
    data = synthetic_dataset(40, dim=4, n_clusters=3, seed=2)
    path = tmp_path / "prepared" / "a.parquet"
    path.parent.mkdir()
    write_dataset(path, data,
                  extra={"id": pa.array([f"doc{i}" for i in data.ids]),
                         "text_length": pa.array(np.full(40, 10))})
    return path


@pytest.mark.parametrize("method,named", [
    ("datamask:n_epochs=abc", ["--n_epochs", "abc"]),
    ("datamask:foo=1", ["foo"]),
    ("no-such-method", ["no-such-method"]),
])
def test_pipeline_select_checks_the_method_before_starting(tmp_path, capsys, prepared, method,
                                                          named):
    refused(pipeline_main, ["select", "--input", prepared.parent, "--output", tmp_path / "sel",
                            "--method", method], capsys, tmp_path, *named)


def test_pipeline_select_refuses_unprepared_input_and_its_own_input_folder(tmp_path, capsys,
                                                                          prepared):
    raw = fineweb(tmp_path / "fineweb" / "a.parquet")
    refused(pipeline_main, ["select", "--input", raw, "--output", tmp_path / "sel", "--method",
                            "random"], capsys, tmp_path, raw, "prepare")
    refused(pipeline_main, ["select", "--input", prepared.parent, "--output", prepared.parent,
                            "--method", "random"], capsys, tmp_path, "--output")


def test_pipeline_select_that_fails_in_a_block_leaves_nothing(tmp_path, capsys, prepared):
    before = tree(tmp_path)
    code, err = run(pipeline_main, ["select", "--input", prepared.parent, "--output",
                                     tmp_path / "sel", "--method",
                                     "datamask:algorithm=DiSF,partial=0.05,n_epochs=2"], capsys)
    assert code == 2 and "--partial" in err.strip().splitlines()[-1]
    assert tree(tmp_path) == before

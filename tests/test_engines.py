"""The executors' shared parts (reproduce/pipeline/engines.py) as prepare and tokenize use them:
how input files are dealt into tasks, and the bad flags and inputs each stage refuses before any
work (exit 2, one line naming the flag or file, nothing written). The stages on a real Ray
cluster: tests/test_ray.py; on a real Slurm cluster: tests/test_slurm.py."""

import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from reproduce.cli import main
from reproduce.pipeline.engines import task_device, task_files


def test_every_file_goes_to_one_task_as_datatrove_readers_deal_them(tmp_path):
    from datatrove.io import get_datafolder

    files = [f"{i:03d}.parquet" for i in range(7)]
    for name in files:
        (tmp_path / name).touch()
    groups = [task_files(files, rank, 3) for rank in range(3)]
    assert groups == [files[0::3], files[1::3], files[2::3]]
    assert sorted(f for group in groups for f in group) == files
    # tokenize's ranks read through datatrove's ParquetReader, which shards a folder this way
    folder = get_datafolder(str(tmp_path))
    assert [folder.get_shard(rank, 3) for rank in range(3)] == groups


def test_gpu_tasks_get_their_own_device():
    assert task_device("local", 0, 4, 3, "cpu") == "cpu"
    assert [task_device("local", 1, 2, r, "cpu") for r in range(4)] == \
        ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert task_device("local", 2, 2, 1, "cpu") == "cuda:2"  # two GPUs a task: its first
    assert task_device("ray", 1, 8, 5, "cpu") == task_device("slurm", 1, 8, 5, "cpu") == "cuda"


@pytest.fixture
def shards(tmp_path):
    """A folder of two small FineWeb shards."""
    folder = tmp_path / "fineweb"
    folder.mkdir()
    for shard in range(2):
        pq.write_table(pa.table({"id": [f"doc-{shard}-{i}" for i in range(3)],
                                 "text": [f"Text {i} of shard {shard}." for i in range(3)]}),
                       folder / f"{shard:05d}.parquet")
    return folder


def stage(kind, shards, output, *flags):
    """The prepare or tokenize command line on `shards` (the other inputs need not exist: the
    refusals come first)."""
    if kind == "prepare":
        return ["prepare", "--input", str(shards), "--output", str(output), *flags]
    return ["tokenize", "--input", str(shards), "--selection", str(shards.parent / "sel.parquet"),
            "--tokenizer", str(shards.parent / "tok.json"), "--output", str(output), *flags]


def refused(capsys, argv) -> str:
    """The one line a refused command prints, after checking it exits 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("kind", ["prepare", "tokenize"])
def test_bad_executor_flags_are_refused_before_any_work(kind, shards, tmp_path, capsys,
                                                        monkeypatch):
    out = tmp_path / "out"
    if not torch.cuda.is_available():
        assert "--gpus_per_task 1" in refused(capsys, stage(kind, shards, out,
                                                            "--gpus_per_task", "1"))
    address = f"127.0.0.1:{free_port()}"
    assert f"--ray_address {address}: no Ray head answers there" in refused(
        capsys, stage(kind, shards, out, "--executor", "ray", "--ray_address", address))
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    assert "no `sbatch` on PATH" in refused(capsys, stage(kind, shards, out, "--executor", "slurm",
                                                          "--slurm_partition", "cpu"))
    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\nexit 1\n")
    sbatch.chmod(0o755)
    assert "needs --slurm_partition" in refused(capsys, stage(kind, shards, out,
                                                              "--executor", "slurm"))
    assert not out.exists()


def test_prepare_on_a_cluster_refuses_a_gpu_device_its_tasks_would_not_get(shards, tmp_path,
                                                                          capsys):
    """Ray and Slurm hand a task no GPU it did not ask for: --device cuda needs --gpus_per_task."""
    with socket.socket() as head:  # something answers where the head would
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        line = refused(capsys, stage("prepare", shards, tmp_path / "out", "--device", "cuda",
                                     "--executor", "ray", "--ray_address", address))
    assert line.endswith("--device cuda: an --executor ray task sees no GPU without "
                         "--gpus_per_task; give --gpus_per_task 1 for one GPU per task")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["prepare", "tokenize"])
def test_a_file_two_tasks_would_claim_and_an_output_inside_an_input_are_refused(
        kind, shards, tmp_path, capsys):
    out = tmp_path / "out"
    first = shards / "00000.parquet"
    if kind == "prepare":  # the same file twice
        line = refused(capsys, ["prepare", "--input", str(first), str(first), "--output",
                                str(out)])
        assert f"--input {first}: given twice" in line
    (shards / "00002.parquet").symlink_to(first)  # and again under another name
    line = refused(capsys, stage(kind, shards, out))
    assert f"--input {shards / '00002.parquet'}: the same file as {first}" in line
    (shards / "00002.parquet").unlink()
    line = refused(capsys, stage(kind, shards, shards / "out"))
    assert f"--output {shards / 'out'} is inside the input folder --input {shards}" in line
    assert not out.exists() and not (shards / "out").exists()


def test_flags_are_defined_once_for_every_data_stage():
    """prepare, select and tokenize take the same executor flags, from one definition."""
    from reproduce.cli import build_parser

    stages = build_parser()._subparsers._group_actions[0].choices
    flags = {name: {a.dest for a in stages[name]._actions}
             for name in ("prepare", "select", "tokenize")}
    shared = {"executor", "workers", "slurm_partition", "slurm_time", "cpus_per_task",
              "mem_per_cpu_gb", "gpus_per_task", "venv_path", "ray_address"}
    assert all(shared <= f for f in flags.values())
    assert "tasks" in flags["prepare"] and "tasks" in flags["tokenize"]


SINFO = "cpu|4|8000|(null)\ngpu|16|64000|gpu:a100:4(S:0-1),shard:8\n"  # sinfo -o '%R|%c|%m|%G'


@pytest.mark.parametrize("listing,flags,named", [
    (SINFO, ["--slurm_partition", "nope"], "--slurm_partition nope: no such partition"),
    (SINFO, ["--cpus_per_task", "8"], "--cpus_per_task 8 --mem_per_cpu_gb 0.5 --gpus_per_task 0: "
                                      "no node of partition cpu holds one task"),
    (SINFO, ["--cpus_per_task", "2", "--mem_per_cpu_gb", "8"], "--mem_per_cpu_gb 8.0"),
    (SINFO, ["--slurm_partition", "gpu", "--gpus_per_task", "5"], "(largest: 16 CPUs, 62.5 GiB, "
                                                                  "4 GPUs)"),
    (SINFO, ["--venv_path", "/no/such/activate"], "--venv_path /no/such/activate: no such file"),
    ("sleep", [], "sinfo did not answer in 0.2 s"),
])
def test_slurm_resources_no_node_has_are_refused_before_any_job(shards, tmp_path, capsys,
                                                                monkeypatch, listing, flags,
                                                                named):
    """sinfo's partitions and node sizes (a fake sinfo and sbatch on PATH stand in for the
    controller) refuse a task no node holds; a controller that does not answer is one line."""
    monkeypatch.setattr("reproduce.pipeline.engines.SINFO_TIMEOUT_S", 0.2)
    for name, body in (("sbatch", "exit 1"),
                       ("sinfo", "exec sleep 5" if listing == "sleep" else f"printf '{listing}'")):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    out = tmp_path / "out"
    line = refused(capsys, stage("tokenize", shards, out, "--executor", "slurm",
                                 "--slurm_partition", "cpu", "--cpus_per_task", "1",
                                 "--mem_per_cpu_gb", "0.5", *flags))
    assert named in line
    assert not out.exists()


def test_a_partition_of_unequal_nodes_is_not_refused(tmp_path, monkeypatch):
    """sinfo writes "4+" for a node group of several sizes (its smallest): one of them may hold
    the task, so it is not refused."""
    from reproduce.pipeline.engines import check_partition

    (tmp_path / "sinfo").write_text("#!/bin/sh\nprintf 'cpu|4+|8000+|(null)\\n'\n")
    (tmp_path / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    check_partition("cpu", {"cpus_per_task": 64, "mem_per_cpu_gb": 4, "gpus_per_task": 0})

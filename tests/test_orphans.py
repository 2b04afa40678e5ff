"""A kill -9 of `datamask pipeline select --workers 2` leaves no process behind (the Manager, the
forkserver and its workers die with the command: datamask.processes), and the rerun completes
the selection an uninterrupted run writes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, write_shard

DATAMASK = str(Path(sys.executable).with_name("datamask"))
# 1.5 s (idle core) to 3 s a block: long enough to be killed mid-run
SLOW_LEARNER = "datamask:n_epochs=6000,stop_every=0,n_rollout=8,device=cpu"


def session_processes(session: int) -> list[str]:
    """The live (not zombie) processes of a session, as 'pid state command', read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:  # it exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(f"{entry.name} {fields[0]} {command}")
    return found


def select_command(prepared: Path, output: Path) -> list[str]:
    return [DATAMASK, "pipeline", "select", "--input", str(prepared), "--output", str(output),
            "--method", SLOW_LEARNER, "--select_ratio", "0.1", "--block_size", "60",
            "--workers", "2"]




@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_select_leaves_no_process_and_the_rerun_completes(tmp_path):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    data = gaussian_data(120, 5, 0)
    write_shard(prepared / "00.parquet", data,
                id=pa.array([f"doc-{i}" for i in range(len(data))]))
    output = tmp_path / "killed"
    process = subprocess.Popen(select_command(prepared, output), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = output / "logs" / "blocks" / "logs"
    try:
        deadline = time.monotonic() + 120
        while len(list(logs.glob("task_*.log"))) < 2:  # both workers have started their block
            assert process.poll() is None and time.monotonic() < deadline, "no block started"
            time.sleep(0.2)
        assert len(session_processes(process.pid)) >= 4  # command, Manager, forkserver, workers
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert not (output / "selection.parquet").exists()  # killed mid-run
        deadline = time.monotonic() + 10
        while session_processes(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_processes(process.pid) == []
    finally:  # a failed check must not leave the processes it found running
        for line in session_processes(process.pid):
            os.kill(int(line.split()[0]), signal.SIGKILL)

    # the rerun, and an uninterrupted run beside it (at once: each waits mostly on start-up)
    runs = {}
    for folder in (output, tmp_path / "whole"):
        with open(tmp_path / f"{folder.name}.log", "w") as log:
            runs[log.name] = subprocess.Popen(select_command(prepared, folder),
                                              stdout=subprocess.DEVNULL, stderr=log)
    for log, done in runs.items():
        assert done.wait(timeout=300) == 0, Path(log).read_text()[-2000:]
    assert pq.read_table(output / "selection.parquet").equals(
        pq.read_table(tmp_path / "whole" / "selection.parquet"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_subprocess_started_with_die_with_parent_dies_with_a_killed_parent(tmp_path):
    """The use for subprocess children (the downstream orchestrator's): preexec_fn arms the
    child before it execs; a kill -9 of its parent takes it down, a sibling without it stays."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import functools, os, subprocess, sys, time\n"
        "from datamask.processes import die_with_parent\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "subprocess.Popen(sleep, preexec_fn=functools.partial(die_with_parent, os.getpid()))\n"
        "subprocess.Popen(sleep)\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n")], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "started\n"
        assert len(session_processes(parent.pid)) == 3
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while len(session_processes(parent.pid)) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        left = session_processes(parent.pid)
        assert len(left) == 1 and "time.sleep(60)" in left[0]  # the unarmed sibling alone
    finally:
        parent.stdout.close()
        for line in session_processes(parent.pid):
            os.kill(int(line.split()[0]), signal.SIGKILL)

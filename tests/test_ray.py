"""`pipeline select --executor ray` on a real Ray cluster: a head started here (loopback only,
2 CPUs), the stage run as a user runs it (the CLI, in its own process), a Ray worker killed
while it computes a block, and the selection compared row for row with the local executor's."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, write_shard

from datamask.errors import UserError
from reproduce.pipeline.select import run_select

METHOD, RATIO, BLOCK = "facility-greedy", 0.25, 3000  # ~1 s a block: long enough to be killed in
TASK_FLAGS = ["--cpus_per_task", "1", "--mem_per_cpu_gb", "0.5"]
STARTUP_S, RUN_S = 90, 180  # bounds, never reached on an idle machine (~5 s and ~20 s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head():
    """A one-node Ray cluster in its own process group, gone (every process of the group) at the
    end. Ray replaces 127.0.0.1 by the machine's address unless told it is a one-machine cluster
    (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), which also makes it listen on loopback only."""
    # a short folder: Ray's Unix sockets live under it (108-byte path limit)
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    address = f"127.0.0.1:{free_port()}"
    # a token of its own: a ~/.ray/auth_token left by any earlier local ray.init() would otherwise
    # switch the head to token mode and lock out a driver that does not send it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    log = (temp / "head.log").open("w")
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
         "--node-ip-address", "127.0.0.1", "--port", address.split(":")[1], "--num-cpus", "2",
         "--object-store-memory", str(100 * 2**20), "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", str(temp)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while "Ray runtime started" not in (temp / "head.log").read_text():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray head did not start:\n{(temp / 'head.log').read_text()}")
            time.sleep(0.2)
        yield {"address": address, "env": env, "session": head.pid}
    finally:
        head.terminate()
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        # what is left of the session (Ray's GCS and raylet outlive `ray start`; its workers
        # have process groups of their own, but stay in this session)
        left = in_session(head.pid)
        for proc in left:
            proc.kill()
        psutil.wait_procs(left, timeout=10)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Two prepared shards, 6,000 rows: two blocks of 3,000."""
    folder = tmp_path_factory.mktemp("ray") / "prepared"
    folder.mkdir()
    for shard in range(2):
        data = gaussian_data(3000, 16, seed=shard)
        data.ids[:] += shard * 3000
        write_shard(folder / f"{shard:05d}.parquet", data,
                    id=pa.array([f"doc-{i}" for i in data.ids]))
    return folder


@pytest.fixture(scope="module")
def local_selection(prepared, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "select"
    return pq.read_table(run_select([str(prepared)], out, METHOD, RATIO, BLOCK)["output"])


def select_on_ray(ray_head, prepared: Path, output: Path) -> subprocess.Popen:
    """The select stage's CLI on the cluster, one block at a time."""
    return subprocess.Popen(
        [sys.executable, "-m", "reproduce", "select", "--input", str(prepared), "--output",
         str(output), "--method", METHOD, "--select_ratio", str(RATIO), "--block_size",
         str(BLOCK), "--executor", "ray", "--ray_address", ray_head["address"], "--workers", "1",
         *TASK_FLAGS], env=ray_head["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def in_session(session: int) -> list[psutil.Process]:
    """The processes of the Ray head's session: the cluster started here, nothing else."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == session:
                found.append(proc)
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def worker_running(session: int, block: int) -> list[psutil.Process]:
    """The Ray worker (actor and the pool process it forked) computing `block`: datatrove's task
    log for that rank is open in it."""
    log = f"ray_logs/logs/task_{block:05d}.log"
    for proc in in_session(session):
        try:
            if any(log in f.path for f in proc.open_files()):
                return [proc, proc.parent()]
        except psutil.Error:
            continue
    return []


def finish(run: subprocess.Popen) -> str:
    try:
        output, _ = run.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        run.kill()
        pytest.fail(f"select on Ray ran over {RUN_S} s:\n{run.communicate()[0][-3000:]}")
    assert run.returncode == 0, output[-3000:]
    return output


@pytest.fixture(scope="module")
def killed_run(ray_head, prepared, tmp_path_factory):
    """Block 0 finishes, the worker computing block 1 is killed (SIGKILL, like the OOM killer),
    datatrove resubmits that block and the stage completes."""
    out = tmp_path_factory.mktemp("ray-run") / "select"
    run = select_on_ray(ray_head, prepared, out)
    deadline = time.monotonic() + RUN_S
    while not (victims := worker_running(ray_head["session"], 1)):
        assert run.poll() is None, f"select ended before block 1 ran:\n{run.stdout.read()}"
        if time.monotonic() > deadline:
            run.kill()
            pytest.fail(f"block 1 never started on the Ray cluster:\n{run.communicate()[0]}")
        time.sleep(0.05)
    first_done = (out / "blocks" / "00000.parquet").stat().st_mtime_ns
    block_1_done_before = (out / "logs" / "blocks" / "completions" / "00001").exists()
    for proc in victims:
        proc.kill()
    return {"out": out, "log": finish(run), "first_done": first_done,
            "block_1_done_before": block_1_done_before}


def test_ray_selection_equals_the_local_one_after_a_worker_is_killed(killed_run,
                                                                     local_selection):
    out = killed_run["out"]
    assert not killed_run["block_1_done_before"]  # the kill came while block 1 was computing
    assert "failed with" in killed_run["log"]  # datatrove saw the dead worker and resubmitted
    assert (out / "blocks" / "00000.parquet").stat().st_mtime_ns == killed_run["first_done"]
    assert sorted(p.name for p in (out / "logs" / "blocks" / "completions").iterdir()) == \
        ["00000", "00001"]
    ray_selection = pq.read_table(out / "selection.parquet")
    assert ray_selection.num_rows == 6000
    assert ray_selection.equals(local_selection)


def test_rerun_on_ray_skips_finished_blocks(killed_run, ray_head, prepared):
    out = killed_run["out"]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "blocks").iterdir()}
    selection = pq.read_table(out / "selection.parquet")
    log = finish(select_on_ray(ray_head, prepared, out))
    assert "All 2 tasks appear to be completed already" in log
    assert {p.name: p.stat().st_mtime_ns for p in (out / "blocks").iterdir()} == before
    assert pq.read_table(out / "selection.parquet").equals(selection)


def test_a_task_no_ray_node_can_hold_is_refused_before_any_work(ray_head, prepared, tmp_path,
                                                                monkeypatch):
    """Ray would queue it forever; the stage says which flags to lower instead."""
    for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(name, ray_head["env"][name])
    cluster = {"ray_address": ray_head["address"], "cpus_per_task": 3, "mem_per_cpu_gb": 0.5}
    with pytest.raises(UserError, match="--cpus_per_task 3 .*no node of the Ray cluster"):
        run_select([str(prepared)], tmp_path / "select", METHOD, RATIO, BLOCK, executor="ray",
                   cluster=cluster)
    assert not (tmp_path / "select").exists()


def test_an_address_where_no_ray_head_listens_is_refused_at_once(prepared, tmp_path):
    """ray.init would retry it for minutes."""
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(UserError, match=f"--ray_address {address}: no Ray head answers there"):
        run_select([str(prepared)], tmp_path / "select", METHOD, RATIO, BLOCK, executor="ray",
                   cluster={"ray_address": address})
    assert not (tmp_path / "select").exists()

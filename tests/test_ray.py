"""The data stages with `--executor ray` on a real Ray cluster: a head started here (loopback only,
2 CPUs), each stage run as a user runs it (the CLI, in its own process). select and prepare have
a Ray worker killed while it computes a task, and their outputs are compared with the local
executor's (the selection row for row; the prepared shards' ids and quality exactly, embeddings
to 1e-5); tokenize's token files and export's Parquet files byte for byte; dedup's keep-list row
for row; score's shards column for column."""

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import gaussian_data, prepare_locally, write_shard
from test_dedup import corpus  # noqa: F401 (the fixture: a corpus with planted copies)
from test_export import SMALL_FILES, root  # noqa: F401 (root: that corpus with a selection)
from test_export import export as export_locally

from datamask.data import read_dataset
from datamask.errors import UserError
from reproduce.pipeline.dedup import KEEP_FILE, REMOVALS_FILE, DedupConfig, run_dedup
from reproduce.pipeline.export import CARD, DATA, SUMMARY
from reproduce.pipeline.score import ScoreConfig, run_score
from reproduce.pipeline.select import TERM_SCALE, UNION_PLAN, SelectConfig, run_select
from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer

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
def block_shards(tmp_path_factory):
    """Two prepared shards, 6,000 rows: two blocks of 3,000."""
    folder = tmp_path_factory.mktemp("ray") / "prepared"
    folder.mkdir()
    for shard in range(2):
        data = gaussian_data(3000, 16, seed=shard)
        data.ids[:] += shard * 3000
        write_shard(folder / f"{shard:05d}.parquet", data,
                    id=pa.array([f"doc-{i}" for i in data.ids]))
    return folder


MERGE = {"merge_ratio": 0.9, "merge_rows": 3000}  # a union of 5,400 picks: two ~1 s parts


@pytest.fixture(scope="module")
def local_selection(block_shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "select"
    return pq.read_table(run_select(SelectConfig(input=[str(block_shards)], output=out,
                                                 method=METHOD, select_ratio=RATIO,
                                                 block_size=BLOCK, **MERGE))["output"])


def on_ray(ray_head, *stage: str) -> subprocess.Popen:
    """A stage's CLI on the cluster, one task at a time."""
    return subprocess.Popen(
        [sys.executable, "-m", "reproduce", *stage, "--executor", "ray", "--ray_address",
         ray_head["address"], "--workers", "1", *TASK_FLAGS], env=ray_head["env"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def select_on_ray(ray_head, prepared: Path, output: Path) -> subprocess.Popen:
    """select with the merge round: two blocks, then the union of their picks in two parts."""
    return on_ray(ray_head, "select", "--input", str(prepared), "--output", str(output),
                  "--method", METHOD, "--select_ratio", str(RATIO), "--block_size", str(BLOCK),
                  *(f"--{flag}={value}" for flag, value in MERGE.items()))


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
    log for that rank is open in it. Only Ray's workers (titled ray::) are searched: the cluster's
    daemons hold hundreds of descriptors, and this is polled twenty times a second."""
    log = f"ray_logs/logs/task_{block:05d}.log"
    for proc in in_session(session):
        try:
            if (proc.cmdline() or [""])[0].startswith("ray::") and \
                    any(log in f.path for f in proc.open_files()):
                return [proc, proc.parent()]
        except psutil.Error:
            continue
    return []


def wait_for_task(ray_head, run: subprocess.Popen, rank: int) -> list[psutil.Process]:
    """The worker processes of task `rank`, once it has started."""
    deadline = time.monotonic() + RUN_S
    while not (victims := worker_running(ray_head["session"], rank)):
        assert run.poll() is None, f"the stage ended before task {rank} ran:\n{run.stdout.read()}"
        if time.monotonic() > deadline:
            run.kill()
            pytest.fail(f"task {rank} never started on the Ray cluster:\n{run.communicate()[0]}")
        time.sleep(0.05)
    return victims


def finish(run: subprocess.Popen) -> str:
    try:
        output, _ = run.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        run.kill()
        pytest.fail(f"the stage on Ray ran over {RUN_S} s:\n{run.communicate()[0][-3000:]}")
    assert run.returncode == 0, output[-3000:]
    return output


@pytest.fixture(scope="module")
def killed_run(ray_head, block_shards, tmp_path_factory):
    """One select with its merge round, two workers killed (SIGKILL, like the OOM killer): block 0
    finishes, the worker computing block 1 is killed; later the one computing the merge round's
    part 1. datatrove resubmits each and the stage completes."""
    out = tmp_path_factory.mktemp("ray-run") / "select"
    run = select_on_ray(ray_head, block_shards, out)
    victims = wait_for_task(ray_head, run, 1)
    first_done = (out / "blocks" / "00000.parquet").stat().st_mtime_ns
    block_1_done_before = (out / "logs" / "blocks" / "completions" / "00001").exists()
    for proc in victims:
        proc.kill()
    deadline = time.monotonic() + RUN_S
    while not (out / UNION_PLAN).exists():  # Ray's task logs are named by rank, not by round
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-3000:]
        time.sleep(0.05)
    victims = wait_for_task(ray_head, run, 1)
    part_1_done_before = (out / "logs" / "unions" / "completions" / "00001").exists()
    for proc in victims:
        proc.kill()
    return {"out": out, "log": finish(run), "first_done": first_done,
            "block_1_done_before": block_1_done_before, "part_1_done_before": part_1_done_before}


def test_ray_selection_equals_the_local_one_after_a_worker_is_killed(killed_run,
                                                                     local_selection):
    out = killed_run["out"]
    assert not killed_run["block_1_done_before"]  # the kill came while block 1 was computing
    assert killed_run["log"].count("failed with") >= 2  # datatrove saw each dead worker
    assert (out / "blocks" / "00000.parquet").stat().st_mtime_ns == killed_run["first_done"]
    assert sorted(p.name for p in (out / "logs" / "blocks" / "completions").iterdir()) == \
        ["00000", "00001"]
    ray_selection = pq.read_table(out / "selection.parquet")
    assert ray_selection.num_rows == 6000
    assert ray_selection.equals(local_selection)


def test_rerun_on_ray_skips_finished_blocks(killed_run, ray_head, block_shards):
    out = killed_run["out"]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "blocks").iterdir()}
    selection = pq.read_table(out / "selection.parquet")
    log = finish(select_on_ray(ray_head, block_shards, out))
    assert "All 2 tasks appear to be completed already" in log
    assert {p.name: p.stat().st_mtime_ns for p in (out / "blocks").iterdir()} == before
    assert pq.read_table(out / "selection.parquet").equals(selection)


def test_merge_round_on_ray_after_a_killed_worker_equals_the_local_one(killed_run,
                                                                       local_selection):
    """The worker computing the merge round's part 1 was killed in the same run; datatrove
    resubmitted that part and the selection equals the local executor's row for row."""
    out = killed_run["out"]
    assert not killed_run["part_1_done_before"]  # the kill came while part 1 was computing
    assert sorted(p.name for p in (out / "logs" / "unions" / "completions").iterdir()) == \
        ["00000", "00001"]
    assert pq.read_table(out / "selection.parquet").equals(local_selection)
    assert json.loads((out / "summary.json").read_text())["unions"] == 2


def test_neighbourhood_blocks_and_the_term_scale_on_ray_equal_the_local_ones(ray_head,
                                                                            block_shards,
                                                                            tmp_path):
    """joint-greedy on neighbourhood blocks: the plan, cut where it is written, and the term scale
    one task fits are the local executor's to the digit, and so is every block's selection."""
    flags = {"partition": "neighbourhood", "partition_sample": 2000}
    local = run_select(SelectConfig(input=[str(block_shards)], output=tmp_path / "local",
                                    method="joint-greedy", select_ratio=0.1, block_size=BLOCK,
                                    **flags))
    out = tmp_path / "ray"
    finish(on_ray(ray_head, "select", "--input", str(block_shards), "--output", str(out),
                  "--method", "joint-greedy", "--select_ratio", "0.1", "--block_size", str(BLOCK),
                  *(f"--{flag}={value}" for flag, value in flags.items())))
    for name in ("plan.parquet", "selection.parquet"):
        assert pq.read_table(out / name).equals(pq.read_table(tmp_path / "local" / name)), name
    assert (out / TERM_SCALE).read_text() == (tmp_path / "local" / TERM_SCALE).read_text()
    assert json.loads((out / "summary.json").read_text())["partition"] == "neighbourhood"


def test_a_task_no_ray_node_can_hold_is_refused_before_any_work(ray_head, block_shards,
                                                                tmp_path):
    """Ray would queue it forever; the stage says which flags to lower instead. Run in its own
    process, as a user runs it: Ray reads its authentication settings when it is first imported,
    so a driver inside the suite's process would carry whatever an earlier test imported it
    with, not this cluster's token, and wait on the head."""
    out = tmp_path / "select"
    done = subprocess.run(
        [sys.executable, "-m", "reproduce", "select", "--input", str(block_shards), "--output",
         str(out), "--method", METHOD, "--select_ratio", str(RATIO), "--block_size", str(BLOCK),
         "--executor", "ray", "--ray_address", ray_head["address"], "--cpus_per_task", "3",
         "--mem_per_cpu_gb", "0.5"],
        env=ray_head["env"], capture_output=True, text=True, timeout=RUN_S)
    assert done.returncode == 2, done.stderr[-3000:]
    assert re.search("--cpus_per_task 3 .*no node of the Ray cluster",
                     done.stderr.strip().splitlines()[-1])
    assert not out.exists()


def test_an_address_where_no_ray_head_listens_is_refused_at_once(block_shards, tmp_path):
    """ray.init would retry it for minutes."""
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(UserError, match=f"--ray_address {address}: no Ray head answers there"):
        run_select(SelectConfig(input=[str(block_shards)], output=tmp_path / "select",
                                method=METHOD, select_ratio=RATIO, block_size=BLOCK, executor="ray",
                                cluster={"ray_address": address}))
    assert not (tmp_path / "select").exists()


# ---------------------------------------------------------------- prepare and tokenize on Ray

PREPARE_FLAGS = ("--max_seq_length", "32", "--quality", "heuristic", "--no_progress",
                 "--tasks", "2")


def prepare_on_ray(ray_head, shards: Path, output: Path, model: Path) -> subprocess.Popen:
    """prepare with the suite's small static model: no task, nor the submitting process, imports
    sentence-transformers (the transformer's prepare is test_pipeline's; both embedders pickle
    alike, without their model)."""
    return on_ray(ray_head, "prepare", "--input", str(shards), "--output", str(output),
                  "--embedding_model", f"static:{model}", *PREPARE_FLAGS)


def holding(session: int, folder: Path) -> list[str]:
    """The cluster's processes that have a file under `folder` open or run in it."""
    found = []
    for proc in in_session(session):
        try:
            if str(folder) in proc.cwd() or any(str(folder) in f.path
                                                for f in proc.open_files()):
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:100]}")
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def local_prepared(pool, small_static, tmp_path_factory):
    """The local executor's prepare of the same shards with the same model and scorer, in a
    folder of its own: conftest's `prepared` holds the downstream run's transformer embeddings."""
    return prepare_locally(pool[0] / "fineweb",
                           tmp_path_factory.mktemp("local-prepare") / "prepared",
                           embedding_model=f"static:{small_static}")


@pytest.fixture(scope="module")
def prepare_killed(ray_head, pool, small_static, tmp_path_factory):
    """Task 0 prepares the pool's first shard; the worker running task 1 (the second shard) is
    killed (SIGKILL) in the middle of it, before its shard and marker; datatrove resubmits the
    task and the stage completes."""
    out = tmp_path_factory.mktemp("ray-prepare") / "prepared"
    run = prepare_on_ray(ray_head, pool[0] / "fineweb", out, small_static)
    victims = wait_for_task(ray_head, run, 1)
    before = {"marker": (out / "logs" / "tasks" / "completions" / "00001").exists(),
              "shards": sorted(p.name for p in out.glob("*.parquet"))}
    for proc in victims:
        proc.kill()
    return {"out": out, "log": finish(run), **before}


def test_prepare_on_ray_equals_the_local_executor_after_a_worker_is_killed(prepare_killed,
                                                                           local_prepared,
                                                                           ray_head):
    out = prepare_killed["out"]
    local = sorted(local_prepared.glob("*.parquet"))
    assert not prepare_killed["marker"] and prepare_killed["shards"] == [local[0].name]
    assert "failed with" in prepare_killed["log"]  # datatrove saw the dead worker and resubmitted
    assert sorted(p.name for p in out.glob("*.parquet")) == [p.name for p in local]
    for path in local:
        theirs, ours = pq.read_table(path), pq.read_table(out / path.name)
        for column in ("id", "chunk_id", "quality_score", "text_length"):
            assert ours.column(column).equals(theirs.column(column)), column
        np.testing.assert_allclose(read_dataset([out / path.name]).features,
                                   read_dataset([path]).features, rtol=0, atol=1e-5)
    records = json.loads((out / "prepare.json").read_text())["files"]
    assert {name: r["embedded"] for name, r in records.items()} == \
        {p.name: pq.read_metadata(p).num_rows for p in local}
    deadline = time.monotonic() + 10  # Ray tears the task's actor down as the stage ends
    while (left := holding(ray_head["session"], out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


def test_rerun_of_prepare_on_ray_skips_the_finished_tasks(prepare_killed, ray_head, pool,
                                                          small_static):
    out = prepare_killed["out"]
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    # as if killed after its tasks, before the merge (with prepare.json there, a rerun of
    # unchanged inputs returns before any executor starts: test_pipeline)
    (out / "prepare.json").unlink()
    log = finish(prepare_on_ray(ray_head, pool[0] / "fineweb", out, small_static))
    assert "All 2 tasks appear to be completed already" in log
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")} == before
    records = json.loads((out / "prepare.json").read_text())["files"]
    assert [r["embedded"] for r in records.values()] == [0, 0]  # nothing embedded this time


def test_score_on_ray_writes_the_local_executors_score_shards(ray_head, pool, tmp_path):
    """The score stage (CPU nodes' half of prepare --scores) on Ray: the local executor's shards,
    every column equal, the scorer named in each shard's metadata the same."""
    local = tmp_path / "local"
    run_score(ScoreConfig(input=[pool[0] / "fineweb"], output=local, quality="heuristic",
                          tasks=2, no_progress=True))
    finish(on_ray(ray_head, "score", "--input", str(pool[0] / "fineweb"), "--output",
                  str(tmp_path / "ray"), "--quality", "heuristic", "--tasks", "2",
                  "--no_progress"))
    shards = sorted(local.glob("*.parquet"))
    assert len(shards) == 2
    assert sorted(p.name for p in (tmp_path / "ray").glob("*.parquet")) == [p.name for p in shards]
    for path in shards:
        ours, theirs = pq.read_table(tmp_path / "ray" / path.name), pq.read_table(path)
        assert ours.replace_schema_metadata(None).equals(theirs.replace_schema_metadata(None))
        assert [json.loads(table.schema.metadata[b"datamask.score"])["config"]
                for table in (ours, theirs)] == [{"quality": "datatrove-heuristics"}] * 2


def test_tokenize_on_ray_writes_the_local_executors_token_files(ray_head, pool,
                                                                tmp_path_factory):
    shards, work = pool[0] / "fineweb", tmp_path_factory.mktemp("ray-tokenize")
    ids = pa.concat_tables([pq.read_table(p, columns=["id"])
                            for p in sorted(shards.glob("*.parquet"))]).column("id")
    selection = work / "selection.parquet"
    pq.write_table(pa.table({"id": ids, "selected": [i % 3 != 0 for i in range(len(ids))]}),
                   selection)
    train_tokenizer([str(shards)], work / "tokenizer.json", vocab_size=300)
    local = run_tokenize(TokenizeConfig(input=shards, selection=selection,
                                        tokenizer=work / "tokenizer.json", output=work / "local",
                                        tasks=2))
    finish(on_ray(ray_head, "tokenize", "--input", str(shards), "--selection", str(selection),
                  "--tokenizer", str(work / "tokenizer.json"), "--output", str(work / "ray"),
                  "--tasks", "2"))

    def token_files(folder: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(folder.glob("*.ds*"))}

    assert len(token_files(work / "ray")) >= 3  # .ds, .ds.index, .ds.metadata
    assert token_files(work / "ray") == token_files(work / "local")
    summary = json.loads((work / "ray" / "summary.json").read_text())
    assert summary["documents"] == local["documents"] == sum(i % 3 != 0 for i in range(len(ids)))
    assert summary["tokens"] == local["tokens"] and summary["executor"] == "ray"
    assert not (work / "ray" / "ranks").exists()  # the ranks' files go once merged


def test_dedup_on_ray_writes_the_local_executors_keep_list(ray_head, corpus, tmp_path):
    # two LSH bands instead of FineWeb's 14 (test_dedup runs those): every MinHash round still
    # runs, with twelve Ray actors fewer in the buckets round
    local = tmp_path / "local"
    run_dedup(DedupConfig(input=corpus / "fineweb", prepared=corpus / "prepared", output=local,
                          num_buckets=2, tasks=2))
    finish(on_ray(ray_head, "dedup", "--input", str(corpus / "fineweb"), "--prepared",
                  str(corpus / "prepared"), "--output", str(tmp_path / "ray"), "--tasks", "2",
                  "--num_buckets", "2"))
    for name in (KEEP_FILE, REMOVALS_FILE):
        assert pq.read_table(tmp_path / "ray" / name).equals(pq.read_table(local / name)), name
    removed = {row["id"]: row for row in pq.read_table(local / REMOVALS_FILE).to_pylist()}
    [gone] = {"exact-copy", "s1-4"} & set(removed)  # one of the pair, whichever datatrove roots
    assert removed[gone]["reason"] == "minhash"
    assert removed["embedding-copy"]["reason"] == "embedding"


def test_export_on_ray_writes_the_local_executors_parquet_files(ray_head, root, tmp_path):  # noqa: F811
    local = export_locally(root, tmp_path / "local", tasks=3)
    finish(on_ray(ray_head, "export", "--input", str(root / "fineweb"), "--selection",
                  str(root / "select"), "--prepared", str(root / "prepared"), "--output",
                  str(tmp_path / "ray"), "--tasks", "3",
                  "--shard_mb", str(SMALL_FILES["shard_mb"]),
                  "--row_group_rows", str(SMALL_FILES["row_group_rows"])))

    def parquet_files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes()
                for p in sorted((folder / DATA).glob("*/*.parquet"))}

    assert len(parquet_files(tmp_path / "ray")) > 3  # several files in each shard's folder
    assert parquet_files(tmp_path / "ray") == parquet_files(tmp_path / "local")
    summary = json.loads((tmp_path / "ray" / SUMMARY).read_text())
    assert summary["executor"] == "ray" and summary["counts"] == local["counts"]
    assert (tmp_path / "ray" / CARD).is_file()

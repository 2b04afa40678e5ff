"""Where the data stages' tasks run: datatrove's LocalPipelineExecutor, RayPipelineExecutor or
SlurmPipelineExecutor, behind one set of flags.

score, prepare, select and tokenize each cut their work into independent executor tasks (file
groups or blocks) that write datatrove completion markers, then run one merge task; this module
holds what they share: the flags, the checks made before any work, the executors, and running the
tasks then their merge (on Slurm: a job array and a job after it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
from contextlib import contextmanager, nullcontext
from pathlib import Path

from datamask.data import write_json_atomic
from datamask.errors import UserError, quoted
from datamask.options import Range, option
from datamask.shared import require

from .common import NON_NEGATIVE, POSITIVE, positive_number

EXECUTORS = ("local", "slurm", "ray")
SINFO_TIMEOUT_S = 60  # a controller that is down keeps sinfo waiting


@dataclasses.dataclass(kw_only=True)
class Executed:
    """The settings of where a stage's tasks run, which every stage config that runs on an
    executor takes from the shared executor flags (add_executor_flags), not its own."""

    executor: str = option("local", "datatrove executor running the tasks", choices=EXECUTORS,
                           flag=False)
    workers: int = option(1, "tasks run at once (local: processes)", within=Range(1), flag=False)
    cluster: dict = dataclasses.field(default_factory=dict)  # the Slurm / Ray flags


def add_executor_flags(parser, unit: str, tasks: bool = False) -> None:
    """--executor, --workers (and --tasks) and the Slurm / Ray group; `unit` names what a task
    computes, for the help."""
    parser.add_argument("--executor", default="local", choices=EXECUTORS,
                        help=f"datatrove executor running the {unit} (default: %(default)s)")
    parser.add_argument("--workers", type=POSITIVE, default=1,
                        help=f"{unit} run at once (local: processes) (default: %(default)s)")
    if tasks:
        parser.add_argument("--tasks", type=POSITIVE,
                            help="executor tasks; task r of N takes the input files r, r+N, ... "
                                 "(default: --workers, at most one per file)")
    group = parser.add_argument_group("slurm / ray")
    group.add_argument("--slurm_partition")
    group.add_argument("--slurm_time", type=slurm_time, default="24:00:00")
    group.add_argument("--cpus_per_task", type=POSITIVE, default=4)
    group.add_argument("--mem_per_cpu_gb", type=positive_number, default=4)
    group.add_argument("--gpus_per_task", type=NON_NEGATIVE, default=0,
                       help="GPUs each task asks for (local: each running task takes its own)")
    group.add_argument("--venv_path", help="virtualenv activate script the Slurm jobs source")
    group.add_argument("--ray_address",
                       help="Ray cluster to run on, host:port of its head (default: $RAY_ADDRESS, "
                            "else a new Ray instance on this machine)")


def cluster_flags(args) -> dict:
    """The Slurm / Ray flags as the `cluster` dict the stages take."""
    return {"partition": args.slurm_partition, "time": args.slurm_time,
            "cpus_per_task": args.cpus_per_task, "mem_per_cpu_gb": args.mem_per_cpu_gb,
            "gpus_per_task": args.gpus_per_task, "venv_path": args.venv_path,
            "ray_address": args.ray_address}


def check_answers(address: str | None) -> None:
    """A head's host:port must accept a connection: ray.init retries an address where nothing
    listens for minutes before it gives up."""
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit():  # none (a local instance), "auto", ray://...
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as err:
        raise UserError(f"--ray_address {address}: no Ray head answers there ({quoted(err)}); "
                        f"start one with `ray start --head` or fix the address") from None


def slurm_time(text: str) -> str:
    """An argparse type: a time limit in one of sbatch's forms (minutes, minutes:seconds,
    hours:minutes:seconds, days-hours[:minutes[:seconds]], unlimited), refused before a job is
    submitted rather than by sbatch once the stage has set up its folders."""
    if not re.fullmatch(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|unlimited|infinite", text.lower()):
        raise argparse.ArgumentTypeError(f"must be a Slurm time limit such as 90, 12:00:00 or "
                                         f"1-12, got {text!r}")
    return text


def check_executor(kind: str, workers: int, cluster: dict | None) -> None:
    """What can be refused before any work: an unknown executor, no worker, task resources of
    none or fewer than none, Slurm without sbatch, a partition its controller does not list or
    whose nodes cannot hold one task, a virtualenv script that is not there, a Ray address where
    no head answers, CPUs or GPUs that this machine does not have for a local run or a Ray
    instance started here."""
    cluster = cluster or {}
    if kind not in EXECUTORS:
        raise UserError(f"--executor must be local, slurm or ray, got {kind!r}")
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    cpus, gpus = cluster.get("cpus_per_task", 1), cluster.get("gpus_per_task") or 0
    mem = cluster.get("mem_per_cpu_gb", 1)
    for flag, value, least in (("--cpus_per_task", cpus, 1), ("--gpus_per_task", gpus, 0)):
        if value < least:  # Ray would wait forever for a task of 0 CPUs
            raise UserError(f"{flag} must be at least {least}, got {value}")
    if not mem > 0:
        raise UserError(f"--mem_per_cpu_gb must be greater than 0, got {mem}")
    if kind == "slurm":
        if not shutil.which("sbatch"):
            raise UserError("--executor slurm: no `sbatch` on PATH; run it on a Slurm login node")
        if not cluster.get("partition"):
            raise UserError("--executor slurm needs --slurm_partition")
        venv = cluster.get("venv_path")
        if venv and not Path(venv).is_file():
            raise UserError(f"--venv_path {venv}: no such file (the activate script the Slurm "
                            f"jobs source, e.g. .venv/bin/activate)")
        check_partition(cluster["partition"], cluster)
    if kind == "ray":
        require("ray", "--executor ray")
        address = cluster.get("ray_address") or os.environ.get("RAY_ADDRESS")
        check_answers(address)
        if not address:  # the Ray instance started here has this machine's CPUs and GPUs
            check_this_machine(cpus, gpus, 1, "one task of a Ray instance started here")
    if kind == "local" and gpus:
        check_this_machine(0, gpus, workers, f"--workers {workers}")


def check_this_machine(cpus: int, gpus: int, at_once: int, where: str) -> None:
    """`at_once` tasks of `cpus` CPUs and `gpus` GPUs each run together on this machine (`where`
    says how): refused where it has fewer (GPUs as torch sees them: the tasks compute on
    torch)."""
    have = os.cpu_count() or 1
    if cpus * at_once > have:
        raise UserError(f"--cpus_per_task {cpus}: {where} needs {cpus * at_once} CPUs, this "
                        f"machine has {have}")
    if gpus:
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < gpus * at_once:
            raise UserError(f"--gpus_per_task {gpus}: {where} needs {gpus * at_once} GPU(s), "
                            f"torch sees {have} here")


def sinfo(*fields: str) -> list[list[str]]:
    """The Slurm controller's node groups, one row of `fields` (sinfo format letters) each;
    a controller that cannot be reached, or does not answer in a minute, is refused."""
    if not shutil.which("sinfo"):
        raise UserError("--executor slurm: no `sinfo` on PATH; run it on a Slurm login node")
    try:
        listing = subprocess.run(["sinfo", "-h", "-o", "|".join(f"%{f}" for f in fields)],
                                 capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"--executor slurm: sinfo did not answer in {SINFO_TIMEOUT_S:g} s; is "
                        f"the Slurm controller up?") from None
    if listing.returncode:
        why = (listing.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"--executor slurm: sinfo cannot reach the Slurm controller ({why})")
    return [line.split("|") for line in listing.stdout.splitlines() if line.strip()]


def gres_gpus(gres: str) -> int:
    """GPUs in a node's generic resources as sinfo writes them ("gpu:a100:4(S:0-1),shard:8",
    "(null)")."""
    return sum(int(m) for m in re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def check_partition(partition: str, cluster: dict | None = None) -> None:
    """A partition the controller does not list, or none of whose nodes holds one task (CPUs,
    memory, GPUs), would have sbatch refuse the jobs after the stage had set up its folders: ask
    sinfo first. A node group of unequal sizes (sinfo writes its smallest, "4+") is never
    refused: one of its nodes may hold the task."""
    groups = sinfo("R", "c", "m", "G")
    names = sorted({g[0] for g in groups})
    if partition not in names:
        raise UserError(f"--slurm_partition {partition}: no such partition (sinfo lists "
                        f"{', '.join(names) or 'none'})")
    cluster = cluster or {}
    cpus, gpus = cluster.get("cpus_per_task", 1), cluster.get("gpus_per_task") or 0
    mem_mb = cluster.get("mem_per_cpu_gb", 0) * cpus * 1024
    nodes = [(int(c.rstrip("+")), int(m.rstrip("+")), gres_gpus(g), "+" in c + m + g)
             for name, c, m, g in groups if name == partition
             if c.rstrip("+").isdigit() and m.rstrip("+").isdigit()]
    if nodes and not any(uneven or (c >= cpus and m >= mem_mb and n >= gpus)
                         for c, m, n, uneven in nodes):
        c, m, n, _ = max(nodes)
        raise UserError(f"--cpus_per_task {cpus} --mem_per_cpu_gb {cluster.get('mem_per_cpu_gb')} "
                        f"--gpus_per_task {gpus}: no node of partition {partition} holds one task "
                        f"(largest: {c} CPUs, {m / 1024:.1f} GiB, {n} GPUs)")


def task_files(files: list, rank: int, world_size: int) -> list:
    """The files task `rank` of `world_size` takes: rank, rank + world_size, ... (as datatrove's
    readers shard a folder), so every file goes to exactly one task."""
    return files[rank::world_size]


def task_device(kind: str, gpus_per_task: int, workers: int, rank: int, device: str) -> str:
    """The torch device task `rank` computes on: `device` without GPUs per task; else its own
    GPU, which Ray and Slurm hand a task as its first visible one and a local run assigns by
    worker slot (task r on GPU (r mod workers) x gpus_per_task: running tasks never share one
    while --tasks is --workers)."""
    if not gpus_per_task:
        return device
    if kind == "local":
        return f"cuda:{(rank % workers) * gpus_per_task}"
    return "cuda"


@contextmanager
def ray_cluster(cluster: dict):
    """Connected to the Ray cluster at --ray_address (else $RAY_ADDRESS, else a new one on this
    machine) inside the `with`, disconnected after; refuses task resources no node can hold,
    which Ray would otherwise wait for forever."""
    ray = require("ray", "--executor ray")
    address = cluster.get("ray_address") or os.environ.get("RAY_ADDRESS") or None
    check_answers(address)
    try:
        # "local": a new instance, as documented, not one ray.init finds running on this machine
        ray.init(address=address or "local", log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UserError(f"--ray_address {address or '(RAY_ADDRESS or a local cluster)'}: cannot "
                        f"connect to Ray ({quoted(err)})") from None
    try:
        need = {"CPU": cluster.get("cpus_per_task", 1), "GPU": cluster.get("gpus_per_task", 0),
                "memory": cluster.get("mem_per_cpu_gb", 2) * cluster.get("cpus_per_task", 1)
                * 2**30}
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        if not any(all(node.get(k, 0) >= v for k, v in need.items() if v) for node in nodes):
            largest = max(nodes, key=lambda n: n.get("CPU", 0), default={})
            raise UserError(
                f"--cpus_per_task {need['CPU']} --mem_per_cpu_gb {cluster.get('mem_per_cpu_gb')} "
                f"--gpus_per_task {need['GPU']}: no node of the Ray cluster holds one task "
                f"(largest node: {largest.get('CPU', 0):g} CPUs, "
                f"{largest.get('memory', 0) / 2**30:.1f} GiB, {largest.get('GPU', 0):g} GPUs)")
        yield
    finally:
        ray.shutdown()


def engine_session(where: Executed):
    """The `with` a stage runs its executors in: connected to Ray for --executor ray."""
    return ray_cluster(where.cluster) if where.executor == "ray" else nullcontext()


def make_executor(where: Executed, pipeline: list, tasks: int, logging_dir: Path, workers: int,
                  depends=None, skip_completed: bool = True, job_name: str = "datamask"):
    """LocalPipelineExecutor, SlurmPipelineExecutor or RayPipelineExecutor over `pipeline`, as
    `where` says (its executor and cluster; `workers` is this round's)."""
    kind, cluster = where.executor, where.cluster
    if kind == "local":
        from datatrove.executor import LocalPipelineExecutor

        return LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                                     logging_dir=str(logging_dir), depends=depends,
                                     skip_completed=skip_completed)
    if kind == "slurm":
        from datatrove.executor import SlurmPipelineExecutor

        return SlurmPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                                     logging_dir=str(logging_dir), depends=depends,
                                     skip_completed=skip_completed,
                                     partition=cluster["partition"], time=cluster["time"],
                                     cpus_per_task=cluster["cpus_per_task"],
                                     gpus_per_task=cluster["gpus_per_task"],
                                     venv_path=cluster.get("venv_path"),
                                     job_name=job_name,
                                     slurm_logs_folder=str(logging_dir / "slurm"),
                                     # in MiB: datatrove writes "{gb}G", which Slurm refuses for
                                     # a fraction (and for a float's "4.0G")
                                     sbatch_args={"mem-per-cpu":
                                                  f"{round(cluster['mem_per_cpu_gb'] * 1024)}M"})
    if kind == "ray":
        from datatrove.executor import RayPipelineExecutor

        return RayPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                                   logging_dir=str(logging_dir), depends=depends,
                                   skip_completed=skip_completed,
                                   cpus_per_task=cluster.get("cpus_per_task", 1),
                                   mem_per_cpu_gb=cluster.get("mem_per_cpu_gb", 2),
                                   gpus_per_task=cluster.get("gpus_per_task", 0))
    raise UserError(f"--executor must be local, slurm or ray, got {kind!r}")


def start_or_resume(config_path: Path, config: dict, earlier_run: list[Path]) -> None:
    """Keep what an earlier run wrote (`earlier_run`: its tasks' files, logs and completion
    markers) only when `config_path` holds this run's `config`: a rerun of the same run skips
    its finished tasks, while another run's markers must not count. Else remove it and write
    `config`."""
    if config_path.exists() and json.loads(config_path.read_text()) == config:
        return
    for path in earlier_run:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(config, config_path)


def last_error(executor, rank: int) -> str:
    """The last error line of a task's datatrove log (the output folder, logs included, is
    removed when the stage fails), or why there is none."""
    try:
        with executor.logging_dir.open(f"logs/task_{rank:05d}.log", "r") as log:
            lines = [line.strip() for line in log if line.strip()]
    except FileNotFoundError:
        return "(no log: the task's process died before writing it)"
    errors = [line for line in lines if "ERROR" in line] or lines or ["(empty log)"]
    return errors[-1]


def run_then_merge(where: Executed, rounds: list[tuple[list, int, str]], merging: list,
                   logs: Path, stage: str) -> dict | None:
    """Each round of `rounds` in order, (steps, tasks, unit): `tasks` tasks of `steps`, logged
    under logs/<unit>s, markers included (a rerun skips the finished ones); then one task of
    `merging` (logs/merge). On Slurm every round and the merge are submitted, each as a job that
    starts once the one before succeeded (afterok), and the job ids returned (the first round's
    as tasks_job, the later ones' as round_jobs); elsewhere None once the merge has run. A task
    that still fails after datatrove's retries stops the stage with its log's last error line."""
    kind, works = where.executor, []
    for round_steps, round_tasks, round_unit in rounds:  # on Slurm each waits for the one before
        works.append(make_executor(
            where, round_steps, round_tasks, logs / f"{round_unit}s",
            min(where.workers, round_tasks),
            depends=works[-1] if works and kind == "slurm" else None,
            job_name=f"datamask-{stage}" + (f"-{round_unit}s" if works else "")))
    if kind == "slurm":
        merge = make_executor(where, merging, 1, logs / "merge", 1, depends=works[-1],
                              skip_completed=False, job_name=f"datamask-{stage}-merge")
        try:
            merge.run()
        except subprocess.CalledProcessError as err:
            raise UserError(f"--executor slurm: sbatch refused the job (exit {err.returncode}; "
                            f"its message is above)") from None
        later = {"round_jobs": [w.job_id for w in works[1:]]} if len(works) > 1 else {}
        return {"tasks_job": works[0].job_id, **later, "merge_job": merge.job_id}
    # here, not through datatrove's depends=, which polls every 2 minutes, forever, for a task
    # that failed
    for work, (_, round_tasks, round_unit) in zip(works, rounds):
        work.run()
        failed = work.get_incomplete_ranks(range(round_tasks))
        if failed:
            raise UserError(f"--executor {kind}: {round_unit}s {failed[:10]} did not finish; "
                            f"{round_unit} {failed[0]}'s log ends: {last_error(work, failed[0])}")
    make_executor(where, merging, 1, logs / "merge", 1, skip_completed=False,
                  job_name=f"datamask-{stage}-merge").run()
    return None

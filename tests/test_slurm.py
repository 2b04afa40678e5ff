"""The data stages on a real one-node Slurm cluster: tests/slurm/stages_on_slurm.sh starts munged,
slurmctld and slurmd in namespaces of their own, submits `pipeline select --executor slurm` with
its merge round (scatter, blocks, planning task, the union's parts and the merge: five jobs, each
after the one before), then the chain prepare -> dedup -> select -> tokenize -> export the same
way, and compares every output with the local executor's (dedup's keep-list and export's Parquet
files among them). The process running the merge round's second part, and in the
chain the one running prepare's second task, is killed mid-task (SIGKILL): its job fails, the merge
waits for good and is cancelled, no process is left, and the rerun submits that task alone. Runs where Slurm and munge are
installed and the suite runs as root; `make test-slurm` installs them. The chain embeds with the
suite's small static model, passed to the script as the folder conftest distilled it into."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "slurm" / "stages_on_slurm.sh"
NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "munged", "unshare", "ip")
MISSING = [tool for tool in NEEDED if not shutil.which(tool)]

pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"Slurm is not installed here (no {', '.join(MISSING)}"
                                             f"); `make test-slurm` installs it and runs this"),
    pytest.mark.skipif(os.geteuid() != 0, reason="starting Slurm's daemons needs root"),
]


def test_the_data_stages_on_slurm_equal_the_local_executor(small_static):
    env = {**os.environ, "PYTHON": sys.executable, "SMALL_STATIC_MODEL": str(small_static)}
    run = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "the merge round on Slurm, part 1 killed and rerun, equals the local executor's row " \
        "for row" in run.stdout
    assert "Launching Slurm job datamask-select-unions (1 tasks)" in run.stdout
    assert "Slurm's prepared shards equal the local executor's" in run.stdout
    assert "a missing partition is refused before any work" in run.stdout
    assert "killing task 1 of" in run.stdout and "mid-task" in run.stdout
    assert "after the kill, task 0's shard alone and no process left behind" in run.stdout
    assert "Launching Slurm job datamask-prepare (1 tasks)" in run.stdout  # the killed one alone
    assert "the rerun left task 0's shard as it was" in run.stdout
    assert "the rerun embedded [0, " in run.stdout
    assert "Slurm's keep-list equals the local executor's, row for row" in run.stdout
    assert "the chain's selection on Slurm equals the local one, row for row" in run.stdout
    assert "Slurm's token files equal the local executor's, byte for byte" in run.stdout
    assert "Slurm's exported Parquet files equal the local executor's, byte for byte" in run.stdout
    assert run.stdout.count("afterok:") >= 4  # each stage's merge was queued behind its tasks
    assert "cluster stopped" in run.stdout

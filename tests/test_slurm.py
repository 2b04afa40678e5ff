"""Block selection on a real one-node Slurm cluster: tests/slurm/select_on_slurm.sh starts munged,
slurmctld and slurmd in namespaces of their own, submits `pipeline select --executor slurm` (the
merge a job that depends on the blocks' array) and compares with the local executor. Runs where
Slurm and munge are installed and the suite runs as root; `make test-slurm` installs them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "slurm" / "select_on_slurm.sh"
NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "munged", "unshare", "ip")
MISSING = [tool for tool in NEEDED if not shutil.which(tool)]

pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"Slurm is not installed here (no {', '.join(MISSING)}"
                                             f"); `make test-slurm` installs it and runs this"),
    pytest.mark.skipif(os.geteuid() != 0, reason="starting Slurm's daemons needs root"),
]


def test_select_on_slurm_equals_the_local_executor():
    run = subprocess.run(["bash", str(SCRIPT)], env={**os.environ, "PYTHON": sys.executable},
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "Slurm's selection equals the local executor's, row for row" in run.stdout
    assert "afterok:" in run.stdout  # the merge was queued behind the blocks
    assert "cluster stopped" in run.stdout

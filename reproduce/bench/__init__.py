"""Benchmarks (`make bench`, `bench-chunks`, `bench-soak`, `bench-baselines`): speed and memory
measured side by side in one run, printed as ratios; never assertions. One module a target."""

import tempfile
from contextlib import contextmanager
from pathlib import Path

from datamask.errors import UserError


@contextmanager
def work_folder(work: Path | None):
    """A bench's scratch folder: `--work` made and refused unless empty (the stages would reuse
    what an earlier run left there), or a temporary folder removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = work or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise UserError(f"--work {folder}: not empty; give an empty or new folder")
        yield folder

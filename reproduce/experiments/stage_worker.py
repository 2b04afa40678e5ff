"""A long-lived child that runs pipeline stages one request after another, so that a run of many
short stages (the downstream experiment's selections, token sets, and train + evaluate per method
and seed) imports torch, transformers and lm-eval once per worker instead of once per stage:
about 2 s of CPU a selection or token set and 5 s a training run on the 2-core box.

`StageWorker` starts `python -m reproduce.experiments.stage_worker` and sends it one JSON line per
request, {"argv": [...], "log": PATH}: the stages of `argv` (split at a lone `+`, as `python -m
reproduce` splits them) run in this process with stdout and stderr appended to PATH, and the exit
status comes back as one line. Each stage seeds what it draws (training sets torch's and numpy's
seeds from its config, lm-eval its own), so a stage's output is the one a fresh process writes. The
child arms `datamask.processes` on import, so it dies with the process that started it, kill -9
included; it exits when its requests' pipe closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from datamask import processes
from datamask.errors import UserError


def child_environment(threads: int) -> dict:
    """This process's environment for a child with `threads` torch threads that dies with this
    process, kill -9 included (it arms itself on importing datamask.processes)."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            processes.ENVIRONMENT: str(os.getpid())}


class StageWorker:
    """One worker child with `threads` torch threads; `run` blocks until its request is done."""

    def __init__(self, threads: int = 1):
        self.process = subprocess.Popen([sys.executable, "-m", __name__],
                                        env=child_environment(threads), text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, argv: list[str], log: Path) -> None:
        """Run `argv`'s stages in the worker, their output appended to `log`; a stage's failure
        (or the worker's death) is one UserError naming the command and its log."""
        self.process.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply.strip():
            raise UserError(f"python -m reproduce {' '.join(argv)}: the stage worker died "
                            f"(exit {self.process.wait()}); see {log}")
        if int(reply) != 0:
            raise UserError(f"python -m reproduce {' '.join(argv)} failed (exit {int(reply)}); "
                            f"see {log}")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


class StageWorkers:
    """The stage workers of the threads that call `run`: one per thread and torch thread count,
    started on its first request, so that a run of many stages imports each library once per
    worker. A worker dies with the thread that started it (datamask.processes); `close` ends the
    rest."""

    def __init__(self):
        self.mine, self.started = threading.local(), []

    def run(self, argv: list[str], log: Path, threads: int = 1) -> None:
        workers = self.mine.__dict__.setdefault("workers", {})
        if threads not in workers:
            workers[threads] = StageWorker(threads)
            self.started.append(workers[threads])
        workers[threads].run(argv, log)

    def close(self) -> None:
        """End every worker; the next request starts new ones."""
        for worker in self.started:
            worker.close()
        self.mine, self.started = threading.local(), []


def serve() -> None:
    """Answer requests from stdin until it closes: each request's stages with fds 1 and 2 on its
    log, the exit status on the original stdout."""
    from reproduce.cli import main

    replies = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        request = json.loads(line)
        with open(request["log"], "a") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                code = main(request["argv"], prog="python -m reproduce")
            except SystemExit as stop:  # argparse's own refusals
                code = stop.code if isinstance(stop.code, int) else 2
            except Exception:  # noqa: BLE001 (the traceback goes to the run's log)
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        replies.write(f"{code}\n")
        replies.flush()


if __name__ == "__main__":
    serve()

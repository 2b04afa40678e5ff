"""Child processes that do not outlive their parent, even when it is killed with SIGKILL.

A process killed by SIGKILL runs no cleanup, so its children are not told: datatrove's
LocalPipelineExecutor starts a Manager (a fork of the command), a forkserver and the pool's
workers (forked by the forkserver, each holding the forkserver's "alive" pipe, so neither ever
sees the other end close). All of them sleep on forever after a `kill -9` of the command. Linux
can send a signal to a process when its parent exits (prctl PR_SET_PDEATHSIG); `die_with_parent`
asks for SIGKILL, and `children_die_with_parent` arms it in every child that multiprocessing or
multiprocess starts from here: fork children and the forkserver's workers through the after-fork
hook, the forkserver itself by importing this module first (its preload), which arms a process
whose parent set DATAMASK_DIE_WITH_PARENT to its own pid. So a kill -9 takes the whole tree down.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h
ENVIRONMENT = "DATAMASK_DIE_WITH_PARENT"  # the pid whose children arm themselves on import
MULTIPROCESSING = ("multiprocessing", "multiprocess")  # the standard one and datatrove's


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when the thread that started it exits (Linux; a no-op
    elsewhere). Given the `parent` pid it expects, it dies at once if that parent is already gone
    (it died between the fork and this call). For subprocess children:
    `subprocess.Popen(..., preexec_fn=functools.partial(die_with_parent, os.getpid()))`; the
    setting survives exec."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class _Hook:
    """The object multiprocessing's after-fork registry keeps (it holds weak references)."""

    @staticmethod
    def run(_) -> None:
        die_with_parent()


_HOOK = _Hook()


def _hook_forks() -> None:
    """Every process multiprocessing or multiprocess bootstraps from this one (fork, or forked by
    a forkserver that imported this module) runs `die_with_parent` first; the registry is copied
    into forks, so their children do the same. Registered once per process."""
    if getattr(_HOOK, "registered", False):
        return
    _HOOK.registered = True
    for name in MULTIPROCESSING:
        try:
            util = importlib.import_module(f"{name}.util")
        except ImportError:
            continue
        util.register_after_fork(_HOOK, _Hook.run)


def children_die_with_parent(preload: tuple[str, ...] = ()) -> None:
    """From now on, every child that multiprocessing or multiprocess starts from this process by
    fork or forkserver (the forkserver, its workers, Managers, Pools) and their children die when
    this process does, kill -9 included. Call it before the first child starts (a forkserver
    already running keeps its old preload). `preload`: modules the forkserver imports once, so
    that its children start with them imported. The resource tracker needs none: it exits once
    every process holding its pipe is gone."""
    os.environ[ENVIRONMENT] = str(os.getpid())
    _hook_forks()
    for name in MULTIPROCESSING:
        try:
            forkserver = importlib.import_module(f"{name}.forkserver")
        except ImportError:
            continue
        forkserver.set_forkserver_preload(["__main__", __name__, *preload])


if os.environ.get(ENVIRONMENT) == str(os.getppid()):  # a forkserver (or spawned child) of ours
    die_with_parent()
    _hook_forks()

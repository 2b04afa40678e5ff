"""Where a command may write, checked before it does any work, and what it leaves if it fails.

Every command names its inputs and its outputs (files and folders) by flag. `check_paths` refuses,
before anything is read or written: an output that is an input or holds one (after resolving
symlinks, hard links included), an output inside an input folder, two outputs on one path, an
empty path, a file output that is a folder or a folder output that is a file, and a place that
cannot be written (probed by creating and removing a nameless file there). `leave_as_found`
removes whatever a failed command created under its outputs, so a failure leaves the state it found;
an interrupted run may keep what lets it resume (its checkpoint).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError

PathLike = str | os.PathLike


def resolved(path: PathLike) -> Path:
    """The absolute path with every symlink of its existing part followed."""
    return Path(os.path.expanduser(os.fspath(path))).resolve()


def _inside(path: Path, folder: Path) -> bool:
    return folder in path.parents


def _probe_writable(folder: Path, flag: str, shown: PathLike) -> None:
    """Create and remove a nameless file in `folder` (O_TMPFILE where the system has it): the one
    test that also holds for root, read-only mounts and pseudo file systems."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise UserError(f"{flag} {shown}: cannot write in {folder} ({err.strerror})") from None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_file_output(flag: str, path: PathLike) -> None:
    """A file the command will write: named, not a folder, in an existing writable folder."""
    if not os.fspath(path):
        raise UserError(f"{flag} is empty; give a file name")
    target = resolved(path)
    if target.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file name")
    if not target.parent.is_dir():
        raise UserError(f"{flag} {path}: the folder {target.parent} does not exist")
    _probe_writable(target.parent, flag, path)


def check_folder_output(flag: str, path: PathLike) -> None:
    """A folder the command will create or fill: not a file, and writable where it will be made."""
    if not os.fspath(path):
        raise UserError(f"{flag} is empty; give a folder")
    target = resolved(path)
    if target.exists() and not target.is_dir():
        raise UserError(f"{flag} {path} is a file; give a folder")
    base = _nearest_existing(target)
    if not base.is_dir():
        raise UserError(f"{flag} {path}: {base} is a file, so the folder cannot be made")
    _probe_writable(base, flag, path)


def _clash(output: Path, source: Path) -> str | None:
    """How writing `output` would touch input `source`, or None."""
    if output == source or (output.exists() and source.exists()
                            and os.path.samefile(output, source)):
        return "is"
    if _inside(source, output):
        return "holds"
    if source.is_dir() and _inside(output, source):
        return "is inside the input folder"
    return None


def check_paths(inputs: Mapping[str, Sequence[PathLike] | PathLike | None],
                files: Mapping[str, PathLike | None] = {},
                folders: Mapping[str, PathLike | None] = {}) -> None:
    """Refuse, naming both, any output (file or folder, by flag) that would write over, into or
    beside-as-the-same an input; refuse two outputs on one path; check each output is writable.
    Flags whose value is None are not used by this run and are skipped."""
    sources = []
    for flag, value in inputs.items():
        if value is None:
            continue
        for item in ([value] if isinstance(value, (str, os.PathLike)) else value):
            sources.append((flag, item, resolved(item)))
    outputs = [(flag, path, resolved(path)) for flag, path in [*files.items(), *folders.items()]
               if path is not None and os.fspath(path)]
    for flag, path in files.items():
        if path is not None:
            check_file_output(flag, path)
    for flag, path in folders.items():
        if path is not None:
            check_folder_output(flag, path)
    for out_flag, out, out_real in outputs:
        for in_flag, source, in_real in sources:
            how = _clash(out_real, in_real)
            if how == "is":
                raise UserError(f"{out_flag} {out} is the input {in_flag} {source}; "
                                f"it would be written over")
            if how == "holds":
                raise UserError(f"{out_flag} {out} holds the input {in_flag} {source}; "
                                f"it could be written over")
            if how:
                raise UserError(f"{out_flag} {out} is inside the input folder {in_flag} "
                                f"{source}; write outputs elsewhere")
    for i, (flag_a, a, real_a) in enumerate(outputs):
        for flag_b, b, real_b in outputs[i + 1:]:
            if real_a == real_b:
                raise UserError(f"{flag_a} {a} and {flag_b} {b} are the same path")


def temporaries(path: PathLike) -> list[Path]:
    """The temporary names `data.atomic_output` and folder writes use beside `path`: left only
    when a process was killed while writing."""
    target = Path(path)
    return sorted(target.parent.glob(f".{target.name}.*.tmp"))


def remove_temporaries(path: PathLike) -> None:
    """Remove what a killed writer of `path` left beside it (a run about to write it again)."""
    for stale in temporaries(path):
        _remove(stale)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _entries(folder: Path) -> set[Path]:
    return {Path(root, name) for root, dirs, names in os.walk(folder) for name in dirs + names}


@contextmanager
def leave_as_found(paths: Iterable[PathLike | None], keep_on_interrupt: Iterable[PathLike | None] = ()):
    """On any failure inside, remove every path in `paths` that did not exist before, and every
    entry that appeared inside those that were folders, so the command leaves what it found.
    On Ctrl-C, paths in `keep_on_interrupt` (a checkpoint) are kept for --resume."""
    targets = [Path(p) for p in paths if p is not None and os.fspath(p)]
    existed = {p: p.exists() for p in targets}
    before = {p: _entries(p) for p in targets if p.is_dir()}
    try:
        yield
    except BaseException as err:
        keep = ({Path(p) for p in keep_on_interrupt if p is not None}
                if isinstance(err, KeyboardInterrupt) else set())
        for path in targets:
            if path in keep:
                continue
            if not existed[path]:
                _remove(path)
            elif path in before:
                for entry in sorted(_entries(path) - before[path], key=lambda e: len(e.parts)):
                    if entry.exists() or entry.is_symlink():
                        _remove(entry)
        raise

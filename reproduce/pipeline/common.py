"""Helpers every pipeline stage shares: input listing, method specs and whole-folder atomic
outputs (optional imports with a pip hint, `require`, live in datamask.shared)."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from datamask.data import temporary_beside
from datamask.errors import UserError


def parquet_files(inputs: list[str], flag: str = "--input") -> list[Path]:
    """Parquet files named directly or found (sorted) inside the folders given."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("*.parquet"))
            if not found:
                raise UserError(f"{flag} {path}: the folder holds no *.parquet file")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f"{flag} {path}: no such file or folder")
    if not files:
        raise UserError(f"{flag}: no input given")
    return files


def check_distinct_files(files: list[Path], flag: str = "--input") -> None:
    """No file twice, named again or through a link: two tasks would both claim it."""
    seen: dict[Path, Path] = {}
    for path in files:
        real = path.resolve()
        if real in seen:
            how = "given twice" if path.absolute() == seen[real].absolute() else \
                f"the same file as {seen[real]}"
            raise UserError(f"{flag} {path}: {how}; give each file once")
        seen[real] = path


def file_stats(files: list[Path]) -> dict:
    """What tells a file changed, for a stage's config.json: size and modification time."""
    return {str(f): [f.stat().st_size, f.stat().st_mtime_ns] for f in files}


def parse_value(text: str):
    """'3' -> 3, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(items: list[str] | None) -> dict:
    """`--set KEY=VALUE` items as {key: value}, values parsed as parse_value does."""
    overrides = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"--set {item}: expected KEY=VALUE")
        overrides[key] = parse_value(value)
    return overrides


def parse_method(spec: str) -> tuple[str, dict]:
    """'datamask:n_epochs=300,lamb=0.5' -> ('datamask', {'n_epochs': 300, 'lamb': 0.5})."""
    name, _, rest = spec.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--method {spec}: expected NAME:key=value,key=value, got '{item}'")
        params[key.strip()] = parse_value(value.strip())
    if not name:
        raise UserError(f"--method {spec!r}: no selector name")
    return name, params


def cache_root() -> Path:
    """~/.cache/datamask ($XDG_CACHE_HOME/datamask): what is fetched or distilled once and kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "datamask"


@contextmanager
def atomic_folder(path: str | os.PathLike):
    """Yield a fresh temporary folder beside `path`; on success it replaces `path` as a whole,
    so a crash leaves the previous complete output (or none), never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    tmp.mkdir(0o777)  # the umask applies, as for any new folder (mkdtemp's 0700 would stay)
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""Helpers the pipeline stages share, and the runs above them (the pool, the CLI, the benchmarks,
the experiments) with them: the flags' value types, input listing, method specs and the named
methods the experiments compare, whole-folder atomic outputs, a progress line for long runs
(optional imports with a pip hint, `require`, live in datamask.shared)."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from datamask.data import FEATURE_COLUMN, ID_COLUMN, QUALITY_COLUMN, temporary_beside
from datamask.errors import UserError, quoted
from datamask.options import SEED_MAX


def whole_number(low: int, high: int | None = None, high_text: str | None = None):
    """An argparse type: a whole number from `low` (to `high`, shown as `high_text`), so that a
    count of 0 or a negative seed is refused by the parser, naming the flag, before the stage
    imports anything."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high_text or high}"
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {value}")
        return value
    return parse


POSITIVE = whole_number(1)  # counts and sizes: tasks, workers, CPUs, batch, sequence length
NON_NEGATIVE = whole_number(0)  # GPUs per task; --block_size (0: one block)
SEED = whole_number(0, SEED_MAX, "2^63 - 1")  # what numpy's and torch's generators take


def finite_number(zero_allowed: bool):
    """An argparse type: a finite number greater than 0, or at least 0 where `zero_allowed`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not (0 <= value if zero_allowed else 0 < value) or value == math.inf:
            least = "a finite number of at least 0" if zero_allowed else "a number greater than 0"
            raise argparse.ArgumentTypeError(f"must be {least}, got {text}")
        return value
    return parse


positive_number = finite_number(False)  # e.g. GB of memory per CPU
non_negative_number = finite_number(True)  # e.g. a noise's standard deviation


def read_schema(path: Path, flag: str = "") -> pa.Schema:
    """The Parquet schema of `path`; a file that is not Parquet is refused, named (after `flag`
    when a flag gave it)."""
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        named = f"{flag} {path}" if flag else str(path)
        raise UserError(f"{named}: not a readable Parquet file ({quoted(err)})") from None


def check_text_shard(path: Path, columns: tuple[str, ...] = ("text", "id")) -> None:
    """A FineWeb-format shard: readable Parquet with `columns`, its `text` as text."""
    schema = read_schema(path)
    for column in columns:
        if column not in schema.names:
            raise UserError(f"{path}: missing FineWeb column '{column}'; the file has "
                            f"{schema.names}")
    text_type = schema.field("text").type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        raise UserError(f"{path}: column 'text' must hold text (strings), found {text_type}")


def selection_path(path: Path) -> Path:
    """A selection file given by name or by the folder select wrote it in."""
    path = Path(path)
    return path / "selection.parquet" if path.is_dir() else path


def selection_file(path: Path, flag: str = "--selection") -> Path:
    """A selection file (a folder: its selection.parquet), refused by `flag` before any work
    unless it is a readable Parquet file with the columns id and selected."""
    path = selection_path(path)
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file")
    if not {"id", "selected"} <= set(read_schema(path, flag).names):
        raise UserError(f"{flag} {path}: needs the columns id and selected (a selection.parquet "
                        "of `reproduce select`)")
    return path


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


PREPARED_COLUMNS = (ID_COLUMN, QUALITY_COLUMN, FEATURE_COLUMN, "id")


def check_prepared(files: list[Path]) -> int:
    """Every input is a shard the prepare stage wrote (its columns, readable); the row count."""
    rows = 0
    for path in files:
        try:
            metadata = pq.read_metadata(path)
            names = metadata.schema.to_arrow_schema().names
        except (pa.ArrowException, OSError) as err:
            raise UserError(f"{path}: not a readable Parquet file ({quoted(err)})") from None
        missing = [c for c in PREPARED_COLUMNS if c not in names]
        if missing:
            raise UserError(f"{path}: not a prepared shard (no column '{missing[0]}'); run "
                            f"`datamask pipeline prepare` on the FineWeb shards first")
        rows += metadata.num_rows
    return rows


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


# The downstream experiment's methods (reproduce/experiments/downstream.py; gpu_check and
# length-bias read them too), label -> selector spec: datamask with each diversity metric at
# select's defaults, the paper's own settings and the greedy start they begin from, quality-topk,
# quality-threshold, semdedup, joint-greedy, one one-shot method, random; `control` is the pool's.
LEARNER = "lamb=0.5"  # select's defaults, at the paper's lamb
# FineWeb-Mask's selection (ALGORITHM.md): Pair_simi, lamb 0.5, the bottom 40% by quality pruned,
# G 128 (the default), equal logits and the original quick start's linear rate 10 -> 1 over 5,000
# steps, run to the end
PAPER = ("algorithm=Pair_simi,lamb=0.5,prune_ratio=0.4,init=same,partial=0.1,lr_schedule=linear,"
         "max_lr=10,min_lr=1,n_epochs=5000,stop_every=0")
METHODS = {
    "datamask-Pair_simi": f"datamask:algorithm=Pair_simi,{LEARNER}",
    "datamask-Facility": f"datamask:algorithm=Facility,{LEARNER}",
    "datamask-DiSF": f"datamask:algorithm=DiSF,{LEARNER}",
    "datamask-paper": f"datamask:{PAPER}",
    # the stochastic greedy on datamask-Pair_simi's own objective, written with no step of it
    "greedy-start": f"datamask:algorithm=Pair_simi,{LEARNER},n_epochs=0",
    "quality-topk": "quality-topk",
    "quality-threshold": "quality-threshold",
    "semdedup": "semdedup",
    "joint-greedy": "joint-greedy:algorithm=Pair_simi,lamb=0.5",
    "cluster-quota": "cluster-quota",
    "random": "random",
}


class Progress:
    """A long run's items counted as they finish, one line each (`downstream: STAGE k/N: WHAT (T
    s in; about R left)`), so that a long stage never looks like a hang. The time left is the
    stage's wall time per item it worked on, times the items left; an item finished by an
    earlier run counts as done and not in the rate. `command` names who prints (the benchmarks
    that reuse it give their own)."""

    def __init__(self, stage: str, total: int, command: str = "downstream"):
        self.stage, self.total, self.done, self.worked = stage, total, 0, 0
        self.command = command
        self.started, self.lock = time.time(), threading.Lock()

    def tick(self, what: str, worked: bool = True) -> None:
        with self.lock:
            self.done, self.worked = self.done + 1, self.worked + worked
            spent = time.time() - self.started
            left = spent / self.worked * (self.total - self.done) if self.worked else None
            tail = f"; about {duration(left)} left" if left and self.done < self.total else ""
            print(f"{self.command}: {self.stage} {self.done}/{self.total}: {what} "
                  f"({spent:.0f} s in{tail})", flush=True)


def duration(seconds: float) -> str:
    """`45 s` below two minutes, else `7 min`."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"

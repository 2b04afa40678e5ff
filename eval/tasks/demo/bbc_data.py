"""Loads the held-out BBC task files written by `python -m reproduce data` (offline).

lm-eval calls `load` with the task manager's metadata (the folder, as `data_dir`) and the YAML's
dataset_kwargs (the file name)."""

import json
from pathlib import Path

import datasets


def load(data_dir: str | None = None, file: str | None = None, **_) -> datasets.DatasetDict:
    if not data_dir:
        raise ValueError("the bbc_* tasks need metadata data_dir=<folder with bbc_*.jsonl> "
                         "(python -m reproduce evaluate --data_dir, or lm_eval --metadata)")
    path = Path(data_dir) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such task file; run `python -m reproduce data`")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})

"""Offline loaders for the two paper tasks lm-eval does not ship (race_m, kqapro).

lm-eval calls them with the task manager's metadata (`data_dir`: `python -m reproduce evaluate
--data_dir DIR`, or `lm_eval --metadata '{"data_dir": DIR}'`) and the YAML's dataset_kwargs.

- RACE-M: the Hugging Face dataset ehovy/race (columns example_id, article, question, options,
  answer; configs all/high/middle). Read from DIR/ehovy/race when that folder holds a copy of the
  hub repository (`hf download ehovy/race --repo-type dataset --local-dir DIR/ehovy/race`), else
  from the datasets cache that one online `load_dataset("ehovy/race", "middle")` fills.
- KQA Pro: the original release's val.json (a JSON list of {question, sparql, program, choices,
  answer}, 10 choices each) in DIR/kqa_pro/. The hub copy drt/kqa_pro is a loading script, which
  datasets >= 4 refuses to run, so the release file is read directly.
"""

import json
from pathlib import Path

import datasets

RACE_REPO = "ehovy/race"
KQAPRO_FILE = "kqa_pro/val.json"


def load_race(data_dir: str | None = None, config: str = "middle", **_) -> datasets.DatasetDict:
    local = Path(data_dir) / RACE_REPO if data_dir else None
    return datasets.load_dataset(str(local) if local and local.is_dir() else RACE_REPO, config)


def load_kqapro(data_dir: str | None = None, file: str = KQAPRO_FILE,
                **_) -> datasets.DatasetDict:
    path = Path(data_dir or ".") / file
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no KQA Pro validation file; unpack the KQA Pro release (train.json, "
            f"val.json) into <data_dir>/kqa_pro/ and pass --data_dir <data_dir>")
    rows = json.loads(path.read_text())
    needed = {"question", "choices", "answer"}
    missing = [i for i, row in enumerate(rows) if not needed <= set(row)]
    if missing:
        raise ValueError(f"{path}: row {missing[0]} lacks question, choices or answer")
    return datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)})

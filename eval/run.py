"""Stage 5, evaluate: lm-eval's simple_evaluate on each checkpoint, one JSON per checkpoint.

Tasks are lm-eval names: the paper's (race, hellaswag, ... where their datasets are cached) and the
local ones under eval/tasks (bbc_cloze and bbc_headline for the offline demo; race_m and kqapro,
which lm-eval lacks). One TaskManager serves every checkpoint, so the task index is built once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from datamask.data import write_json_atomic
from datamask.errors import UserError
from datamask.shared import require

TASKS_DIR = Path(__file__).parent / "tasks"


def task_manager(data_dir: str | None):
    """lm-eval's TaskManager with eval/tasks included; `data_dir` reaches the local loaders."""
    tasks = require("lm_eval.tasks", "evaluate")
    metadata = {"data_dir": str(Path(data_dir).resolve())} if data_dir else None
    return tasks.TaskManager(include_path=str(TASKS_DIR), metadata=metadata)


def evaluate(checkpoints: list[Path], tasks: list[str], output: Path, data_dir: str | None = None,
             batch_size: int = 32, device: str = "cpu", limit: int | None = None,
             num_fewshot: int | None = None) -> list[dict]:
    """Write output/<checkpoint name>.json per checkpoint: lm-eval's results, versions and
    n-samples, plus the evaluation's wall time."""
    lm_eval = require("lm_eval", "evaluate")
    for ckpt in checkpoints:
        if not (ckpt / "config.json").is_file():
            raise UserError(f"--checkpoints {ckpt}: not a save_pretrained folder (no config.json)")
    if data_dir and not Path(data_dir).is_dir():
        raise UserError(f"--data_dir {data_dir}: no such folder")
    manager = task_manager(data_dir)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise UserError(f"--tasks: lm-eval knows no task {', '.join(unknown)} (local ones: "
                        f"{', '.join(sorted(p.stem for p in TASKS_DIR.rglob('*.yaml')))})")
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for ckpt in checkpoints:
        started = time.time()
        result = lm_eval.simple_evaluate(
            model="hf", model_args={"pretrained": str(ckpt), "dtype": "float32"}, tasks=tasks,
            task_manager=manager, batch_size=batch_size, device=device, limit=limit,
            num_fewshot=num_fewshot, log_samples=False)
        record = {"method": ckpt.name, "checkpoint": str(ckpt), "tasks": tasks, "limit": limit,
                  "results": result["results"], "versions": result.get("versions", {}),
                  "n-samples": result.get("n-samples", {}),
                  "eval_wall_s": round(time.time() - started, 3)}
        record = json.loads(json.dumps(record, default=str))  # numpy scalars -> JSON
        write_json_atomic(record, output / f"{ckpt.name}.json")
        written.append(record)
    return written

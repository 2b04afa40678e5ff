"""Stage 5, evaluate: one result file per (method, seed) checkpoint.

Each file holds lm-eval's simple_evaluate results on the tasks asked for, the continuous
multiple-choice metric beside their accuracies, and (with a held-out folder) per-domain bits per
byte and their macro average (eval/bpb.py).

Tasks are lm-eval names: the paper's (race, hellaswag, ... where their datasets are cached) and the
local ones under eval/tasks (bbc_cloze and bbc_headline for the offline demo; race_m and kqapro,
which lm-eval lacks). One TaskManager serves every checkpoint, so the task index is built once (only eval/tasks' when
every task is local).

The continuous metric, `correct_prob_norm` (DataDecide's CORRECT PROB family, normalised over the
choices): the softmax over the choices of each choice's log-likelihood divided by its length in
characters, read at the correct choice. The per-character log-likelihood is the score whose argmax
is lm-eval's acc_norm, so the metric is the probability mass acc_norm's own score puts on the right
answer: 1/k for a model that cannot tell k choices apart, 1 for a certain and correct one.

A checkpoint trained with weight averaging (train's `average_last`, `ema_decay`) also gets held-out
bits per byte on each of its `last/step<N>/`, `averaged/` and `ema/` checkpoints (the result keys
bpb_last, bpb_last_mean, bpb_last_sd, bpb_averaged, bpb_ema; eval/bpb.py); `bpb` and the
multiple-choice tasks stay the final checkpoint's.

A second held-out folder, `outside` (text from outside the pool, reproduce/pool/outside.py), is
scored the same way on the final checkpoint and the EMA, the variant the downstream run reads
(result key `outside`: {folder, bpb, bpb_ema}); the other averaging checkpoints are left out to
keep evaluation cheap.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamask.data import write_json_atomic
from datamask.errors import UserError
from datamask.options import REQUIRED, Range, option, validate
from datamask.shared import require

TASKS_DIR = Path(__file__).parent / "tasks"
SEED_FOLDER = re.compile(r"seed(\d+)")


@dataclass(kw_only=True)
class EvaluateConfig:
    """The evaluate stage's settings: `pipeline evaluate`'s flags, help and range checks come from
    these fields; a config that breaks one is refused, naming the flag, when made. It runs in
    this process, on no executor. --device is lm-eval's and torch's to check (they take more
    devices than the selectors' `check_device`)."""

    checkpoints: tuple[Path, ...] = option(REQUIRED, "save_pretrained folders")
    tasks: tuple[str, ...] = option((), "lm-eval task names; local: bbc_cloze bbc_headline "
                                        "race_m kqapro")
    heldout: Path | None = option(None, "folder of <domain>.parquet (column text): bits per byte "
                                        "per domain and their macro average (eval/bpb.py)")
    outside: Path | None = option(None, "a second held-out folder, text from outside the pool "
                                        "(`datamask pipeline outside`): its bits per byte on the "
                                        "final checkpoint and the EMA")
    heldout_docs: int | None = option(None, "score only each domain's first N held-out "
                                            "documents (quick runs)",
                                      within=Range(1), default_text="all")
    output: Path = option(REQUIRED, "folder; one <method>.seed<S>.json per checkpoint (a "
                                    "checkpoint <method>/seed<S>, else <folder name> and "
                                    "summary.json's train.seed)")
    data_dir: Path | None = option(None, "folder of bbc_*.jsonl for the local demo tasks")
    batch_size: int = option(32, "sequences per forward pass (lm-eval's and bits per byte's)",
                             within=Range(1))
    device: str = option("cpu", "cpu, cuda or cuda:N; cpu as every pipeline stage, so that the "
                                "scores do not depend on the machine, where `datamask select` "
                                "takes auto", named_rules=False)
    limit: int | None = option(None, "documents per task (for quick checks)", within=Range(1),
                               default_text="all")
    num_fewshot: int | None = option(None, "few-shot examples per task", within=Range(0),
                                     default_text="the task's own")

    def __post_init__(self):
        validate(self)

    def check_together(self) -> None:
        """The rules between flags, checked before any checkpoint is read."""
        if not self.tasks and self.heldout is None:
            raise UserError("evaluate: give --tasks, --heldout or both")
        if self.outside is not None and self.heldout is None:
            raise UserError("--outside is a second held-out target: give --heldout too")


def task_manager(data_dir: str | None, tasks: list[str]):
    """lm-eval's TaskManager with eval/tasks included; `data_dir` reaches the local loaders.
    When every task is local, lm-eval's own task index (thousands of YAMLs, tens of seconds to
    build) is left out."""
    lm_tasks = require("lm_eval.tasks", "evaluate")
    metadata = {"data_dir": str(Path(data_dir).resolve())} if data_dir else None
    local = lm_tasks.TaskManager(include_path=str(TASKS_DIR), metadata=metadata,
                                 include_defaults=False)
    if all(t in local.all_tasks for t in tasks):
        return local
    return lm_tasks.TaskManager(include_path=str(TASKS_DIR), metadata=metadata)


def known_tasks(data_dir: str | None, tasks: list[str]):
    """task_manager's, once it knows every task: a UserError names the others (a run that
    evaluates hours later checks its tasks up front with it)."""
    manager = task_manager(data_dir, tasks)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise UserError(f"--tasks: lm-eval knows no task {', '.join(unknown)} (local ones: "
                        f"{', '.join(sorted(p.stem for p in TASKS_DIR.rglob('*.yaml')))})")
    return manager


def method_and_seed(checkpoint: Path) -> tuple[str, int]:
    """A checkpoint `.../<method>/seed<S>` is (method, S); any other folder is (its name, the
    training seed in its summary.json)."""
    match = SEED_FOLDER.fullmatch(checkpoint.name)
    if match:
        return checkpoint.parent.name, int(match.group(1))
    summary = checkpoint / "summary.json"
    seed = json.loads(summary.read_text()).get("train", {}).get("seed") if summary.is_file() \
        else None
    if seed is None:
        raise UserError(f"--checkpoints {checkpoint}: no training seed (neither a "
                        f"<method>/seed<S> folder nor a summary.json with train.seed)")
    return checkpoint.name, int(seed)


def correct_prob_norm(lls: np.ndarray, lengths: np.ndarray, gold: list[int]) -> float:
    """Probability of the correct choice(s) under the softmax of the length-normalised
    log-likelihoods lls / lengths (lengths in characters, as lm-eval's acc_norm)."""
    scores = lls / lengths
    probs = np.exp(scores - scores.max())
    return float(probs[gold].sum() / probs.sum())


def gold_indices(task, doc, choices: list[str]) -> list[int]:
    """The correct choices' indices, resolved as lm-eval's multiple_choice scoring resolves them
    (an index, a list of indices, or the correct choice's text)."""
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    golds = gold if isinstance(gold, list) else [gold]
    indices = [(choices.index(g) if g in choices else -1) if isinstance(g, str) else int(g)
               for g in golds]
    if not all(0 <= i < len(choices) for i in indices):
        raise UserError(f"task {task.config.task}: gold {gold} is not one of its "
                        f"{len(choices)} choices")
    return indices


def sample_correct_prob(task, sample: dict) -> float:
    """correct_prob_norm of one sample lm-eval logged (log_samples=True) for a multiple-choice
    task: its per-choice log-likelihoods are filtered_resps[i][0]."""
    choices = task.doc_to_choice(sample["doc"])
    lengths = np.array([float(len(c)) for c in choices])
    if not lengths.all():
        raise UserError(f"task {task.config.task}, doc {sample['doc_id']}: an empty choice has "
                        f"no per-character log-likelihood")
    # mutual-information tasks log the unconditional log-likelihoods after the k conditional ones
    lls = np.array([float(r[0]) for r in sample["filtered_resps"]])[:len(choices)]
    return correct_prob_norm(lls, lengths, gold_indices(task, sample["doc"], choices))


def continuous_metrics(samples: dict, tasks: dict) -> dict:
    """{task: {correct_prob_norm: mean over samples, n}} for every multiple-choice task in
    lm-eval's logged `samples`; `tasks` maps the names to lm-eval task objects."""
    out = {}
    for name, logged in samples.items():
        if tasks[name].OUTPUT_TYPE == "multiple_choice":
            values = [sample_correct_prob(tasks[name], sample) for sample in logged]
            out[name] = {"correct_prob_norm": float(np.mean(values)), "n": len(values)}
    return out


def evaluate(config: EvaluateConfig) -> list[dict]:
    """Write output/<method>.seed<S>.json per checkpoint: method, seed, lm-eval's results,
    versions and n-samples, the continuous metric per multiple-choice task, bits per byte per
    held-out domain and their macro average (the pool's and, with `outside`, the outside
    target's), and the evaluation's wall time."""
    from .bpb import averaging_bits_per_byte, averaging_checkpoints, bits_per_byte, read_heldout

    tasks, heldout, outside = list(config.tasks), config.heldout, config.outside
    batch_size, device, docs = config.batch_size, config.device, config.heldout_docs
    names = {}
    for ckpt in config.checkpoints:
        if not (ckpt / "config.json").is_file():
            raise UserError(f"--checkpoints {ckpt}: not a save_pretrained folder (no config.json)")
        averaging_checkpoints(ckpt)  # its averaging checkpoints are whole, before any model runs
        key = method_and_seed(ckpt)
        if key in names:
            raise UserError(f"--checkpoints {names[key]} and {ckpt} are both method {key[0]}, "
                            f"seed {key[1]}")
        names[key] = ckpt
    if config.data_dir and not config.data_dir.is_dir():
        raise UserError(f"--data_dir {config.data_dir}: no such folder")
    if heldout is not None:
        read_heldout(heldout, docs)  # validate before any model runs
    if outside is not None:
        read_heldout(outside, docs, "--outside")
    if tasks:
        lm_eval = require("lm_eval", "evaluate")
        manager = known_tasks(config.data_dir, tasks)
        task_objects = manager.load(tasks)["tasks"]  # flat {name: Task}, groups expanded
    config.output.mkdir(parents=True, exist_ok=True)
    written = []
    for (method, seed), ckpt in names.items():
        started = time.time()
        record = {"method": method, "seed": seed, "checkpoint": str(Path(ckpt).absolute()),
                  "tasks": tasks, "limit": config.limit}
        if tasks:
            result = lm_eval.simple_evaluate(
                model="hf", model_args={"pretrained": str(ckpt), "dtype": "float32"},
                tasks=tasks, task_manager=manager, batch_size=batch_size, device=device,
                limit=config.limit, num_fewshot=config.num_fewshot, log_samples=True)
            record.update(results=result["results"], versions=result.get("versions", {}),
                          continuous=continuous_metrics(result["samples"], task_objects))
            record["n-samples"] = result.get("n-samples", {})
        if heldout is not None:
            record["heldout"] = str(heldout)
            record["bpb"] = bits_per_byte(ckpt, heldout, batch_size, device,
                                          max_docs=docs)
            record.update(averaging_bits_per_byte(ckpt, heldout, batch_size, device,
                                                  max_docs=docs))
        if outside is not None:
            ema = averaging_checkpoints(ckpt).get("ema")
            record["outside"] = {"folder": str(outside), **{
                key: bits_per_byte(folder, outside, batch_size, device, max_docs=docs)
                for key, folder in (("bpb", ckpt), ("bpb_ema", ema)) if folder is not None}}
        record["eval_wall_s"] = round(time.time() - started, 3)
        record = json.loads(json.dumps(record, default=str))  # numpy scalars -> JSON
        write_json_atomic(record, config.output / f"{method}.seed{seed}.json")
        written.append(record)
    return written

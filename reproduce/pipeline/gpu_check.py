"""`python -m reproduce.pipeline.gpu_check` (`make gpu-check`): does the GPU compute what the CPU computes?

Each part runs on the CPU, then (when CUDA is there) on the GPU, and compares:
- objectives: every set function (quality, each diversity metric, each joint) on the same 64
  seeded masks; GPU values equal the CPU's within fp32 tolerance (rtol 1e-4, atol 1e-5 of the
  values' scale): the devices sum in different orders, nothing else differs.
- learner step: the policy-gradient update for the same masks and advantages, compared the same
  way, and the median time of a whole policy_step (sampling, objective, update) per device.
- learner: a seeded MaskLearner.fit twice per device must select the same rows both times. CPU and
  GPU selections are not expected to be equal: torch's CPU and CUDA generators draw different
  streams from one seed, so the two runs sample different masks. Their overlap and joint
  objective are reported.
- greedy: joint-greedy (Facility, lazy): the same picks on both devices (its objective's term
  scale is drawn on the CPU, so the objective is the same too).
- select's rows: each datamask row of the downstream experiment (select's defaults per metric, the
  paper's settings cut to 500 steps, the greedy start alone) runs on each device and writes the
  budget; the GPU's joint objective, scored on the CPU, is reported beside the CPU's with their
  overlap.
- training: 3 steps of reproduce.pipeline.train on a tiny BBC token set: the GPU's losses equal the CPU's
  within rtol 1e-3 (different matmul kernels round differently, and 3 AdamW steps carry it).
Without CUDA the CPU parts run and every GPU part is listed as skipped (exit 0); a failed
comparison exits 1. TF32 is switched off so that "fp32" means fp32 on the GPU too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from datamask.data import write_json_atomic
from datamask.errors import UserError
from datamask.learner import (
    LearnerConfig,
    MaskLearner,
    Shape,
    StepVariant,
    policy_gradient,
    policy_step,
)
from datamask.objectives import (
    DIVERSITY,
    GroundSet,
    Joint,
    Quality,
    TermScale,
    random_masks,
)
from datamask.report import Report
from datamask.selectors import make_selector
from datamask.examples.synthetic import synthetic_dataset

from .common import METHODS, parse_method
from .tokenize import EOS, train_tokenizer

OBJECTIVE_RTOL, OBJECTIVE_ATOL = 1e-4, 1e-5
LOSS_RTOL = 1e-3


def compare(name: str, cpu, gpu, rtol: float, atol_scale: float = 0.0) -> dict:
    """One comparison: pass when |gpu - cpu| <= atol + rtol |cpu| everywhere, with atol =
    atol_scale x the largest |cpu|; the largest deviation is kept either way."""
    cpu, gpu = np.asarray(cpu, np.float64), np.asarray(gpu, np.float64)
    atol = atol_scale * float(np.abs(cpu).max(initial=0.0))
    if cpu.shape != gpu.shape:
        return {"part": name, "status": "FAIL",
                "reason": f"shapes differ: {cpu.shape} on the CPU, {gpu.shape} on the GPU"}
    deviation = np.abs(gpu - cpu)
    ok = bool(np.all(deviation <= atol + rtol * np.abs(cpu)))
    return {"part": name, "status": "pass" if ok else "FAIL",
            "max_abs_deviation": float(deviation.max(initial=0.0)), "rtol": rtol, "atol": atol}


def objective_values(data, device: torch.device, n_masks: int = 64) -> dict[str, np.ndarray]:
    """Every objective on the same seeded masks (drawn on the CPU, moved to `device`)."""
    ground = GroundSet.from_arrays(data.features, data.quality, device)
    gen = torch.Generator().manual_seed(0)
    idx = random_masks(len(ground), len(ground) // 10, n_masks, gen, torch.device("cpu"))
    idx = idx.to(device)
    values = {"quality": Quality().batch(ground, idx)}
    scale = TermScale(0.0, 1.0, 0.0, 1.0)  # fixed, so both devices combine alike
    for name, metric in DIVERSITY.items():
        values[name] = metric().batch(ground, idx)
        values[f"joint_{name}"] = Joint(metric(), 0.5, scale).batch(ground, idx)
    return {name: v.cpu().numpy() for name, v in values.items()}


def step_update(data, device: torch.device) -> np.ndarray:
    """The policy-gradient ascent direction for fixed masks and advantages (from the CPU)."""
    gen = torch.Generator().manual_seed(1)
    n = len(data.quality)
    idx = random_masks(n, n // 10, 128, gen, torch.device("cpu"))
    advantages = torch.randn(128, generator=gen)
    advantages = (advantages - advantages.mean()) / advantages.std(unbiased=False)
    logits = torch.zeros(n)
    return policy_gradient(logits.to(device), idx.to(device), advantages.to(device)).cpu().numpy()


def time_policy_step(data, device: torch.device, repeats: int) -> float:
    """Median seconds of one full policy_step (Pair_simi, partial 0.1, G = 128) on `device`."""
    config = LearnerConfig(select_ratio=0.1, n_rollout=128, partial=0.1, device=str(device))
    shape = Shape.of(config, data.quality)
    ground = GroundSet.from_arrays(data.features, data.quality, device)
    gen = torch.Generator(device=device).manual_seed(0)
    metric = DIVERSITY[config.algorithm]()
    joint = Joint(metric, config.lamb, TermScale.fit(ground, shape.k_step, metric, gen,
                                                     subset_size=shape.n_step))
    logits = torch.zeros(len(ground), device=device)
    times = []
    for _ in range(repeats + 2):  # two warm-up steps (CUDA kernels load on first use)
        start = time.perf_counter()
        policy_step(logits, ground, joint, shape, config.n_rollout, 1.0, gen,
                    StepVariant(logprob=config.logprob))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def learner_selection(data, device: torch.device) -> np.ndarray:
    config = LearnerConfig(select_ratio=0.1, n_epochs=30, n_rollout=32, partial=0.2, seed=0,
                           device=str(device))
    return MaskLearner(config).fit(data, progress=False).selected


def greedy_selection(data, device: torch.device) -> np.ndarray:
    selector = make_selector("joint-greedy", algorithm="Facility", device=str(device))
    return selector.select(data, 0.05).selected


# the downstream experiment's rows that run the learner, as `select` runs them
SELECT_ROWS = ("datamask-Pair_simi", "datamask-Facility", "datamask-DiSF", "datamask-paper",
               "greedy-start")
SELECT_RATIO = 0.1
SELECT_MAX_STEPS = 500  # the paper's 5,000 steps would make the CPU side of the check minutes long


def select_row(data, device: torch.device, label: str) -> np.ndarray:
    """The row's selection, its time budget after the start off (give_up_after 0): a budget in
    wall seconds stops two runs at other steps when the machine is loaded, and the check compares
    the devices, not the clock."""
    name, params = parse_method(METHODS[label])
    if params.get("n_epochs", 0) > SELECT_MAX_STEPS:
        params["n_epochs"] = SELECT_MAX_STEPS
    selector = make_selector(name, **{**params, "give_up_after": 0}, device=str(device), seed=0,
                             progress=False)
    return selector.select(data, SELECT_RATIO).selected


def select_rows(data, gpu: torch.device | None) -> list[dict]:
    """One record per row: both devices write the budget; each selection's joint objective on
    the row's metric, scored on the CPU, and their overlap are reported (the devices draw
    different streams, so the selections need not be equal)."""
    report = Report(data, SELECT_RATIO, lamb=0.5)
    records = []
    for label in SELECT_ROWS:
        metric = "joint_" + parse_method(METHODS[label])[1]["algorithm"]
        cpu_sel = select_row(data, torch.device("cpu"), label)
        record = {"part": f"select {label}", "status": "skipped: no CUDA device",
                  "cpu_objective": round(report(cpu_sel)[metric], 6)}
        if gpu:
            gpu_sel = select_row(data, gpu, label)
            record.update(status="reported", gpu_objective=round(report(gpu_sel)[metric], 6),
                          overlap=round(float((cpu_sel & gpu_sel).sum() / cpu_sel.sum()), 4))
        records.append(record)
    return records


def write_tiny_token_set(root: Path, n_articles: int = 40, vocab_size: int = 400) -> Path:
    """A tokenizer.json trained on the first BBC articles and their tokens as one datatrove .ds
    file (little-endian uint16, EOS before every document, as the tokenize stage writes them)
    under root/tokens: a training set that takes seconds to make."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tokenizers

    from .bbc import bbc_articles

    texts = [article["text"] for article in bbc_articles()[:n_articles]]
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts}), root / "text.parquet")
    train_tokenizer([str(root / "text.parquet")], root / "tokenizer.json", vocab_size=vocab_size)
    tokenizer = tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS)
    ids = np.concatenate([np.r_[eos, e.ids] for e in tokenizer.encode_batch(texts)])
    (root / "tokens").mkdir(exist_ok=True)
    ids.astype("<u2").tofile(root / "tokens" / "000.ds")
    return root


def training_losses(root: Path, device: torch.device, name: str) -> list[float]:
    from .train import load_config, train

    model_cfg, cfg = load_config("demo", {"max_steps": 3, "seq_len": 32, "batch_size": 4,
                                          "log_every": 1, "warmup_steps": 1})
    cfg = replace(cfg, device=str(device))
    train(root / "tokens", root / "tokenizer.json", root / name, model_cfg, cfg, progress=False)
    log = (root / name / "train_log.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in log]


def run_checks(gpu: torch.device | None, repeats: int = 5, rows: int = 2000) -> list[dict]:
    """Every part on the CPU and, with `gpu`, on it too; one record per comparison. (`gpu` may
    name the CPU itself: the suite runs every comparison that way where no GPU is.)"""
    cpu = torch.device("cpu")
    skipped = "skipped: no CUDA device"
    data = synthetic_dataset(n_rows=rows, dim=32, seed=0)
    records = []

    cpu_values = objective_values(data, cpu)
    gpu_values = objective_values(data, gpu) if gpu else None
    for name, values in cpu_values.items():
        if not np.all(np.isfinite(values)):
            records.append({"part": f"objective {name}", "status": "FAIL",
                            "reason": "non-finite values on the CPU"})
        elif gpu:
            records.append(compare(f"objective {name}", values, gpu_values[name],
                                   OBJECTIVE_RTOL, OBJECTIVE_ATOL))
        else:
            records.append({"part": f"objective {name}", "status": skipped,
                            "cpu_mean": float(values.mean())})

    cpu_update = step_update(data, cpu)
    records.append(compare("learner step update", cpu_update, step_update(data, gpu),
                           OBJECTIVE_RTOL, OBJECTIVE_ATOL) if gpu else
                   {"part": "learner step update", "status": skipped})
    timing = {"part": "learner step time", "status": "measured",
              "cpu_median_s": round(time_policy_step(data, cpu, repeats), 5)}
    if gpu:
        timing["gpu_median_s"] = round(time_policy_step(data, gpu, repeats), 5)
        timing["cpu_over_gpu"] = round(timing["cpu_median_s"] / timing["gpu_median_s"], 2)
    else:
        timing["gpu"] = skipped
    records.append(timing)

    selections = []
    for device in [cpu] + ([gpu] if gpu else []):
        first, second = learner_selection(data, device), learner_selection(data, device)
        selections.append(first)
        records.append({"part": f"learner repeatable on {device}",
                        "status": "pass" if np.array_equal(first, second) else "FAIL",
                        "selected": int(first.sum())})
    if gpu:
        overlap = (selections[0] & selections[1]).sum() / selections[0].sum()
        records.append({"part": "learner cpu vs gpu selection", "status": "reported",
                        "overlap": round(float(overlap), 4),
                        "note": "different random streams per device; not required equal"})
    else:
        records.append({"part": "learner repeatable on cuda", "status": skipped})

    cpu_greedy = greedy_selection(data, cpu)
    greedy_record = {"part": "greedy joint-greedy Facility", "status": skipped,
                     "selected": int(cpu_greedy.sum())}
    if gpu:
        gpu_greedy = greedy_selection(data, gpu)
        greedy_record.update(status="pass" if np.array_equal(cpu_greedy, gpu_greedy) else "FAIL",
                             common=int((cpu_greedy & gpu_greedy).sum()))
    records.append(greedy_record)
    records.extend(select_rows(data, gpu))

    with tempfile.TemporaryDirectory() as tmp:
        root = write_tiny_token_set(Path(tmp))
        cpu_losses = training_losses(root, cpu, "cpu")
        if not all(np.isfinite(cpu_losses)) or cpu_losses[-1] >= cpu_losses[0]:
            records.append({"part": "training losses", "status": "FAIL",
                            "cpu_losses": cpu_losses,
                            "reason": "CPU losses not finite or not falling"})
        elif gpu:
            record = compare("training losses", cpu_losses,
                             training_losses(root, gpu, "other"), LOSS_RTOL)
            records.append(record | {"cpu_losses": cpu_losses})
        else:
            records.append({"part": "training losses", "status": skipped,
                            "cpu_losses": cpu_losses})
    return records


def cuda_device(requested: str) -> torch.device | None:
    """The GPU to compare with, or None (no CUDA here)."""
    if not torch.cuda.is_available():
        return None
    device = torch.device(requested)
    if device.type != "cuda":
        raise UserError(f"--device {requested}: name a CUDA device (cuda or cuda:N)")
    return device


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reproduce.pipeline.gpu_check",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="the GPU (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=20,
                        help="timed learner steps per device (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=2000,
                        help="rows of the synthetic set every part runs on (default: %(default)s)")
    parser.add_argument("--output", help="also write the records to this JSON file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        gpu = cuda_device(args.device)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"gpu-check: torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(gpu) if gpu else 'no CUDA device: CPU parts only'}")
    records = run_checks(gpu, args.repeats, args.rows)
    for record in records:
        details = ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("part", "status"))
        print(f"{record['status']:>24}  {record['part']}  {details}")
    failed = [r["part"] for r in records if r["status"] == "FAIL"]
    skipped = [r["part"] for r in records if str(r["status"]).startswith("skipped")]
    print(f"gpu-check: {len(failed)} failed, {len(skipped)} CUDA parts skipped"
          + (f" ({'; '.join(skipped)})" if skipped else ""))
    if args.output:
        write_json_atomic({"device": str(gpu) if gpu else None, "records": records},
                          Path(args.output))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""What the experiments share: the machine record, one learner run with its curve, one greedy
run, the power-law fit, and writing the JSON + Markdown pair (both atomically)."""

from __future__ import annotations

import os
import platform
from typing import Callable

import numpy as np
import torch

from datamask.data import Dataset, atomic_output, write_json_atomic
from datamask.learner import LearnerConfig, MaskLearner, resolve_device
from datamask.objectives import GroundSet, diversity
from datamask.selectors import make_selector


def machine(device: str = "cpu") -> dict:
    """What the timings ran on: read ratios, not absolute times, on a shared CPU."""
    dev = resolve_device(device)
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "device": str(dev),
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "python": platform.python_version()}


def metric_scorer(data: Dataset, metric: str, device: str = "cpu") -> Callable[[np.ndarray], float]:
    """The diversity set function `metric` of a selection mask, on the whole input. (Report would
    also fit the joint's term scale on full-size random masks: too slow for a curve at large N.)"""
    ground = GroundSet.from_arrays(data.features, data.quality, resolve_device(device))
    function = diversity(metric)
    return lambda mask: function(ground, torch.as_tensor(np.flatnonzero(mask))).item()


def learner_run(data: Dataset, ratio: float, score: Callable[[np.ndarray], float],
                eval_points: int, **config) -> dict:
    """One DATAMASK run; its curve is `score` of the current read-off on the whole input at about
    `eval_points` steps (evaluation time excluded from `elapsed_s`, as the learner does)."""
    cfg = LearnerConfig(select_ratio=ratio, **config)
    every = max(1, cfg.n_epochs // max(1, eval_points))
    result = MaskLearner(cfg).fit(data, evaluate=lambda m: {"objective": score(m)},
                                  eval_every=every, progress=False)
    curve = [{"step": r["step"], "elapsed_s": r["elapsed_s"], "objective": r["objective"]}
             for r in result.history if "objective" in r]
    return {"wall_s": result.wall_time_s, "selected": result.selected, "curve": curve,
            "steps": [r["objective_mean"] for r in result.history]}


def greedy_run(data: Dataset, ratio: float, name: str, **params) -> dict:
    selection = make_selector(name, **params).select(data, ratio)
    return {"wall_s": selection.wall_time_s, "selected": selection.selected}


def fastest(run: Callable[[], dict], repeats: int, budget_s: float) -> dict:
    """The fastest of up to `repeats` runs (seeded, so the same result each time), repeating only
    while the total stays within `budget_s`: on a shared CPU one slow outlier would otherwise
    skew a power-law fit, and with it every skip and extrapolation after it."""
    best, total, count = None, 0.0, 0
    while count < repeats and (best is None or total + best["wall_s"] <= budget_s):
        result = run()
        total, count = total + result["wall_s"], count + 1
        if best is None or result["wall_s"] < best["wall_s"]:
            best = result
    return dict(best, runs=count)


def power_law(sizes, seconds) -> dict | None:
    """Least-squares fit of log t = log c + b log N; None below two sizes (nothing to fit)."""
    if len(sizes) < 2:
        return None
    b, log_c = np.polyfit(np.log(sizes), np.log(seconds), 1)
    return {"exponent": float(b), "coef": float(np.exp(log_c)), "sizes": [int(n) for n in sizes]}


def predict(fit: dict, n: int) -> float:
    return fit["coef"] * n ** fit["exponent"]


def write_outputs(out_dir: str, name: str, results: dict, markdown: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    write_json_atomic(results, os.path.join(out_dir, f"{name}.json"))
    with atomic_output(os.path.join(out_dir, f"{name}.md")) as tmp:
        with open(tmp, "w") as f:
            f.write(markdown)


def machine_line(info: dict) -> str:
    return (f"Machine: {info['cpu']}, {info['cores']} cores, {info['torch_threads']} torch threads,"
            f" torch {info['torch']}, device {info['device']}"
            + (f" ({info['gpu']})" if info["gpu"] else ""))

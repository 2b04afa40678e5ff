"""When do DiSF-with-quality steps first beat their start? The start-budget plan's seen cells
(reproduce/results/defaults/start-budget/plan.md): for each, the start's time, when a check first
beat the start by --stop_tolerance, and every check's time and objective against the start.

    python -m reproduce.bench.climbs OUTPUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

from datamask.examples.synthetic import synthetic_dataset
from datamask.learner import LearnerConfig, MaskLearner

CELLS = [("synth-32d-30c", 32, 30, 3000), ("synth-32d-30c", 32, 30, 20000),
         ("synth-64d-24c", 64, 24, 3000), ("synth-64d-24c", 64, 24, 20000),
         ("synth-768d-100c", 768, 100, 3000)]


def climb(family: str, dim: int, clusters: int, n: int) -> dict:
    """One cell's run at select's defaults (DiSF, lamb 0.5, ratio 0.1) and when it first beat
    its start, read from the run's checkpointed start time and its checks."""
    data = synthetic_dataset(n, dim, clusters, seed=0)
    cfg = LearnerConfig(algorithm="DiSF", lamb=0.5, seed=0, device="cpu", select_ratio=0.1)
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = os.path.join(folder, "run.ckpt")
        run = MaskLearner(cfg).fit(data, progress=False, checkpoint_path=checkpoint)
        start_s = torch.load(checkpoint, weights_only=True)["start_s"]
    start = run.objective_start
    checks = [h for h in run.history if "readoff_objective" in h]
    beat = next((h for h in checks
                 if h["readoff_objective"] > start + cfg.stop_tolerance * abs(start)), None)
    return {"family": family, "rows": n, "start_s": start_s, "wall_s": run.wall_time_s,
            "steps": run.steps_taken, "written_step": run.written_step, "stop": run.stop_reason,
            "start": start, "written": run.objective_written,
            "first_beat_step": beat and beat["step"] + 1,
            "first_beat_after_start_s": beat and beat["elapsed_s"] - start_s,
            "k_needed": beat and (beat["elapsed_s"] - start_s - cfg.give_up_grace) / start_s,
            "checks": [(h["step"] + 1, round(h["elapsed_s"] - start_s, 3),
                        round(h["readoff_objective"] / start, 5)) for h in checks]}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m reproduce.bench.climbs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="the JSON file the cells' rows are written to")
    args = parser.parse_args(argv)
    rows = []
    for cell in CELLS:
        rows.append(climb(*cell))
        print({k: v for k, v in rows[-1].items() if k != "checks"}, flush=True)
    with open(args.output, "w") as out:
        json.dump(rows, out, indent=1)
    return rows


if __name__ == "__main__":
    main()

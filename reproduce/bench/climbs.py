"""When do the seen cells' DiSF-with-quality steps first beat their start? (start-budget/plan.md)"""
import json, sys, tempfile, os
import torch
from datamask.learner import LearnerConfig, MaskLearner
from datamask.examples.synthetic import synthetic_dataset

CELLS = [("synth-32d-30c", 32, 30, 3000), ("synth-32d-30c", 32, 30, 20000),
         ("synth-64d-24c", 64, 24, 3000), ("synth-64d-24c", 64, 24, 20000),
         ("synth-768d-100c", 768, 100, 3000)]
out = []
for family, dim, clusters, n in CELLS:
    data = synthetic_dataset(n, dim, clusters, seed=0)
    ckpt = os.path.join(tempfile.mkdtemp(), "run.ckpt")
    cfg = LearnerConfig(algorithm="DiSF", lamb=0.5, seed=0, device="cpu", select_ratio=0.1)
    r = MaskLearner(cfg).fit(data, progress=False, checkpoint_path=ckpt)
    state = torch.load(ckpt, weights_only=True)
    start_s, start = state["start_s"], r.objective_start
    margin = cfg.stop_tolerance * abs(start)
    checks = [h for h in r.history if "readoff_objective" in h]
    beat = next((h for h in checks if h["readoff_objective"] > start + margin), None)
    row = {"family": family, "rows": n, "start_s": start_s, "wall_s": r.wall_time_s,
           "steps": r.steps_taken, "written_step": r.written_step, "stop": r.stop_reason,
           "start": start, "written": r.objective_written,
           "first_beat_step": beat and beat["step"] + 1,
           "first_beat_after_start_s": beat and beat["elapsed_s"] - start_s,
           "k_needed": beat and (beat["elapsed_s"] - start_s - cfg.give_up_grace) / start_s,
           "checks": [(h["step"] + 1, round(h["elapsed_s"] - start_s, 3),
                       round(h["readoff_objective"] / start, 5)) for h in checks]}
    out.append(row)
    print({k: v for k, v in row.items() if k != "checks"}, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)

"""`python -m reproduce.experiments.proxy`: which small model the downstream run should train.

Each candidate (tokenizer vocabulary, model shape, token budget) is one downstream run of its own
folder under --output, made by reproduce/experiments/downstream.py:
  probe      random alone, one seed, PROBE_STEPS steps with the averaged checkpoints on, two
             candidates side by side as the full run's two jobs: its tokens per second and
             evaluation seconds predict a full run's seconds; a candidate predicted over
             MAX_RUN_S a run is not eligible (the full run must fit ~3 hours)
  calibrate  the eligible candidates, cheapest first: random, the null, junk-0.25 and dup-0.25,
             seeds 0 1 2, at the candidate's budget; none is started once the sweep has run
             SWEEP_BUDGET_S
  report     proxy.md/.json: per candidate its loss, tokens per non-embedding parameter, epochs,
             seconds per run, and every metric's signal, noise and SNR; the pick by the plan's rule
Every stage skips what a previous invocation finished (the downstream run does), so the sweep
resumes after an interruption. The candidates, the cost rule, the SNR and the pick are those of
reproduce/results/downstream/proxy-plan.md, section 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from datamask.data import write_json_atomic, write_text_atomic
from datamask.errors import UserError
from eval.tables import markdown

from . import downstream

POINT_C_STEPS = 300  # candidate C: point C as it ran (reproduce/pipeline/configs/downstream.yaml)
EPOCHS = 4.0  # the other candidates: 4 passes over random's selection
PROBE_STEPS = 30
MAX_RUN_S = 240.0  # a run's predicted seconds above which the full run would not fit ~3 hours
SWEEP_BUDGET_S = 2 * 3600.0  # no candidate's calibration starts after this much sweep time
TIE = 0.10  # a cheaper candidate within this share of the best SNR wins
WEAK_SNR = 2.0  # below it at every candidate the report calls the instrument weak
AVERAGING = ["average_last=4", "ema_decay=0.98"]  # average_every: 5% of the steps (--epochs)
MACRO_VARIANTS = ("bpb macro", "bpb macro (last mean)", "bpb macro (weight avg)",
                  "bpb macro (EMA)")


def shape(vocab: int, hidden: int, layers: int, intermediate: int) -> dict:
    return {"vocab": vocab, "set": [f"hidden_size={hidden}", f"num_hidden_layers={layers}",
                                    f"intermediate_size={intermediate}"]}


# the plan's table of candidates, in its order; budget: steps (point C) or epochs of random's selection
CANDIDATES = {
    "C": {**shape(4096, 128, 2, 344), "steps": POINT_C_STEPS},
    "V4096-d128": {**shape(4096, 128, 2, 344), "epochs": EPOCHS},
    "V1024-d96": {**shape(1024, 96, 2, 256), "epochs": EPOCHS},
    "V1024-d64": {**shape(1024, 64, 2, 172), "epochs": EPOCHS},
    "V512-d64": {**shape(512, 64, 2, 172), "epochs": EPOCHS},
    "V512-d64-L4": {**shape(512, 64, 4, 172), "epochs": EPOCHS},
    "V512-d96": {**shape(512, 96, 2, 256), "epochs": EPOCHS},
}
CALIBRATION = ["--methods", "random", "--arms", "free", "--junk", "0.25", "--dup", "0.25"]


def downstream_argv(pool: Path, output: Path, candidate: dict, seeds: list[int],
                    extra: list[str]) -> list[str]:
    """The downstream run of one candidate (its settings, then `extra`)."""
    settings = candidate["set"] + AVERAGING
    return ["--pool", str(pool), "--output", str(output), "--vocab_size", str(candidate["vocab"]),
            "--seeds", *map(str, seeds), *[a for s in settings for a in ("--set", s)], *extra]


def budget_flags(candidate: dict) -> list[str]:
    """Its budget as downstream flags; the averaged checkpoints 5% of the steps apart (--epochs
    sets that itself)."""
    if "epochs" in candidate:
        return ["--epochs", str(candidate["epochs"])]
    steps = candidate["steps"]
    return ["--set", f"max_steps={steps}", "--set", f"average_every={max(1, steps // 20)}"]


def probe(pool: Path, output: Path, name: str, candidate: dict) -> dict:
    """Random alone for PROBE_STEPS steps: {tokens_per_s, eval_s, tokens, steps, predicted_s}."""
    folder = output / name / "probe"
    argv = downstream_argv(pool, folder, candidate, [0], [
        "--methods", "random", "--arms", "free", "--no_null", "--junk", "--dup",
        "--set", f"max_steps={PROBE_STEPS}", "--set", "average_every=1"])
    if downstream.main(argv) != 0:
        raise UserError(f"candidate {name}: its probe failed (see {folder / 'logs'})")
    train = json.loads((folder / "train" / "random" / "seed0" / "summary.json").read_text())
    evaluated = json.loads((folder / "eval" / "random.seed0.json").read_text())
    tokens = json.loads((folder / "tokens" / "random" / "summary.json").read_text())["tokens"]
    steps = (candidate["steps"] if "steps" in candidate else downstream.epoch_steps(
        tokens, candidate["epochs"], train["train"]["batch_size"], train["model"]["seq_len"]))
    tokens_per_run = steps * train["train"]["batch_size"] * (train["model"]["seq_len"] + 1)
    predicted = tokens_per_run / train["tokens_per_s"] + evaluated["eval_wall_s"]
    return {"tokens_per_s": train["tokens_per_s"], "eval_s": evaluated["eval_wall_s"],
            "random_tokens": tokens, "steps": steps, "tokens_per_run": tokens_per_run,
            "parameters": train["parameters"],
            "non_embedding": train["parameters"] - train["vocab_size"] * train["model"][
                "hidden_size"], "predicted_s": round(predicted, 1),
            "eligible": predicted <= MAX_RUN_S}


def calibrate(pool: Path, output: Path, name: str, candidate: dict) -> None:
    folder = output / name / "calibration"
    argv = downstream_argv(pool, folder, candidate, [0, 1, 2],
                           CALIBRATION + budget_flags(candidate))
    if downstream.main(argv) != 0:
        raise UserError(f"candidate {name}: its calibration run failed (see {folder / 'logs'})")


def candidate_summary(folder: Path, probed: dict) -> dict | None:
    """A calibrated candidate's row: loss, tokens per parameter, epochs, seconds, SNR per metric;
    None when its calibration has not finished."""
    table_file = folder / "calibration" / "tables" / "table2.json"
    if not table_file.is_file():
        return None
    table = json.loads(table_file.read_text())
    trained = json.loads((folder / "calibration" / "downstream.json").read_text())["trained"]
    summaries = [json.loads(p.read_text()) for p in
                 (folder / "calibration" / "train").glob("*/seed*/summary.json")]
    seconds = [r["train_wall_s"] + (r["eval_wall_s"] or 0) for r in trained]
    return {"final_loss": statistics.median(s["final_loss"] for s in summaries),
            "tokens_per_parameter": probed["tokens_per_run"] / probed["non_embedding"],
            "epochs": statistics.median(s["epochs"] for s in summaries),
            "median_run_s": statistics.median(seconds),
            "snr": table.get("snr", {})}


def pick(rows: dict[str, dict]) -> dict:
    """The plan's rule over the calibrated candidates: the highest SNR of a macro variant; a
    cheaper candidate within TIE of it wins the tie; that variant becomes the primary metric."""
    best_of = {}
    for name, row in rows.items():
        snrs = {v: row["snr"][v]["snr"] for v in MACRO_VARIANTS
                if v in row["snr"] and row["snr"][v]["snr"] is not None}
        if snrs:
            variant = max(snrs, key=snrs.get)
            best_of[name] = (snrs[variant], variant)
    if not best_of:  # nothing calibrated yet: no pick, and nothing said of the instrument
        return {"candidate": None, "primary": None, "snr": None, "weak": None}
    top = max(s for s, _ in best_of.values())
    close = [n for n, (s, _) in best_of.items() if s >= (1 - TIE) * top]
    chosen = min(close, key=lambda n: rows[n]["median_run_s"])
    return {"candidate": chosen, "primary": best_of[chosen][1], "snr": best_of[chosen][0],
            "weak": top <= WEAK_SNR}


def report(output: Path, probes: dict) -> str:
    rows = {name: row for name in probes if (row := candidate_summary(output / name,
                                                                      probes[name]))}
    choice = pick(rows)
    table = [{"candidate": name, "predicted s/run": p["predicted_s"],
              "eligible": "yes" if p["eligible"] else "no",
              "tokens/param": f"{p['tokens_per_run'] / p['non_embedding']:.1f}",
              **({"final loss": f"{rows[name]['final_loss']:.3f}",
                  "epochs": f"{rows[name]['epochs']:.2f}",
                  "median s/run": f"{rows[name]['median_run_s']:.0f}",
                  **{f"SNR {v.removeprefix('bpb ')}": "" if rows[name]["snr"].get(v, {}).get(
                      "snr") is None else f"{rows[name]['snr'][v]['snr']:.2f}"
                     for v in MACRO_VARIANTS}} if name in rows else {"final loss": "not run"})}
             for name, p in probes.items()]
    text = ("# Proxy sweep (reproduce/results/downstream/proxy-plan.md, section 1)\n\n"
            + markdown(pd.DataFrame(table).fillna("")) + "\n")
    waiting = [n for n, p in probes.items() if p["eligible"] and n not in rows]
    text += ("Pick" + (f" so far (eligible, not calibrated yet: {', '.join(waiting)})"
                       if waiting else "") + ": "
             + (f"**{choice['candidate']}**, primary metric `{choice['primary']}` "
                f"(SNR {choice['snr']:.2f})" if choice["candidate"]
                else "none yet: no candidate's calibration has run")
             + ("; the instrument is weak at every point this box affords (SNR <= "
                f"{WEAK_SNR:g})." if choice["weak"] else ".") + "\n")
    write_json_atomic({"probes": probes, "calibrated": rows, "pick": choice},
                      output / "proxy.json")
    write_text_atomic(text, output / "proxy.md")
    return text


def run(pool: Path, output: Path, names: list[str], probe_only: bool = False) -> str:
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise UserError(f"--candidates {unknown[0]}: not one of {', '.join(CANDIDATES)}")
    started = time.time()
    (output / "logs").mkdir(parents=True, exist_ok=True)
    downstream.prepare_pool(pool, output / "logs")  # once, before probes run side by side
    with ThreadPoolExecutor(max_workers=2) as side_by_side:  # as the full run's two jobs
        probes = dict(zip(names, side_by_side.map(
            lambda name: probe(pool, output, name, CANDIDATES[name]), names)))
    earlier = output / "probes.json"  # a run on some candidates keeps the others' probes
    probes = {**(json.loads(earlier.read_text()) if earlier.is_file() else {}), **probes}
    write_json_atomic(probes, earlier)
    for name in sorted((n for n in names if probes[n]["eligible"] and not probe_only),
                       key=lambda n: probes[n]["predicted_s"]):
        if time.time() - started > SWEEP_BUDGET_S:
            break  # candidates not reached are reported as not run
        calibrate(pool, output, name, CANDIDATES[name])
    return report(output, probes)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reproduce.experiments.proxy",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True, help="pool folder (make pool)")
    p.add_argument("--output", required=True, help="sweep folder, one subfolder per candidate")
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES),
                   help="(default: all of %(default)s)")
    p.add_argument("--probe_only", action="store_true",
                   help="only the probes and the eligibility they give (probes.json, proxy.md)")

    def command(args):
        print(run(Path(args.pool), Path(args.output), args.candidates, args.probe_only))

    p.set_defaults(func=command)
    return p


def main(argv: list[str] | None = None) -> int:
    from datamask.errors import run_command

    return run_command(build_parser(), argv, "reproduce.experiments.proxy")


if __name__ == "__main__":
    sys.exit(main())

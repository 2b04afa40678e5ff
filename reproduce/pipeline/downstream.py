"""The downstream experiment of issue 16: every method's selection of the pool trains models on the
same token budget with several seeds, and the tables say which differences the run resolves.

    python -m reproduce.pipeline.downstream --pool runs/pool --output runs/downstream --seeds 0 1 2

Chain (each step skips what a previous run finished, so an interrupted run resumes):
  prepare   the pool's shards -> id, quality, embedding (incremental, reproduce/pipeline/prepare.py)
  select    each method over the prepared rows (reproduce/pipeline/select.py); the positive control from
            reproduce/pool/control.py. Selection does not depend on the training seed: every
            seed of a method trains on the same selection (seed --select_seed)
  tokenize  one BPE tokenizer trained on the whole pool, then each selection (datatrove)
  train     one model per (method, seed), the config's token budget for all (reproduce/pipeline/train.py)
  evaluate  per-domain held-out bits per byte + the BBC tasks (eval/run.py), one file per run
  tables    Table 2 with 95% CIs, paired differences with random, planted rows kept (eval/tables.py)
  figure    figures/downstream.py
Training and evaluation jobs run `--jobs` at a time, each in its own process with one torch thread
(on the 2-core box two one-thread jobs train ~4x faster each than one two-thread job beside other
load; results do not depend on the thread count, see README "Determinism").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from datamask.data import write_json_atomic
from datamask.errors import UserError

# label -> selector spec: the list (datamask with each diversity metric, quality-topk,
# quality-threshold, semdedup, joint-greedy, one one-shot method, random); `control` is the pool's.
LEARNER = "n_epochs=500,partial=0.2,lamb=0.5"
METHODS = {
    "datamask-Pair_simi": f"datamask:algorithm=Pair_simi,{LEARNER}",
    "datamask-Facility": f"datamask:algorithm=Facility,{LEARNER}",
    "datamask-DiSF": f"datamask:algorithm=DiSF,{LEARNER}",
    "quality-topk": "quality-topk",
    "quality-threshold": "quality-threshold",
    "semdedup": "semdedup",
    "joint-greedy": "joint-greedy:algorithm=Pair_simi,lamb=0.5",
    "cluster-quota": "cluster-quota",
    "random": "random",
}
CONTROL = "control"
TASKS = ["bbc_cloze", "bbc_headline"]


def parse_methods(items: list[str]) -> dict[str, str]:
    """`label` (a known one) or `label=spec`."""
    chosen = {}
    for item in items:
        label, eq, spec = item.partition("=")
        if not eq:
            if label != CONTROL and label not in METHODS:
                raise UserError(f"--methods {item}: not one of {', '.join([*METHODS, CONTROL])} "
                                f"(or give label=selector:key=value,...)")
            spec = METHODS.get(label, CONTROL)
        chosen[label] = spec
    return chosen


def python(*args: str, threads: int = 1, log: Path | None = None) -> None:
    """Run `python -m ...` in a child process with `threads` torch threads; its output to `log`."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", *args]
    with open(log, "a") if log else open(os.devnull, "w") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise UserError(f"{' '.join(cmd)} failed (exit {done.returncode}); see {log}")


def run(pool: Path, output: Path, methods: dict[str, str], seeds: list[int], config: str,
        ratio: float, block_size: int, vocab_size: int, jobs: int, heldout_docs: int | None,
        select_seed: int, sets: list[str]) -> dict:
    started = time.time()
    if not (pool / "pool.json").is_file():
        raise UserError(f"--pool {pool}: no pool.json (build it with `make pool`)")
    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prepared = pool / "prepared"
    stamp = {}

    def timed(name, fn):
        t0 = time.time()
        fn()
        stamp[name] = round(time.time() - t0, 1)
        print(f"downstream: {name} done in {stamp[name]} s", flush=True)

    timed("prepare", lambda: python("reproduce", "prepare", "--input", str(pool / "fineweb"),
                                    "--output", str(prepared), "--max_seq_length", "128",
                                    "--no_progress", threads=2, log=logs / "prepare.log"))

    def select():
        for label, spec in methods.items():
            out = output / "select" / label
            if label == CONTROL:
                if not (out / "selection.parquet").is_file():
                    python("reproduce", "control", "--pool", str(pool), "--prepared",
                           str(prepared), "--select_ratio", str(ratio), "--output", str(out),
                           "--seed", str(select_seed), log=logs / "select.log")
                continue
            summary = out / "summary.json"
            if summary.is_file() and json.loads(summary.read_text()).get("method") == spec:
                continue  # finished before: the same spec on the same prepared rows
            python("reproduce", "select", "--input", str(prepared), "--method", spec,
                   "--output", str(out), "--select_ratio", str(ratio), "--block_size",
                   str(block_size), "--seed", str(select_seed), threads=2,
                   log=logs / "select.log")
    timed("select", select)

    tokenizer = output / "tokenizer" / "tokenizer.json"

    def tokenize():
        if not tokenizer.is_file():
            python("reproduce", "tokenizer", "--input", str(pool / "fineweb"), "--output",
                   str(tokenizer), "--vocab_size", str(vocab_size), log=logs / "tokenize.log")
        for label in methods:
            if not (output / "tokens" / label / "summary.json").is_file():
                python("reproduce", "tokenize", "--input", str(pool / "fineweb"), "--selection",
                       str(output / "select" / label / "selection.parquet"), "--tokenizer",
                       str(tokenizer), "--output", str(output / "tokens" / label),
                       log=logs / "tokenize.log")
    timed("tokenize", tokenize)

    def train_and_evaluate(label: str, seed: int) -> None:
        ckpt = output / "train" / label / f"seed{seed}"
        log = logs / f"{label}.seed{seed}.log"
        if not (ckpt / "summary.json").is_file():
            overrides = [a for s in [f"seed={seed}", "threads=1", *sets] for a in ("--set", s)]
            python("reproduce", "train", "--tokens", str(output / "tokens" / label),
                   "--tokenizer", str(tokenizer), "--config", config, "--no_progress",
                   "--output", str(ckpt), *overrides, log=log)
        if not (output / "eval" / f"{label}.seed{seed}.json").is_file():
            docs = ["--heldout_docs", str(heldout_docs)] if heldout_docs else []
            python("reproduce", "evaluate", "--checkpoints", str(ckpt), "--tasks", *TASKS,
                   "--data_dir", str(pool / "tasks"), "--heldout", str(pool / "heldout"),
                   *docs, "--output", str(output / "eval"), log=log)
        print(f"downstream: {label} seed {seed} trained and evaluated", flush=True)

    def train_all():
        # seeds outermost: a run stopped early still holds every method at the first seeds
        runs = [(label, seed) for seed in seeds for label in methods]
        with ThreadPoolExecutor(max_workers=jobs) as workers:
            for future in [workers.submit(train_and_evaluate, *r) for r in runs]:
                future.result()
    timed("train+evaluate", train_all)

    tables = output / "tables"

    def tables_and_figure():
        python("reproduce", "tables", "--results", str(output / "eval"), "--output",
               str(tables), "--pool", str(pool), log=logs / "tables.log")
        python("figures.downstream", "--table", str(tables / "table2.json"), "--output",
               str(output / "figures"), log=logs / "tables.log")
    timed("tables", tables_and_figure)

    record = {"pool": str(pool), "methods": methods, "seeds": seeds, "config": config,
              "set": sets, "select_ratio": ratio, "block_size": block_size,
              "vocab_size": vocab_size, "jobs": jobs, "heldout_docs": heldout_docs,
              "select_seed": select_seed, "stage_wall_s": stamp,
              "wall_s": round(time.time() - started, 1), "runs": runs_table(output)}
    write_json_atomic(record, output / "downstream.json")
    print((tables / "table2.md").read_text())
    return record


def runs_table(output: Path) -> list[dict]:
    """Per (method, seed): tokens seen, unique tokens, epochs, wall times (train and eval)."""
    rows = []
    for summary in sorted((output / "train").glob("*/seed*/summary.json")):
        s = json.loads(summary.read_text())
        label, seed = summary.parent.parent.name, s["seed"]
        ev = output / "eval" / f"{label}.seed{seed}.json"
        rows.append({"method": label, "seed": seed, "tokens_in_selection": s["tokens_in_data"],
                     "tokens_seen": s["tokens_seen"], "unique_tokens_seen": s["unique_tokens_seen"],
                     "epochs": s["epochs"], "train_wall_s": s["train_wall_s"],
                     "eval_wall_s": json.loads(ev.read_text()).get("eval_wall_s")
                     if ev.is_file() else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    from datamask.cli import run_command

    p = argparse.ArgumentParser(prog="python -m reproduce.pipeline.downstream", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", required=True, help="pool folder (make pool)")
    p.add_argument("--output", required=True, help="run folder")
    p.add_argument("--methods", nargs="+", default=[*METHODS, CONTROL],
                   help="labels (default: all of %(default)s) or label=selector:key=value,...")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                   help="training seeds (default: %(default)s)")
    p.add_argument("--config", default="downstream", help="train config (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a train/model setting for every run")
    p.add_argument("--select_ratio", type=float, default=0.10,
                   help="(default: %(default)s, the paper's FineWeb-Mask ratio; point C of "
                   "reproduce/results/downstream/sweep-plan.md)")
    p.add_argument("--block_size", type=int, default=5000,
                   help="select's rows per block (default: %(default)s)")
    p.add_argument("--select_seed", type=int, default=0,
                   help="seed of every selection (block plan, seeded selectors, the control)")
    p.add_argument("--vocab_size", type=int, default=4096, help="(default: %(default)s)")
    p.add_argument("--jobs", type=int, default=2,
                   help="training/evaluation processes at once (default: %(default)s)")
    p.add_argument("--heldout_docs", type=int,
                   help="score only each domain's first N held-out documents")

    def command(args):
        run(Path(args.pool), Path(args.output), parse_methods(args.methods), args.seeds,
            args.config, args.select_ratio, args.block_size, args.vocab_size, args.jobs,
            args.heldout_docs, args.select_seed, args.set)

    p.set_defaults(func=command)
    return run_command(p, argv, "reproduce.pipeline.downstream")


if __name__ == "__main__":
    sys.exit(main())

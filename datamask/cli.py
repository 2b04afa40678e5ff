"""`datamask`: the command line. Thin: it parses flags, reads data, calls a selector, writes.

Subcommands: `select` (the DATAMASK learner, with the flags of the original train_mask.py),
`baseline` (any registered baseline by name), `synth` (a synthetic shard in the data contract),
`demo` (the learner beside quality top-k and random on a synthetic shard, in seconds) and
`pipeline STAGE` (the reproduction pipeline of `reproduce/`, FineWeb shards to Table 2).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

from . import data as contract
from .data import read_dataset
from .errors import UserError
from .learner import LR_SCHEDULES, LearnerConfig

DEFAULTS = LearnerConfig()


def _add_io_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    io = parser.add_argument_group("data")
    io.add_argument("--input", nargs="+", required=required, metavar="IN.parquet",
                    help="one or more Parquet files, read as one dataset in the order given")
    io.add_argument("--output", required=required, metavar="OUT.parquet",
                    help="selection: the id column, 'selected' (bool) and 'score', one row per "
                         "input row in input order; written to a temporary name, then renamed")
    io.add_argument("--id_column", default=contract.ID_COLUMN,
                    help="integer id, unique across all inputs (default: %(default)s)")
    io.add_argument("--quality_column", default=contract.QUALITY_COLUMN,
                    help="quality score, higher is better (default: %(default)s)")
    io.add_argument("--feature_column", default=contract.FEATURE_COLUMN,
                    help="embedding, a list of floats of one length (default: %(default)s)")
    io.add_argument("--select_ratio", type=float, default=DEFAULTS.select_ratio,
                    help="fraction of all input rows to select; the count is round-half-up of "
                         "ratio * N (default: %(default)s)")
    io.add_argument("--report", action="store_true",
                    help="after selecting, print mean quality, every diversity metric and the "
                         "joint objective of the selection on the whole input as JSON (costs "
                         "O(N * k * d) for Facility)")


def add_learner_arguments(parser: argparse.ArgumentParser) -> None:
    """The learner's flags, with the names of the original train_mask.py where it had them."""
    _add_io_arguments(parser)
    g = parser.add_argument_group("learner (names of the original train_mask.py)")
    g.add_argument("--algorithm", default=DEFAULTS.algorithm, choices=["DiSF", "Facility", "Pair_simi"],
                   help="diversity metric joined with quality (default: %(default)s)")
    g.add_argument("--lamb", type=float, default=DEFAULTS.lamb,
                   help="weight of quality; 1 - lamb weighs diversity; both terms standardised "
                        "by their spread over random masks (default: %(default)s)")
    g.add_argument("--n_rollout", type=int, default=DEFAULTS.n_rollout,
                   help="G, masks sampled per step (paper: 128 or 256) (default: %(default)s)")
    g.add_argument("--n_epochs", type=int, default=DEFAULTS.n_epochs,
                   help="optimisation steps (default: %(default)s)")
    g.add_argument("--partial", type=float, default=DEFAULTS.partial,
                   help="fraction of the candidate rows each step samples from and updates "
                        "(paper: 0.05-0.1; 1 = all rows every step) (default: %(default)s)")
    g.add_argument("--max_lr", type=float, default=DEFAULTS.max_lr,
                   help="learning rate at the first step (default: %(default)s)")
    g.add_argument("--min_lr", type=float,
                   help=f"learning rate at the last step, for --lr_schedule linear or cosine "
                        f"(default: {DEFAULTS.min_lr:g})")
    g.add_argument("--init", default=DEFAULTS.init, choices=["same", "quality"],
                   help="initial logits: all equal, or log quality so that selection probability "
                        "is proportional to quality (default: %(default)s)")
    g.add_argument("--device", default=DEFAULTS.device,
                   help="cpu, cuda, cuda:N or auto (CUDA when available) (default: %(default)s)")
    g.add_argument("--seed", type=int, default=DEFAULTS.seed,
                   help="same seed, same device: same selection (default: %(default)s)")
    x = parser.add_argument_group("learner (added by this project)")
    x.add_argument("--prune_ratio", type=float, default=DEFAULTS.prune_ratio,
                   help="drop this fraction of rows, lowest quality first, before learning "
                        "(paper: 0.4-0.5) (default: %(default)s)")
    x.add_argument("--lr_schedule", default=DEFAULTS.lr_schedule, choices=list(LR_SCHEDULES),
                   help="constant at --max_lr (the best of make ablation-lr), or from --max_lr "
                        "to --min_lr: linear (the original train_mask.py's) or cosine "
                        "(default: %(default)s)")
    x.add_argument("--logprob", default=DEFAULTS.logprob, choices=["simple", "exact"],
                   help="log P(mask): sum of log-softmax over the selected rows (paper), or the "
                        "exact Plackett-Luce probability of the draw order (default: %(default)s)")
    x.add_argument("--scale_on", default=DEFAULTS.scale_on, choices=["step", "input"],
                   help="fit the spreads that put quality and diversity on one scale on random "
                        "masks of a partial step's shape, or of the full budget on all rows (the "
                        "shape --report scores; slower for Facility) (default: %(default)s)")
    x.add_argument("--readoff", default=DEFAULTS.readoff, choices=["topk", "sample"],
                   help="final subset: top-k of the final logits, or one draw from the final "
                        "policy (default: %(default)s)")
    x.add_argument("--log_jsonl", metavar="PATH",
                   help="write one JSON line per step: step, lr, mean and max rollout objective, "
                        "optimisation seconds so far")
    x.add_argument("--eval_every", type=int, default=0, metavar="STEPS",
                   help="with --log_jsonl: every STEPS steps also log the whole-input metrics of "
                        "the current top-k (not counted in the optimisation time) (default: off)")
    x.add_argument("--checkpoint", metavar="PATH",
                   help="where the learner saves its state (default: OUTPUT.ckpt)")
    x.add_argument("--checkpoint_every", type=int, default=100, metavar="STEPS",
                   help="save the state every STEPS steps, atomically; 0 = only at the end "
                        "(default: %(default)s)")
    x.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint if there is one (else start, and say so); "
                        "the result equals an uninterrupted run's. Settings and data must match")
    x.add_argument("--no_progress", action="store_true", help="hide the progress bar")


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """Method flags of the baselines; each is passed only to the baselines that take it, and a
    flag left out keeps that baseline's default (given in brackets)."""
    g = parser.add_argument_group("greedy baselines (disf-greedy, disf-greedy-fast, "
                                  "facility-greedy, pair-greedy, joint-greedy)")
    g.add_argument("--device", help="cpu, cuda, cuda:N or auto [auto]")
    g.add_argument("--batch_size", type=int,
                   help="disf-greedy*: rows per consecutive batch (reference: 1024) [1024]")
    g.add_argument("--picks_per_batch", type=int,
                   help="disf-greedy*: picks per full batch (reference: 16); the last partial "
                        "batch takes the rest of the budget [the batch's share of the ratio]")
    g.add_argument("--mode", choices=["batched", "global"],
                   help="disf-greedy-fast: per batch like disf-greedy, or one greedy over all "
                        "rows [batched]")
    g.add_argument("--optimizer", choices=["lazy", "naive"],
                   help="facility-greedy, joint-greedy (Facility): lazy (Minoux) or naive "
                        "greedy, same picks [lazy]")
    g.add_argument("--memory_gb", type=float,
                   help="facility-greedy: largest N x N float32 kernel to hold, else GreeDi "
                        "partitions; joint-greedy (Facility): else kernel rows on demand [8]")
    g.add_argument("--algorithm", choices=["DiSF", "Facility", "Pair_simi"],
                   help="joint-greedy: diversity metric joined with quality [Pair_simi]")
    g.add_argument("--lamb", type=float, default=DEFAULTS.lamb,
                   help="joint-greedy: weight of quality, as in select; also the lamb of "
                        "--report (default: %(default)s)")
    d = parser.add_argument_group("semdedup, cluster-quota")
    d.add_argument("--n_clusters", type=int,
                   help="spherical k-means clusters [semdedup: round(sqrt(N)); cluster-quota: 64]")
    d.add_argument("--keep", choices=["hard", "easy", "random"],
                   help="order inside a cluster, whose first row of a duplicate group is kept: "
                        "farthest from the centroid first, nearest first, or random [hard]")
    d.add_argument("--eps", type=float, nargs="+", metavar="EPS",
                   help="eps values whose removal counts the history reports; the eps used is "
                        "found by bisection to meet --select_ratio [0.001 0.005 0.01 0.05 0.1 "
                        "0.2 0.3]")
    o = parser.add_argument_group("one-shot scores (knn-density, cluster-quota, mmr)")
    o.add_argument("--neighbors", type=int,
                   help="knn-density: nearest neighbours whose mean cosine is the density [10]")
    o.add_argument("--penalty", type=float,
                   help="knn-density: weight of the density z-score against quality's [1.0]")
    o.add_argument("--balance", choices=["proportional", "equal"],
                   help="cluster-quota: quota per cluster by its size, or equal [proportional]")
    o.add_argument("--trade_off", type=float,
                   help="mmr: weight of quality against the max cosine to picked rows [0.5]")
    q = parser.add_argument_group("quality-threshold")
    q.add_argument("--threshold", type=float,
                   help="keep rows whose rule value is at least this (DCLM: 0.018112 with "
                        "--rule raw) [3]")
    q.add_argument("--rule", choices=["int_score", "raw"],
                   help="int_score: FineWeb-Edu's int(round(clamp(score, 0, 5))), half to "
                        "even; raw: the score itself [int_score]")


def _learner_params(args: argparse.Namespace) -> dict:
    if args.min_lr is not None and args.lr_schedule == "constant":
        raise UserError("--min_lr has no effect with --lr_schedule constant (the default): add "
                        "--lr_schedule linear for the original train_mask.py's decay, or drop it")
    names = ("algorithm", "lamb", "n_rollout", "n_epochs", "partial", "max_lr", "lr_schedule",
             "init", "device", "seed", "prune_ratio", "logprob", "readoff", "scale_on")
    params = {name: getattr(args, name) for name in names}
    params["min_lr"] = DEFAULTS.min_lr if args.min_lr is None else args.min_lr
    return params


def _run_and_write(selector, data, args) -> dict:
    """Select, write the output, and return a JSON-able summary (with metrics under --report)."""
    selection = selector.select(data, args.select_ratio)
    selection.write(args.output, args.id_column)
    summary = {"method": selection.method, "rows": len(data),
               "selected": int(selection.selected.sum()), "output": str(args.output),
               "wall_time_s": round(selection.wall_time_s, 3)}
    if args.report:
        from .report import Report

        lamb = getattr(args, "lamb", DEFAULTS.lamb)
        summary["metrics"] = Report(data, args.select_ratio, lamb, seed=args.seed)(selection.selected)
    return summary


def _check_output(path: str) -> None:
    """Refuse before any work is done, not after hours of it."""
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UserError(f"--output {path}: the folder {parent} does not exist")


def cmd_select(args: argparse.Namespace) -> None:
    from .report import Report
    from .selectors import make_selector

    _check_output(args.output)
    params = _learner_params(args)
    LearnerConfig(select_ratio=args.select_ratio, **params).validate()
    if args.checkpoint_every < 0:
        raise UserError(f"--checkpoint_every must be 0 or more, got {args.checkpoint_every}")
    data = read_dataset(args.input, args.id_column, args.quality_column, args.feature_column)
    run = {"log_path": args.log_jsonl, "progress": not args.no_progress, "resume": args.resume,
           "checkpoint_path": args.checkpoint or f"{args.output}.ckpt",
           "checkpoint_every": args.checkpoint_every}
    if args.eval_every:
        if not args.log_jsonl:
            raise UserError("--eval_every needs --log_jsonl (the values go to that log)")
        run.update(eval_every=args.eval_every,
                   evaluate=Report(data, args.select_ratio, args.lamb, seed=args.seed))
    summary = _run_and_write(make_selector("datamask", **params, **run), data, args)
    print(json.dumps(summary, indent=2))


# Method flags of `datamask baseline`; None means "not given", so the selector's default applies.
BASELINE_FLAGS = ("batch_size", "picks_per_batch", "mode", "optimizer", "memory_gb", "algorithm",
                  "n_clusters", "keep", "eps", "neighbors", "penalty", "balance", "trade_off",
                  "threshold", "rule", "device")


def _options_for(name: str, args: argparse.Namespace) -> dict:
    """The options selector `name` takes: every method flag given (an error if it takes none of
    that name), plus --seed and --lamb where it takes them (they always have a value)."""
    from .selectors import selector_class

    accepted = inspect.signature(selector_class(name).__init__).parameters
    given = {key: getattr(args, key) for key in BASELINE_FLAGS if getattr(args, key) is not None}
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise UserError(f"baseline {name} takes no {', '.join('--' + key for key in unknown)}")
    given.update({key: getattr(args, key) for key in ("seed", "lamb") if key in accepted})
    if "eps" in given:
        given["eps"] = tuple(given["eps"])
    return given


def cmd_baseline(args: argparse.Namespace) -> None:
    from .selectors import SELECTORS, make_selector, selector_names

    if args.list:
        for name in selector_names():
            doc = (SELECTORS[name].__doc__ or sys.modules[SELECTORS[name].__module__].__doc__ or "")
            print(f"{name:18s} {doc.strip().splitlines()[0] if doc.strip() else ''}")
        return
    if not args.name:
        raise UserError("name a baseline (datamask baseline --list shows them)")
    if not args.input or not args.output:
        raise UserError("datamask baseline needs --input and --output")
    _check_output(args.output)
    selector = make_selector(args.name, **_options_for(args.name, args))
    data = read_dataset(args.input, args.id_column, args.quality_column, args.feature_column)
    print(json.dumps(_run_and_write(selector, data, args), indent=2))


def cmd_synth(args: argparse.Namespace) -> None:
    from .synthetic import synthetic_dataset

    _check_output(args.output)
    data = synthetic_dataset(args.rows, args.dim, args.clusters, seed=args.seed)
    contract.write_dataset(args.output, data.ids, data.quality, data.features)
    print(f"wrote {len(data)} rows x {data.dim}-d to {args.output}")


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    run_demo(Path(args.workdir), device=args.device)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="datamask",
        description="DATAMASK: joint quality and diversity selection of pre-training data by "
                    "policy-gradient mask learning (Fan et al., ICLR 2026), with its baselines.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("select", help="learn a selection mask with DATAMASK",
                       description="Learn a selection mask with the policy-gradient learner.")
    add_learner_arguments(p)
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("baseline", help="run a baseline selector by name",
                       description="Run a registered baseline; same output schema as select.")
    p.add_argument("name", nargs="?", help="baseline name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered selectors and exit")
    _add_io_arguments(p, required=False)  # not needed with --list; checked in cmd_baseline
    p.set_defaults(func=cmd_baseline)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of randomised baselines (default: %(default)s)")
    add_baseline_arguments(p)

    p = sub.add_parser("synth", help="write a synthetic clustered shard in the data contract")
    p.add_argument("--output", required=True, metavar="OUT.parquet")
    p.add_argument("--rows", type=int, default=3000, help="rows (default: %(default)s)")
    p.add_argument("--dim", type=int, default=64, help="feature length (default: %(default)s)")
    p.add_argument("--clusters", type=int, default=24, help="clusters (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("demo", help="run the main job on the embedded default data")
    p.add_argument("--workdir", default="runs/demo", help="where inputs and selections go")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: %(default)s)")
    p.set_defaults(func=cmd_demo)

    from reproduce.cli import add_pipeline_commands

    add_pipeline_commands(sub)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None, prog: str) -> int:
    """Parse and run a subcommand; bad input (UserError) is one line on stderr and exit 2."""
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except UserError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, "datamask")


if __name__ == "__main__":
    sys.exit(main())

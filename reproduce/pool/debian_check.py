"""Whether the Debian sources a stage reads can be had here, asked by `make pool`, `make demo`,
`make outside` and `make downstream` before any work, the virtualenv included: the packages come
from `apt-get download` and `dpkg-deb -x` into the cache (sources.fetch_debian), so a machine
without those tools builds the pool, or the target outside it, only from a cache that holds them
unpacked already. The standard library only: the Makefile runs this file by its path with the
system's python3, given `pool`'s own flags (--cache and --domains matter).

    python3 reproduce/pool/debian_check.py [--cache DIR] [--domains DOMAIN ...] [--outside]
                                           [--no_pool]

Nothing printed and exit 0 where it can; else one line on stderr saying what to do, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

# the pool's domains read from a Debian package, and the package: sources.py reads them here
POOL_PACKAGES = {"docs": "python3.11-doc", "reference": "dict-foldoc",
                 "books": "r-cran-janeaustenr"}
# the packages the target outside the pool reads (outside.py)
OUTSIDE_PACKAGES = ("fortunes", "dict-gcide")
VERSION_FILE = ".version"  # in a package's unpacked folder: the mark of a complete unpacking


def default_cache() -> Path:
    """The cache the pool fetches its sources into: pipeline.common.cache_root()'s pool-sources
    (spelled here again: this file runs by its path with the standard library alone)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "datamask" / "pool-sources"


def has_apt() -> bool:
    return shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None


def missing(cache: Path, packages: list[str]) -> list[str]:
    """The packages of `packages` that this machine can neither fetch nor find in `cache`."""
    if has_apt():
        return []
    return [p for p in packages if not (cache / p / VERSION_FILE).exists()]


def refusal(stage: str, lacking: list[str], cache: Path) -> str:
    return (f"{stage}: the Debian packages {', '.join(lacking)} are not in {cache} and this "
            f"machine has no apt-get/dpkg-deb to fetch them: install both, or unpack each "
            f"package's .deb there as PACKAGE/ (`ar x`, then `tar -xf data.tar.*`) with its "
            f"version in PACKAGE/{VERSION_FILE}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--cache")
    parser.add_argument("--domains", nargs="+", default=list(POOL_PACKAGES))
    parser.add_argument("--outside", action="store_true", help="the target outside the pool's")
    parser.add_argument("--no_pool", action="store_true", help="not the pool's packages")
    args, _ = parser.parse_known_args(argv)  # pool's other flags do not matter here
    cache = Path(args.cache) if args.cache else default_cache()
    asked = {"pool": [] if args.no_pool else [POOL_PACKAGES[d] for d in args.domains
                                              if d in POOL_PACKAGES],
             "outside": list(OUTSIDE_PACKAGES) if args.outside else []}
    for stage, packages in asked.items():
        if lacking := missing(cache, packages):
            print(refusal(stage, lacking, cache), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whether the pool's Debian sources can be had here, asked by `make pool` and `make demo` before
any work, the virtualenv included: the packages come from `apt-get download` and `dpkg-deb -x`
into the cache (sources.fetch_debian), so a machine without those tools builds the pool only from
a cache that holds them unpacked already. The standard library only: the Makefile runs this file
by its path with the system's python3, given `pool`'s own flags (--cache and --domains matter).

    python3 reproduce/pool/debian_check.py [--cache DIR] [--domains DOMAIN ...]

Nothing printed and exit 0 where it can; else one line on stderr saying what to do, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

# the pool's domains read from a Debian package, and the package (sources.DEBIAN_PACKAGES)
POOL_PACKAGES = {"docs": "python3.11-doc", "reference": "dict-foldoc",
                 "books": "r-cran-janeaustenr"}
VERSION_FILE = ".version"  # in a package's unpacked folder: the mark of a complete unpacking


def default_cache() -> Path:
    """~/.cache/datamask/pool-sources ($XDG_CACHE_HOME/datamask/...), as build.default_cache."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache_home) / "datamask" / "pool-sources"


def has_apt() -> bool:
    return shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None


def missing(cache: Path, domains: list[str]) -> list[str]:
    """The packages of `domains` that this machine can neither fetch nor find in `cache`."""
    if has_apt():
        return []
    return [POOL_PACKAGES[d] for d in domains
            if d in POOL_PACKAGES and not (cache / POOL_PACKAGES[d] / VERSION_FILE).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--cache")
    parser.add_argument("--domains", nargs="+", default=list(POOL_PACKAGES))
    args, _ = parser.parse_known_args(argv)  # pool's other flags do not matter here
    cache = Path(args.cache) if args.cache else default_cache()
    lacking = missing(cache, args.domains)
    if lacking:
        print(f"pool: the Debian packages {', '.join(lacking)} are not in {cache} and this "
              f"machine has no apt-get/dpkg-deb to fetch them: install both, or unpack each "
              f"package's .deb there as PACKAGE/ (`ar x`, then `tar -xf data.tar.*`) with its "
              f"version in PACKAGE/{VERSION_FILE}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

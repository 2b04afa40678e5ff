"""`make pool` and `make demo` on a machine without apt-get: with the pool's Debian packages
neither fetchable nor in the cache they stop before any work in one line, exit 2, that says what
to do; with the cache holding them (or no Debian domain asked for) they go on. The check is run
as the Makefile runs it, by its path, with a PATH that has no apt-get."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reproduce.pool import build, debian_check, sources

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "reproduce" / "pool" / "debian_check.py"


@pytest.fixture
def no_apt(tmp_path) -> dict:
    """An environment whose PATH holds make alone, and whose cache root is empty; make's own
    variables are dropped, so that under `make test` the inner make runs as from a shell (a
    sub-make prints its directory on stdout)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    if shutil.which("make"):
        (tools / "make").symlink_to(shutil.which("make"))
    outer = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}
    return {**{name: value for name, value in os.environ.items() if name not in outer},
            "PATH": str(tools), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def checked(env: dict, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), *flags], env=env, capture_output=True,
                          text=True)


def unpack(cache: Path, packages) -> None:
    for package in packages:
        (cache / package).mkdir(parents=True)
        (cache / package / debian_check.VERSION_FILE).write_text("1.0\n")


def test_it_checks_the_packages_and_the_cache_the_pool_reads(monkeypatch, tmp_path):
    assert debian_check.POOL_PACKAGES == {domain: spec["package"] for domain, spec
                                          in sources.DEBIAN_PACKAGES.items()}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert debian_check.default_cache() == build.default_cache()


def test_without_apt_or_the_cache_it_refuses_in_one_line_saying_what_to_do(no_apt, tmp_path):
    found = checked(no_apt)
    cache = tmp_path / "cache" / "datamask" / "pool-sources"
    assert found.returncode == 2 and found.stdout == ""
    assert found.stderr == (
        f"pool: the Debian packages python3.11-doc, dict-foldoc, r-cran-janeaustenr are not in "
        f"{cache} and this machine has no apt-get/dpkg-deb to fetch them: install both, or "
        f"unpack each package's .deb there as PACKAGE/ (`ar x`, then `tar -xf data.tar.*`) with "
        f"its version in PACKAGE/.version\n")
    unpack(cache, ["dict-foldoc"])  # only the packages still missing are named
    assert "packages python3.11-doc, r-cran-janeaustenr are not in" in checked(no_apt).stderr


def test_with_the_cache_holding_them_or_no_debian_domain_it_goes_on(no_apt, tmp_path):
    assert checked(no_apt, "--domains", "news", "--seed", "1").returncode == 0
    own = tmp_path / "own-cache"
    unpack(own, debian_check.POOL_PACKAGES.values())
    assert checked(no_apt).returncode == 2
    found = checked(no_apt, "--cache", str(own), "--max_mb_per_domain", "0.5")
    assert (found.returncode, found.stdout, found.stderr) == (0, "", "")
    unpack(tmp_path / "cache" / "datamask" / "pool-sources", debian_check.POOL_PACKAGES.values())
    assert checked(no_apt).returncode == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_demo_and_pool_stop_before_any_work_in_one_line(no_apt, tmp_path):
    """`make -n` runs no recipe; the check runs as the Makefile is read, before the virtualenv."""
    def make(*goal: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "-n", *goal, f"PYTHON={sys.executable}",
                               f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=no_apt,
                              capture_output=True, text=True)

    for goal in ("demo", "pool"):
        refused = make(goal)
        assert refused.returncode == 2 and refused.stdout == ""
        assert len(refused.stderr.splitlines()) == 1
        assert "pool: the Debian packages python3.11-doc" in refused.stderr
    assert make("pool", "POOL_FLAGS=--domains news").returncode == 0
    unpack(tmp_path / "cache" / "datamask" / "pool-sources", debian_check.POOL_PACKAGES.values())
    assert make("pool").returncode == 0

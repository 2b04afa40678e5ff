"""`make pool`, `demo`, `outside` and `downstream` on a machine without apt-get: with their Debian
packages neither fetchable nor in the cache they stop before any work in one line, exit 2, that
says what to do; with the cache holding them (or no Debian domain asked for) they go on. The check is run
as the Makefile runs it, by its path, with a PATH that has no apt-get."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from datamask.errors import UserError
from reproduce.pipeline.common import cache_root
from reproduce.pool import debian_check
from reproduce.pool.outside import build_outside

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


def test_it_checks_the_cache_the_pipeline_keeps_its_downloads_in(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert debian_check.default_cache() == cache_root() / "pool-sources"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert debian_check.default_cache() == cache_root() / "pool-sources"


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
    cache = tmp_path / "cache" / "datamask" / "pool-sources"
    unpack(cache, debian_check.POOL_PACKAGES.values())
    assert make("pool").returncode == 0
    for goal in ("outside", "downstream"):  # the pool's packages are there, outside's are not
        refused = make(goal)
        assert (refused.returncode, refused.stdout) == (2, "")
        assert refused.stderr.startswith("Makefile:") and len(refused.stderr.splitlines()) == 1
        assert "outside: the Debian packages fortunes, dict-gcide are not in" in refused.stderr
    unpack(cache, debian_check.OUTSIDE_PACKAGES)
    assert make("outside").returncode == 0 and make("downstream").returncode == 0


def test_outside_asks_only_for_its_own_packages(no_apt, tmp_path):
    found = checked(no_apt, "--outside", "--no_pool")
    assert found.returncode == 2
    assert found.stderr.startswith("outside: the Debian packages fortunes, dict-gcide are not")
    assert checked(no_apt, "--outside").stderr.startswith("pool: the Debian packages")


def test_the_outside_stage_refuses_before_any_fetch(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no apt-get, no pip on PATH
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match=f"outside: the Debian packages fortunes, dict-gcide are "
                                        f"not in {cache}"):
        build_outside(tmp_path / "out", cache=cache)
    assert not (tmp_path / "out").exists() and not cache.exists()

"""Held-out text from outside the pool: a second bits-per-byte target that no selection of the pool
matches by construction (docs/downstream.md, "The target outside the pool").

  abc-news   the 300 ABC (Australian Broadcasting Corporation) articles of the Lee corpus
             (M. D. Lee, B. Pincombe, M. Welsh, CogSci 2005), one article a document, read from
             the test data of the pinned gensim wheel (PyPI); the wheel is read as a zip archive,
             never installed
  fortunes   Debian fortunes' quotation files on general topics (one quotation a document); the
             files about computing are left out, since two of the pool's domains are computing
  gcide      Debian dict-gcide, the Collaborative International Dictionary of English
             (Webster's 1913 with its usage quotations), its entries cut into page-sized
             documents as the pool's FOLDOC is

Each source keeps a seeded subset of whole documents up to --chars characters. The folder holds
`<source>.parquet` (`text`, `id`), the layout eval/bpb.py reads, and outside.json with each
source's package, version and SHA-256, so two runs can tell whether they scored the same text.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa

from datamask.data import write_json_atomic, write_table_atomic
from datamask.errors import UserError
from datamask.paths import check_folder_output

from ..pipeline.common import atomic_folder
from . import debian_check, sources
from .build import cache_folder, cap_chars

GENSIM = "gensim==4.3.3"
# the one wheel of GENSIM pip is asked for, whatever this machine's Python: the Lee corpus in it
# is the same text on every platform, and its hash below pins it
GENSIM_WHEEL = ["--python-version", "3.11", "--platform", "manylinux2014_x86_64",
                "--only-binary", ":all:", "--implementation", "cp"]
LEE_PATH = "gensim/test/test_data/lee_background.cor"
LEE_SHA256 = "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb"
# fortunes' quotation files on general topics; left out: computing (computers, debian, linux,
# linuxcookie, perl, knghtbrd, magic), pictures (ascii-art), fandom and word play (startrek,
# zippy, goedel, paradoxum), and files that are not quotations (translate-me, disclaimer)
FORTUNE_FILES = ("art", "definitions", "education", "food", "humorists", "kids", "law", "love",
                 "medicine", "men-women", "miscellaneous", "news", "people", "pets", "platitudes",
                 "politics", "pratchett", "science", "songs-poems", "sports", "wisdom", "work")
SOURCES = ("abc-news", "fortunes", "gcide")
CHARS = 250_000  # the pool's held-out characters per domain (reproduce/pool/build.py)


def fetch_gensim_wheel(cache: Path) -> Path:
    """The pinned gensim wheel in the cache; downloaded (not installed) on first use."""
    folder = cache / "gensim"
    wheels = sorted(folder.glob("gensim-*.whl"))
    if wheels:
        return wheels[0]
    tmp = cache / ".gensim.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                           str(tmp), *GENSIM_WHEEL, GENSIM], capture_output=True, text=True)
    wheels = sorted(tmp.glob("gensim-*.whl"))
    if done.returncode != 0 or not wheels:
        raise UserError(f"the target outside the pool reads the Lee corpus from {GENSIM}'s wheel: "
                        f"`pip download {GENSIM}` failed ({done.stderr.strip()[-300:]}); put the "
                        f"wheel under {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder / wheels[0].name


def abc_news(cache: Path) -> tuple[list[sources.Document], dict]:
    wheel = fetch_gensim_wheel(cache)
    try:
        raw = zipfile.ZipFile(wheel).read(LEE_PATH)
    except (zipfile.BadZipFile, KeyError) as err:
        raise UserError(f"{wheel}: no {LEE_PATH} in it ({err}); remove the file to fetch it again")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != LEE_SHA256:
        raise UserError(f"{wheel}: {LEE_PATH} has SHA-256 {digest}, not the pinned {LEE_SHA256}")
    articles = [line.strip() for line in raw.decode("utf-8").splitlines() if line.strip()]
    docs = [sources.Document("abc-news", f"lee/{i}", text, sources.fineweb_id(f"lee/{i}"))
            for i, text in enumerate(articles)]
    return docs, {"package": GENSIM, "registry": "PyPI", "file": LEE_PATH, "sha256": digest,
                  "licence": "LGPL-2.1 (gensim's test data)"}


def fortunes(cache: Path) -> tuple[list[sources.Document], dict]:
    root, version = sources.fetch_debian(debian_check.OUTSIDE_PACKAGES[0], cache)
    folder = root / "usr/share/games/fortunes"
    docs, digest = [], hashlib.sha256()
    for name in FORTUNE_FILES:
        path = folder / name
        if not path.is_file():
            raise UserError(f"{path}: missing; is Debian's fortunes unpacked there?")
        raw = path.read_bytes()
        digest.update(raw)
        quotes = [q.strip("\n") for q in raw.decode("utf-8", errors="replace").split("\n%\n")]
        docs += [sources.Document("fortunes", f"fortunes/{name}/{i}", q,
                                  sources.fineweb_id(f"fortunes/{name}/{i}"))
                 for i, q in enumerate(quotes) if q.strip() and q.strip() != "%"]
    return docs, {"package": "fortunes", "registry": "Debian", "version": version,
                  "files": list(FORTUNE_FILES), "sha256": digest.hexdigest(),
                  "licence": "public domain and fair-use quotations (Debian fortunes)"}


def gcide(cache: Path) -> tuple[list[sources.Document], dict]:
    root, version = sources.fetch_debian(debian_check.OUTSIDE_PACKAGES[1], cache)
    path = root / "usr/share/dictd/gcide.dict.dz"
    if not path.is_file():
        raise UserError(f"{path}: missing; is Debian's dict-gcide unpacked there?")
    raw = gzip.decompress(path.read_bytes())
    by_letter: dict[str, list[str]] = {}
    for head, body in sources.foldoc_entries(raw.decode("utf-8", errors="replace")):
        if head[0].isalpha():  # the licence notes before the entries start with other marks
            by_letter.setdefault(head[0].lower(), []).append(f"{head}\n{body}")
    docs = [doc for letter, entries in sorted(by_letter.items())
            for doc in sources.cut_documents(sources.Unit("gcide", f"gcide/{letter}", entries))]
    return docs, {"package": "dict-gcide", "registry": "Debian", "version": version,
                  "sha256": hashlib.sha256(raw).hexdigest(), "licence": "GPL-3+ (GCIDE)"}


READERS = {"abc-news": abc_news, "fortunes": fortunes, "gcide": gcide}


def build_outside(output: Path, chars: int = CHARS, seed: int = 0,
                  cache: Path | None = None) -> dict:
    """Write output/<source>.parquet and outside.json (or find them written with the same
    settings); returns outside.json's content."""
    if chars < 1_000:
        raise UserError(f"--chars must be at least 1000, got {chars}")
    check_folder_output("--output", output)  # a file there is refused before any fetch
    cache = cache_folder(cache)
    if lacking := debian_check.missing(cache, list(debian_check.OUTSIDE_PACKAGES)):
        raise UserError(debian_check.refusal("outside", lacking, cache))
    manifest = output / "outside.json"
    config = {"chars": chars, "seed": seed}
    if manifest.is_file():
        found = json.loads(manifest.read_text())
        if found.get("config") == config:
            return {**found, "cached": True}
        raise UserError(f"--output {output}: holds a target built with {found.get('config')}; "
                        f"give another folder")
    if output.exists() and any(output.iterdir()):
        raise UserError(f"--output {output}: a folder with other files in it (no outside.json); "
                        f"give a new folder")
    summary = {"config": config, "rule": f"a seeded subset of whole documents per source, at "
                                          f"most {chars} characters", "sources": {}}
    tables = {}
    for name in SOURCES:
        docs, provenance = READERS[name](cache)
        kept = cap_chars(docs, chars, seed)
        tables[name] = pa.table({"text": [d.text for d in kept], "id": [d.id for d in kept]})
        summary["sources"][name] = {**provenance, "documents": len(kept),
                                    "documents_in_source": len(docs),
                                    "chars": sum(len(d.text) for d in kept)}
    with atomic_folder(output) as tmp:
        for name, table in tables.items():
            write_table_atomic(table, tmp / f"{name}.parquet")
        write_json_atomic(summary, tmp / "outside.json")
    return summary

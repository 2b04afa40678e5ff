"""prepare's heuristic quality scorer (reproduce/pipeline/quality.py) against datatrove's filters
run one by one on each document, float for float: on the pool's rows, BBC articles and texts
made to hit the filters' edges; its n-gram counters against datatrove's own helpers."""

from __future__ import annotations

import numpy as np
import pytest

from reproduce.pipeline.bbc import bbc_articles
from reproduce.pipeline.quality import (GluedNGrams, HeuristicScorer, SpacedNGrams,
                                        reference_score)

PROSE = ("The committee met on Tuesday to review the plan. It agreed that the budget should be "
         "cut by a tenth, and that the savings would go to the schools. Members said the vote "
         "was close. The chair thanked the staff for their work. A final report is due in May.")

EDGES = [
    "",
    "word",
    "   \n\t  \n",
    "!!! ??? ... ;;; ---",
    "12345 67890 3.14 2,718 #42",
    "x" * 1500 + " is a very long word. " + PROSE,  # C4's max_word_length
    (PROSE + " ") * 40,  # one very long line, repeated n-grams
    "\n".join([PROSE] * 6),  # duplicate lines and paragraphs
    "\n\n".join(f"Paragraph {i}. " + PROSE for i in range(8)),
    "[1] The first line cites. " + PROSE + "\n[edit] " + PROSE + " [citation needed]",
    "Hello.  . x\nHello.\t. x and more words here.\n" + PROSE,  # whitespace tokens between periods
    " leading space. " + PROSE + "  trailing  ",
    "lorem ipsum dolor sit amet, the consectetur.\n" + PROSE,
    PROSE + "\nfunction f() { return 1; } and the rest of it.",
    PROSE + "\nThis site uses cookies and the privacy policy applies.\nEnable javascript now.",
    "\r\n".join(["Line one is here and it ends.", PROSE, "- a bullet of the list", "• another"]),
    PROSE + "\u2028" + PROSE + "\x0c" + PROSE + "\x1c" + PROSE + "\x85end of it all.",
    "- item\n- item\n- item\n- item the of and to",
    "Wait...\nAnd then...\nMore…\n" + PROSE,
    "I can't believe it's gonna rain :) at 5p.m. in the U.S.A., e.g. www.example.com/a?b=c.",
    "ab c ab c ab c abc abc abc a bc a bc " * 12,  # n-grams equal glued, not spaced
    "Ünïcödé wörds ünd the ﬁ ligature, 東京 and the 中文 text. " + PROSE,
    "\x00 nul and the \u200b zero width space of the text. " + PROSE,
]


def assert_same(texts: list[str], batch: int = 64) -> None:
    scorer = HeuristicScorer()
    got = np.concatenate([scorer(texts[i:i + batch]) for i in range(0, len(texts), batch)])
    want = np.array([reference_score(t, scorer.filters, scorer.stops) for t in texts],
                    np.float32)
    bad = np.flatnonzero(got != want)
    assert not len(bad), [(texts[i][:80], want[i], got[i]) for i in bad[:3]]


def test_edges_score_as_datatrove_filters():
    assert_same(EDGES, batch=5)


def test_pool_rows_score_as_datatrove_filters(pool):
    _, _, rows = pool
    texts = [row["text"] for row in rows]
    assert_same(texts)
    levels = np.floor(HeuristicScorer()(texts))
    assert len(np.unique(levels)) > 2  # the sample reaches several levels, not one


def test_bbc_articles_score_as_datatrove_filters():
    assert_same([a["text"] for a in bbc_articles()[::40]])


def test_score_does_not_depend_on_what_was_scored_before():
    scorer = HeuristicScorer()
    first = scorer(EDGES)
    scorer(EDGES[::-1])
    assert np.array_equal(scorer(EDGES), first)


def test_text_that_trips_spacy_is_scored():
    """'IS_ALPHA' can make spaCy's vocabulary fail after memory zones; datatrove's tokenizer then
    retries without it, so its words for such a text depend on what spaCy did before: the score
    is datatrove's own, in range, and not an error, in any order."""
    scorer = HeuristicScorer()
    texts = ["IS_ALPHA " + PROSE, "IS_[1]ALPHA cut out of a citation.\n" + PROSE] * 3
    for _ in range(3):
        scores = np.concatenate([scorer(texts), scorer(EDGES + texts[::-1])])
        assert np.all((scores >= 0) & (scores < 5))


@pytest.mark.parametrize("seed", range(3))
def test_ngram_counters_match_datatrove(seed):
    """Words from a tiny alphabet, so n-grams repeat, overlap and collide when glued."""
    from datatrove.pipeline.filters import gopher_repetition_filter as dup

    rng = np.random.default_rng(seed)
    alphabet = ["a", "b", "ab", "ba", "bab", "c"]
    for _ in range(60):
        words = [alphabet[i] for i in rng.integers(0, len(alphabet), rng.integers(0, 40))]
        index: dict[str, int] = {}
        ids = np.array([index.setdefault(w, len(index)) for w in words], np.int64)
        spaced, glued = SpacedNGrams(words, ids), GluedNGrams(words)
        for n in (2, 3, 4):
            if len(words) >= n:
                assert spaced.top_chars(n) == dup.find_top_duplicate(dup.get_n_grams(words, n))
        for n in range(5, 11):
            assert glued.repeated_chars(n) == dup.find_all_duplicate(words, n)

"""prepare's heuristic quality score, datatrove's filters' rules on one word split per document.

The score (prepare's `HeuristicQuality`): the number of datatrove's four heuristic filters that
keep a document (Gopher quality, Gopher repetition, C4 quality without its terminal-punctuation
rule, FineWeb quality, each with datatrove's defaults) plus the share of its words that are Gopher
stop words (capped at 0.999), so fluent prose orders first inside a level. `reference_score` is
that definition run literally, each filter's own `filter` on its own copy of the document.

Run literally, a document goes through spaCy's English tokenizer (datatrove's word splitter)
for each word split (three filters and the stop words; datatrove keeps its last five splits,
which C4's line splits push out) and once per line C4 keeps, each call inside a spaCy memory
zone, which turns spaCy's own cache off: tokenizing was most of the scorer's time. spaCy tokenizes each whitespace-delimited chunk of a text on its own (its
tokenizer splits on whitespace first, then on affixes and special cases inside a chunk), so
`HeuristicScorer` asks spaCy once per distinct chunk, keeps each chunk's tokens, and joins a
document's words and a line's sentence count from them; the filters' rules are then applied to
those words with datatrove's own thresholds (read from the filter objects) and helpers (imported),
in the filters' order. tests/test_quality.py holds it to `reference_score` float for float.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import accumulate, chain
from operator import itemgetter

import numpy as np

from datamask.shared import require

STAGE = "the datatrove-heuristics quality scorer"
SCORE_CAP = 0.999  # the stop-word share stays the fractional part: it never adds a level
# spaCy's pieces of a line: its words and runs of whitespace, without the first space of a run
# that follows a word (spaCy keeps that space as the word's trailing-space flag); findall gives
# "" for the space left out
PIECES = re.compile(r"(?<=\S) |(\S+|\s+)")
MAX_CACHED_CHUNKS = 300_000  # distinct chunks kept between batches: about 600 bytes each, with ids
# what spaCy's sentencizer sees in a token: one of its punctuation characters, a token that is
# not punctuation (it starts a sentence after a period), or other punctuation
PERIOD, WORD, OTHER = range(3)
ONE_TOKEN_WALKS = {PERIOD: ((0, True), (0, True)), WORD: ((0, False), (1, False)),
                   OTHER: ((0, False), (0, True))}
HASH_PRIMES, HASH_BASE = (2_147_483_647, 2_147_483_629), 1_000_003  # keys below 2**62
# a string spaCy's vocabulary can fail to look up once it has been through memory zones, which
# datatrove's tokenizer then retries with the string cut out: a text holding it is scored by
# datatrove's own filters, retry included
SPACY_TRAP = "IS_ALPHA"


def quality_filters() -> list:
    """The four filters, configured as the score uses them."""
    require("spacy", f"{STAGE} (English word splitting)")
    filters = require("datatrove.pipeline.filters", STAGE)
    return [filters.GopherQualityFilter(), filters.GopherRepetitionFilter(),
            filters.C4QualityFilter(filter_no_terminal_punct=False),
            filters.FineWebQualityFilter()]


def stop_words() -> set[str]:
    return set(require("datatrove.pipeline.filters.gopher_quality_filter", STAGE).STOP_WORDS)


def combine(kept: int, stop_words: int, words: int) -> float:
    """Filters kept plus the stop-word share of the words (lowercased), as a float32 stores it."""
    return kept + min(stop_words / max(words, 1), SCORE_CAP)


def reference_score(text: str, filters: list, stops: set[str]) -> float:
    """The score by definition: each datatrove filter's own `filter` on a fresh Document (C4's
    filter edits the text it checks), then datatrove's word split for the stop-word share."""
    data = require("datatrove.data", STAGE)
    text_utils = require("datatrove.utils.text", STAGE)
    kept = 0
    for step in filters:
        verdict = step.filter(data.Document(text=text, id=""))
        kept += bool(verdict[0] if isinstance(verdict, tuple) else verdict)
    words = text_utils.split_into_words(text, "en")
    return combine(kept, sum(w.lower() in stops for w in words), len(words))


class SpacedNGrams:
    """get_n_grams' n-grams (words joined by spaces) of one document, numbered: n-grams joined by
    spaces are equal exactly when their words are (words hold no whitespace), and an n-gram's
    number is its rank among the distinct (n - 1)-grams extended by a word's id."""

    def __init__(self, words: list[str], ids: np.ndarray):
        self.ids, self.ranks, self.n = ids, ids, 1
        self.starts = list(accumulate([len(w) + 1 for w in words], initial=0))
        self.width = int(ids.max()) + 1 if len(ids) else 1  # keys below width², far from 2⁶³

    def top_chars(self, n: int) -> int:
        """datatrove's find_top_duplicate(get_n_grams(words, n)), n at least the last asked:
        the characters of the most frequent n-gram, the first met among equals, times its
        count."""
        while self.n < n:
            count = len(self.ids) - self.n
            self.ranks = np.unique(self.ranks[:count] * self.width + self.ids[self.n:],
                                   return_inverse=True)[1]
            self.n += 1
        counts = np.bincount(self.ranks)
        top = counts.max()
        first = int(np.argmax(counts[self.ranks] == top))
        return (self.starts[first + n] - 1 - self.starts[first]) * int(top)


def _powers(prime: int, base: int, length: int) -> np.ndarray:
    """base**k % prime for k < length, the table kept and grown by doubling."""
    table = _POWERS.get((prime, base), np.ones(1, np.int64))
    while len(table) < length:
        table = np.concatenate([table, table * pow(base, len(table), prime) % prime])
    _POWERS[prime, base] = table
    return table[:length]


_POWERS: dict[tuple[int, int], np.ndarray] = {}


class GluedNGrams:
    """find_all_duplicate's n-grams (words joined with nothing between) of one document, hashed:
    a polynomial hash of the characters modulo two primes, the same for equal strings, so only
    the n-grams whose hash repeats are cut out as strings and compared."""

    def __init__(self, words: list[str]):
        self.glued = "".join(words)
        self.bounds = np.array(list(accumulate(map(len, words), initial=0)), np.int64)
        codes = np.frombuffer(self.glued.encode("utf-32-le"), np.uint32).astype(np.int64)
        self.at_bounds = []  # per prime: the prefix hash and the base's power at each bound
        for prime in HASH_PRIMES:
            inverse = _powers(prime, pow(HASH_BASE, -1, prime), len(codes))
            prefix = np.zeros(len(codes) + 1, np.int64)
            np.cumsum(codes * inverse % prime, out=prefix[1:])
            self.at_bounds.append((prefix[self.bounds] % prime,
                                   _powers(prime, HASH_BASE, len(codes) + 1)[self.bounds]))

    def repeated_chars(self, n: int) -> int:
        """datatrove's find_all_duplicate(words, n): the characters of the n-grams met again,
        each repeat skipping the n - 1 n-grams that overlap it. The walk visits only n-grams that
        occur more than once: the others are never met again, so skipping them changes nothing."""
        if len(self.bounds) <= n:
            return 0
        key = np.zeros(len(self.bounds) - n, np.int64)
        for prime, (prefix, power) in zip(HASH_PRIMES, self.at_bounds):
            key = key * prime + (prefix[n:] - prefix[:-n]) % prime * power[:-n] % prime
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        maybe = np.flatnonzero(counts[inverse] > 1).tolist()
        if not maybe:
            return 0
        n_grams = [self.glued[a:b] for a, b in zip(self.bounds[maybe].tolist(),
                                                    self.bounds[np.add(maybe, n)].tolist())]
        again = {n_gram for n_gram, count in Counter(n_grams).items() if count > 1}
        repeated, position, seen = 0, 0, set()
        for start, n_gram in zip(maybe, n_grams):
            if start < position or n_gram not in again:  # inside a repeat just counted; or once
                continue
            if n_gram in seen:
                repeated, position = repeated + len(n_gram), start + n
            else:
                seen.add(n_gram)
                position = start + 1
        return repeated


class ChunkTokens(dict):
    """chunk -> its entry, made by `make` for a chunk not in yet."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, chunk: str):
        entry = self[chunk] = self.make(chunk)
        return entry


class HeuristicScorer:
    """The score of many documents, spaCy asked once per distinct whitespace-delimited chunk.

    A chunk's entry: its words (its tokens, whitespace tokens dropped), their ids, what spaCy's
    sentencizer does over its tokens from each state it can enter with, and the counts over its
    words that a document's score sums: words with a character that is not a symbol (Gopher's
    non-symbol words), those words' characters, words with a letter, words that are Gopher stop
    words lowercased."""

    def __init__(self):
        self.filters = quality_filters()
        self.gopher, self.repetition, self.c4, self.fineweb = self.filters
        if not self.c4.split_paragraph:
            raise ValueError("HeuristicScorer counts C4's sentences per line (split_paragraph)")
        self.stops = stop_words()
        self.text = require("datatrove.utils.text", STAGE)
        self.c4_rules = require("datatrove.pipeline.filters.c4_filters", STAGE)
        self.dup = require("datatrove.pipeline.filters.gopher_repetition_filter", STAGE)
        tokenizers = require("datatrove.utils.word_tokenizers", STAGE)
        self.attrs = require("spacy.attrs", STAGE)
        self.nlp = tokenizers.load_word_tokenizer(self.gopher.language).tokenizer
        self.punct_chars = self.nlp.get_pipe("sentencizer").punct_chars
        self.symbols = "".join(self.text.PUNCTUATION_SET)  # one-character symbols
        self.chunks = ChunkTokens(self._entry_of)
        self.word_ids: dict[str, int] = {}  # every word of the cached chunks, numbered

    def __call__(self, texts: list[str]) -> np.ndarray:
        self._learn_chunks([t for t in texts if SPACY_TRAP not in t])
        scores = np.empty(len(texts), np.float32)
        for i, text in enumerate(texts):
            scores[i] = (reference_score(text, self.filters, self.stops) if SPACY_TRAP in text
                         else self.score(text))
        return scores

    def _learn_chunks(self, texts: list[str]) -> None:
        """The words of `texts` not yet known, tokenized by spaCy in one call, "\\n" between them
        (a whitespace token, which no special case spans), inside a memory zone: spaCy drops the
        lexemes afterwards, the cache keeps plain strings and numbers."""
        if len(self.chunks) > MAX_CACHED_CHUNKS:
            self.chunks.clear()
            self.word_ids.clear()
        new = list({c for text in texts for c in text.split()} - self.chunks.keys())
        if not new:
            return
        joined = "\n".join(new)
        starts = np.cumsum([0] + [len(c) + 1 for c in new[:-1]])
        with self.nlp.memory_zone():
            doc = self.nlp.tokenizer(joined)
            attrs = doc.to_array([self.attrs.IDX, self.attrs.LENGTH, self.attrs.IS_PUNCT,
                                  self.attrs.IS_SPACE]).astype(np.int64)
        attrs = attrs[attrs[:, 3] == 0]  # not the separators
        bounds = np.searchsorted(attrs[:, 0], starts).tolist() + [len(attrs)]
        tokens = [joined[i:i + n] for i, n in zip(attrs[:, 0].tolist(), attrs[:, 1].tolist())]
        ids = [self.word_ids.setdefault(w, len(self.word_ids)) for w in tokens]
        codes = self._codes(tokens, attrs[:, 2].tolist())
        counts = np.add.reduceat(self._word_counts(tokens), bounds[:-1], axis=1).tolist()
        spans = list(zip(bounds, bounds[1:]))
        self.chunks.update(zip(new, zip(
            [tokens[a:b] for a, b in spans], [ids[a:b] for a, b in spans],
            [self._walk(codes[a:b]) for a, b in spans], *counts)))

    def _entry_of(self, chunk: str) -> tuple:
        """A chunk met outside _learn_chunks: a run of whitespace in a line, or a word of a C4
        line with a citation cut out of it."""
        with self.nlp.memory_zone():
            doc = self.nlp.tokenizer(chunk)
            tokens = [t.text for t in doc]
            words = [t for t, token in zip(tokens, doc) if not token.is_space]
            walk = self._walk(self._codes(tokens, [t.is_punct for t in doc]))
            ids = [self.word_ids.setdefault(w, len(self.word_ids)) for w in words]
            return (words, ids, walk, *self._word_counts(words).sum(axis=1).tolist())

    def _codes(self, tokens: list[str], punct: list) -> list[int]:
        """What spaCy's sentencizer sees in each token: PERIOD, WORD or OTHER."""
        return [PERIOD if t in self.punct_chars else OTHER if p else WORD
                for t, p in zip(tokens, punct)]

    @staticmethod
    def _walk(codes: list[int]) -> tuple:
        """Sentencizer.predict's loop over a chunk's tokens from each state it can enter with:
        ((sentences started, period seen after) with no period seen, the same with one seen)."""
        if len(codes) == 1:
            return ONE_TOKEN_WALKS[codes[0]]
        walk = []
        for seen in (False, True):
            started = 0
            for code in codes:
                if code == PERIOD:
                    seen = True
                elif seen and code == WORD:
                    started, seen = started + 1, False
            walk.append((started, seen))
        return tuple(walk)

    def _word_counts(self, words: list[str]) -> np.ndarray:
        """The counts an entry keeps, of each word: one row per count, one column per word."""
        non_symbol = [bool(w.strip(self.symbols)) for w in words]  # a character not a symbol
        return np.array([non_symbol, [len(w) * n for w, n in zip(words, non_symbol)],
                         [any(map(str.isalpha, w)) for w in words],
                         [w.lower() in self.stops for w in words]], np.int64).reshape(4, -1)

    def sentences(self, line: str) -> int:
        """len(datatrove's split_into_sentences(line)) for a line with a token: 1 plus the tokens
        spaCy's sentencizer starts a sentence at, walked over the line's PIECES."""
        if SPACY_TRAP in line:  # made by cutting a citation out
            return len(self.text.split_into_sentences(line, self.c4.language))
        count, seen = 1, False
        for entry in map(self.chunks.__getitem__, filter(None, PIECES.findall(line))):
            started, seen = entry[2][seen]
            count += started
        return count

    def score(self, text: str) -> float:
        entries = list(map(self.chunks.__getitem__, text.split()))
        words = list(chain.from_iterable(map(itemgetter(0), entries)))
        ids = np.array(list(chain.from_iterable(map(itemgetter(1), entries))), np.int64)
        non_symbol, non_symbol_chars, alpha, stops = (
            sum(map(itemgetter(k), entries)) for k in range(3, 7))
        kept = (self.gopher_quality(text, words, non_symbol, non_symbol_chars, alpha)
                + self.gopher_repetition(text, words, ids) + self.c4_quality(text)
                + self.fineweb_quality(text, words))
        return combine(kept, stops, len(words))

    def gopher_quality(self, text: str, words: list[str], non_symbol: int,
                       non_symbol_chars: int, alpha: int) -> bool:
        """GopherQualityFilter.filter from the words' counts: `non_symbol` words with a character
        that is not a symbol, `non_symbol_chars` their characters, `alpha` words with a letter."""
        g = self.gopher
        n_words = len(words)
        if g.min_doc_words and non_symbol < g.min_doc_words:
            return False
        if g.max_doc_words and non_symbol > g.max_doc_words:
            return False
        # numpy's mean of whole numbers: their exact sum over their count; NaN with none
        mean_length = non_symbol_chars / non_symbol if non_symbol else float("nan")
        if g.min_avg_word_length and mean_length < g.min_avg_word_length:
            return False
        if g.max_avg_word_length and mean_length > g.max_avg_word_length:
            return False
        if g.max_symbol_word_ratio and (text.count("#") / n_words > g.max_symbol_word_ratio
                                        or (text.count("...") + text.count("…")) / n_words
                                        > g.max_symbol_word_ratio):
            return False
        lines = text.splitlines()
        if g.max_bullet_lines_ratio and sum(
                s.lstrip().startswith(("•", "-")) for s in lines) / len(lines) \
                > g.max_bullet_lines_ratio:
            return False
        if g.max_ellipsis_lines_ratio and sum(
                s.rstrip().endswith(("...", "…")) for s in lines) / len(lines) \
                > g.max_ellipsis_lines_ratio:
            return False
        if g.max_non_alpha_words_ratio and alpha / n_words < g.max_non_alpha_words_ratio:
            return False
        return not (g.min_stop_words
                    and len(g.stop_words.intersection(words)) < g.min_stop_words)

    def gopher_repetition(self, text: str, words: list[str], ids: np.ndarray) -> bool:
        """GopherRepetitionFilter.filter on `words`, its n-grams compared as numbers."""
        r, dup = self.repetition, self.dup
        if not text:
            return False
        paragraphs = r.paragraph_exp.split(text.strip())
        repeated, chars = dup.find_duplicates(paragraphs)
        if r.dup_para_frac and repeated / len(paragraphs) > r.dup_para_frac:
            return False
        if r.dup_para_char_frac and chars / len(text) > r.dup_para_char_frac:
            return False
        lines = r._line_splitter.split(text)
        repeated, chars = dup.find_duplicates(lines)
        if r.dup_line_frac and repeated / len(lines) > r.dup_line_frac:
            return False
        if r.dup_line_char_frac and chars / len(text) > r.dup_line_char_frac:
            return False
        spaced = SpacedNGrams(words, ids)
        for n, fraction in r.top_n_grams:
            if len(words) >= n and spaced.top_chars(n) / len(text) > fraction:
                return False
        glued = GluedNGrams(words)
        return not any(glued.repeated_chars(n) / len(text) > fraction
                       for n, fraction in r.dup_n_grams)

    def c4_quality(self, text: str) -> bool:
        """C4QualityFilter.filter (lines split on newlines), each kept line's sentences counted
        from its chunks."""
        c, rules = self.c4, self.c4_rules
        sentences = 0
        for line in text.splitlines():
            line = line.strip()
            words = line.split()
            if c.max_word_length != -1 and max(map(len, words), default=0) > c.max_word_length:
                continue
            if c.remove_citations:
                line = rules.CITATION_REGEX.sub("", line)
            if c.filter_no_terminal_punct and (not line.endswith(rules.END_PUNCTUATION)
                                               or line.endswith(rules.ELLIPSIS)):
                continue
            if len(words) < c.min_words_per_line:
                continue
            lower = line.lower()
            if c.filter_lorem_ipsum and "lorem ipsum" in lower:
                return False
            if c.filter_javascript and "javascript" in lower:
                continue
            if c.filter_curly_bracket and "{" in line:
                return False
            if c.filter_policy and any(p in lower for p in rules.POLICY_SUBSTRINGS):
                continue
            if c.min_num_sentences != -1:
                sentences += self.sentences(line)
        return sentences >= c.min_num_sentences

    def fineweb_quality(self, text: str, words: list[str]) -> bool:
        """FineWebQualityFilter.filter on `words`."""
        f = self.fineweb
        lines = [line for line in text.split("\n") if line.strip() != ""]
        if not lines:
            return False
        ratio = sum(line.endswith(f.stop_chars) for line in lines) / len(lines)
        if ratio < f.line_punct_thr and not (ratio == 0 and f.line_punct_exclude_zero):
            return False
        if sum(len(line) <= f.short_line_length for line in lines) / len(lines) \
                > f.short_line_threshold:
            return False
        if self.dup.find_duplicates(lines)[1] / len(text.replace("\n", "")) \
                > f.char_duplicates_ratio:
            return False
        return text.count("\n") / len(words) <= f.new_line_ratio

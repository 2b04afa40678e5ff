"""MinHash signatures for dedup's text step, by one of two libraries, into datatrove's signature
files, so that datatrove's bucket, cluster and filter steps run on either unchanged.

- datatrove: its own MinhashDedupSignature: the text simplified (lower case, digits to 0,
  punctuation to spaces, diacritics dropped), split into words by spaCy's English tokenizer, each
  word n-gram hashed by xxhash, 14 x 8 minimums of seeded permutations modulo 2^61 - 1.
- rensa: the same simplified text (by datatrove's patterns and tables), split at its spaces (the
  simplification leaves single spaces between words; spaCy splits a few words further, such as
  "cannot", and a number glued to a unit), each word n-gram hashed in numpy from its words' byte
  hashes, the signature from rensa's RMinHash (a Rust MinHash, 32-bit values). The split is most
  of datatrove's time; bench-dedup measures how often the two give other shingles.
"""

from __future__ import annotations

import sys
import unicodedata
from functools import cache

import numpy as np

from datamask.shared import require, require_installed

datatrove_minhash = require("datatrove.pipeline.dedup.minhash", "dedup")
datatrove_text = require("datatrove.utils.text", "dedup")

BACKENDS = ("datatrove", "rensa")
# dedup's default, by the verdict of the plan in reproduce/results/bench/dedup/backends/
DEFAULT_BACKEND = "rensa"
BITS = {"datatrove": 64, "rensa": 32}  # each backend's hash width, its default --hash_precision
HASH_WIDTHS = (32, 64)  # the hash widths datatrove's steps take
WORD_BASE = np.uint64(0x100000001B3)  # odd: invertible modulo 2^64
GRAM_BASE = np.uint64(0x9E3779B97F4A7C15)


def check_backend(backend: str, precision: int | None) -> int:
    """The hash width of `backend` (a name of BACKENDS) at `precision` (None: the backend's
    own), refused in one line, with its pip line, where the backend is not installed. The names
    and widths a backend takes are checked by dedup's config, when it is made."""
    if backend == "rensa":
        require_installed("rensa", "dedup --minhash rensa")
    return BITS[backend] if precision is None else precision


def signature_step(backend: str, folder: str, config):
    """The signature step of `backend` (a name of BACKENDS), writing into `folder`."""
    return {"datatrove": datatrove_minhash.MinhashDedupSignature,
            "rensa": RensaSignature}[backend](folder, config=config)


@cache
def marks() -> dict[int, None]:
    """str.translate's table that drops what datatrove's diacritics step drops after NFD: every
    nonspacing mark (category Mn)."""
    return {point: None for point in range(sys.maxunicode + 1)
            if unicodedata.category(chr(point)) == "Mn"}


def simplified(text: str) -> str:
    """datatrove's simplify_text at MinhashConfig's defaults (lower case, numbers to 0,
    punctuation to spaces, whitespace merged, diacritics dropped), its patterns and tables, two
    steps faster: the whitespace by str.split (the same characters as its regular expression's
    \\s), the diacritics by one str.translate where the text is not ASCII (character by
    character in Python there); the spaces a lone mark leaves are merged too (spaCy makes no
    word of them)."""
    text = datatrove_text.NUMBERS_PATTERN.sub("0", text.lower())
    text = " ".join(text.translate(datatrove_text.PUNCTUATION_TRANS).split())
    if text.isascii():
        return text
    return " ".join(unicodedata.normalize("NFD", text).translate(marks()).split())


def split_words(text: str) -> list[str]:
    """The words rensa's backend shingles: the simplified text split at its spaces."""
    return simplified(text).split()


_powers = np.ones(1, np.uint64), np.ones(1, np.uint64)  # WORD_BASE^j and its inverse^j


def powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """WORD_BASE^j and WORD_BASE^-j modulo 2^64 for j < length, grown and kept as asked."""
    global _powers
    if len(_powers[0]) < length:
        size = max(length, 2 * len(_powers[0]))
        inverse = np.uint64(pow(int(WORD_BASE), -1, 2**64))
        _powers = tuple(np.cumprod(np.r_[np.uint64(1), np.full(size - 1, base)])
                        for base in (WORD_BASE, inverse))
    return _powers[0][:length], _powers[1][:length]


def mixed(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit."""
    values = values ^ (values >> np.uint64(30))
    values = values * np.uint64(0xBF58476D1CE4E5B9)
    values = values ^ (values >> np.uint64(27))
    values = values * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def shingle_hashes(words: str, n_grams: int) -> np.ndarray:
    """A 64-bit hash of each word n-gram of `words` (words between single spaces), in order: each
    word's bytes hashed as a polynomial (prefix sums, so no loop over words), mixed, and n of
    them combined by position. None where fewer than n words, as datatrove gives none."""
    data = np.frombuffer(words.encode(), np.uint8)
    spaces = np.flatnonzero(data == 32)
    if len(spaces) + 1 < n_grams or not len(data):
        return np.zeros(0, np.uint64)
    starts, ends = np.r_[0, spaces + 1], np.r_[spaces, len(data)]
    up, down = powers(len(data) + 1)
    prefix = np.r_[np.uint64(0), np.cumsum(data * up[:len(data)], dtype=np.uint64)]
    word = mixed((prefix[ends] - prefix[starts]) * down[starts])
    count = len(word) - n_grams + 1
    gram = word[:count].copy()
    for k in range(1, n_grams):
        gram = gram * GRAM_BASE + word[k:k + count]
    return mixed(gram)


@cache
def rensa_minhash():
    """rensa's RMinHash, imported in the task that runs it (a module does not pickle into the
    executor's processes)."""
    return require("rensa", "dedup --minhash rensa").RMinHash


class RensaSignature(datatrove_minhash.MinhashDedupSignature):
    """datatrove's signature step (its reading, file format, sorting and checks) with the shingles
    of split_words and rensa's RMinHash of them, num_buckets x hashes_per_bucket values seeded by
    the config's seed; a 32-bit HashConfig."""

    name = "🎯 MinHash stage 1, rensa"

    def get_shingles(self, text: str) -> np.ndarray:
        return shingle_hashes(simplified(text), self.config.n_grams)

    def get_signature(self, shingles: np.ndarray) -> list[list[int]]:
        values = rensa_minhash().digest_matrix_from_flat_token_hashes(
            shingles, np.array([0, len(shingles)], np.uint64), self.num_hashes,
            self.config.seed).to_rows()[0]
        per = self.config.hashes_per_bucket
        return [values[i:i + per] for i in range(0, self.num_hashes, per)]

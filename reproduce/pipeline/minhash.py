"""MinHash signatures for dedup's text step, by one of two libraries, into datatrove's signature
files, so that datatrove's bucket, cluster and filter steps run on either unchanged.

- datatrove: its own MinhashDedupSignature: the text simplified (lower case, digits to 0,
  punctuation to spaces, diacritics dropped), split into words by spaCy's English tokenizer, each
  word n-gram hashed by xxhash, 14 x 8 minimums of seeded permutations modulo 2^61 - 1.
- rensa: the same simplified text (by datatrove's patterns and tables; an ASCII text's numbers,
  punctuation and words found as arrays over a batch of texts), split at its whitespace (spaCy
  splits a few words further, such as "cannot", and a number glued to a unit), each word n-gram
  hashed in numpy from its words' byte hashes, the signatures from rensa's RMinHash (a Rust
  MinHash, 32-bit values), a batch of documents per call. The split is most of datatrove's time;
  bench-dedup measures how often the two give other shingles.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache
from itertools import compress, count, islice

import numpy as np

from datamask.shared import require, require_installed

datatrove_minhash = require("datatrove.pipeline.dedup.minhash", "dedup")
datatrove_text = require("datatrove.utils.text", "dedup")
regex = require("regex", "dedup")  # datatrove's own (its text patterns)

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


def character_class(points) -> str:
    """A regular expression's class of the code points `points`, as ranges."""
    points, ranges = sorted(points), []
    while points:
        last = 0
        while last + 1 < len(points) and points[last + 1] == points[last] + 1:
            last += 1
        first, end = (regex.escape(chr(point)) for point in (points[0], points[last]))
        ranges.append(first if last == 0 else f"{first}-{end}")
        points = points[last + 1:]
    return "[" + "".join(ranges) + "]"


@cache
def marks() -> regex.Pattern:
    """What datatrove's diacritics step drops after NFD, every nonspacing mark (category Mn) by
    this Python's unicodedata: regex's \\p{Mn} (its own Unicode version) less the marks
    unicodedata does not know, plus those it knows otherwise, so the same set, scanned in C."""
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    # every code point's category, in C loops (each task builds this once)
    ours = set(compress(count(), map("Mn".__eq__, map(unicodedata.category, everything))))
    theirs = set(map(ord, regex.findall(r"\p{Mn}", everything)))
    drop, add = theirs - ours, ours - theirs
    return regex.compile(r"(?V1)[[\p{Mn}--" + (character_class(drop) if drop else "[]")
                         + "]" + (character_class(add)[1:-1] if add else "") + "]+")


@cache
def wide_punctuation() -> tuple[bytes, re.Pattern]:
    """datatrove's punctuation table split in two for non-ASCII text, each faster than the
    table's per-character lookups there: a bytes table for the ASCII code points (UTF-8 keeps
    them single bytes) and a pattern for the few others."""
    table = datatrove_text.PUNCTUATION_TRANS
    ascii_table = bytes(table.get(byte, byte) for byte in range(128)) + bytes(range(128, 256))
    return ascii_table, re.compile(character_class([point for point in table if point >= 128]))


def simplified(text: str) -> str:
    """datatrove's simplify_text at MinhashConfig's defaults (lower case, numbers to 0,
    punctuation to spaces, whitespace merged, diacritics dropped), its patterns and tables, in
    fewer passes: the whitespace by str.split (the same characters as its regular expression's
    \\s); where the text is not ASCII, the punctuation by wide_punctuation and the diacritics by
    one pattern (datatrove goes character by character in Python there); the spaces a lone
    mark leaves are merged too (spaCy makes no word of them)."""
    text = datatrove_text.NUMBERS_PATTERN.sub("0", text.lower())
    ascii_table, others = wide_punctuation()
    if text.isascii():
        return " ".join(text.encode().translate(ascii_table).decode().split())
    text = " ".join(others.sub(" ", text.encode().translate(ascii_table).decode()).split())
    if text.isascii():
        return text
    return " ".join(marks().sub("", unicodedata.normalize("NFD", text)).split())


def collapsed_numbers(data: np.ndarray,
                      done: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """datatrove's number pattern over the ASCII bytes of `data` not `done` (digits, then at
    most one '.' or ',' and digits, to one '0'), as arrays: the pattern scans left to right, so
    in a chain of digit runs joined by single separators the first and second runs make one
    match, the third and fourth the next, and so on. (the bytes, the indices of `data`'s bytes
    dropped, in order; None: none)."""
    digit = (data >= 48) & (data <= 57) & ~done
    edges = np.flatnonzero(np.diff(np.r_[False, digit, False]))
    starts, ends = edges[0::2], edges[1::2]  # the digit runs, [start, end)
    if not len(starts):
        return data, None
    runs = np.arange(len(starts))
    joined = np.zeros(len(starts), bool)  # run k and run k + 1 one separator apart
    between = data[ends[:-1]]
    joined[:-1] = (ends[:-1] + 1 == starts[1:]) & ((between == 44) | (between == 46))
    chain = np.maximum.accumulate(np.where(np.r_[True, ~joined[:-1]], runs, 0))
    pairs = joined & ((runs - chain) % 2 == 0)  # run k and run k + 1 make one match
    first = ~np.r_[False, pairs[:-1]]
    match_starts = starts[first]
    match_ends = np.where(pairs, np.r_[ends[1:], 0], ends)[first]
    lengths = match_ends - match_starts - 1  # each match less its first byte is dropped
    dropped = (np.repeat(match_starts + 1 - (np.cumsum(lengths) - lengths), lengths)
               + np.arange(lengths.sum()))  # in order (a cumsum over bytes costs 10x this)
    out = data.copy()
    out[match_starts] = 48
    kept = np.ones(len(data), bool)
    kept[dropped] = False
    return out[kept], dropped


def simplified_bytes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The simplified texts' UTF-8 bytes, each followed by a space, their whitespace not merged
    (shingle_hashes finds the words between runs of it), and where each text's closing space
    lies: the ASCII texts lowered, their numbers and punctuation done as arrays over all of them
    at once; the others by simplified (its numbers left as they are: a dropped mark may join
    two zeros; the punctuation table leaves its bytes as they are)."""
    plain = [text.isascii() for text in texts]
    pieces = [text.encode().lower() if ascii_only else simplified(text).encode()
              for text, ascii_only in zip(texts, plain)]
    lengths = [len(piece) + 1 for piece in pieces]
    closing = np.cumsum(lengths) - 1
    data, dropped = collapsed_numbers(np.frombuffer(b" ".join(pieces) + b" ", np.uint8),
                                      np.repeat(~np.array(plain, bool), lengths))
    if dropped is not None:
        closing = closing - np.searchsorted(dropped, closing)
    return np.frombuffer(data.tobytes().translate(wide_punctuation()[0]), np.uint8), closing


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


def shingle_hashes(texts: list[str], n_grams: int) -> list[np.ndarray]:
    """A 64-bit hash of each word n-gram of each of `texts`, simplified (split_words' words), in
    order, for all texts in one pass of array operations: each word's bytes hashed as a
    polynomial (prefix sums, so no loop over words), mixed, and n of them combined by position,
    the n-grams that cross two texts dropped. None for a text of fewer than n words, as
    datatrove gives none."""
    if not texts:
        return []
    data, closing = simplified_bytes(texts)
    word_byte = (data != 32) & (data != 9) & (data != 10)
    edges = np.flatnonzero(np.diff(np.r_[False, word_byte, False]))  # starts, ends in turn
    starts, ends = edges[0::2], edges[1::2]
    words = np.diff(np.r_[0, np.searchsorted(starts, closing)])
    grams = np.maximum(words - n_grams + 1, 0)
    if not grams.any():
        return [np.zeros(0, np.uint64) for _ in texts]
    up, down = powers(len(data) + 1)
    prefix = np.zeros(len(data) + 1, np.uint64)
    np.cumsum(data * up[:len(data)], out=prefix[1:])
    word = mixed((prefix[ends] - prefix[starts]) * down[starts])
    count = len(word) - n_grams + 1
    gram = word[:count].copy()
    for k in range(1, n_grams):
        gram *= GRAM_BASE
        gram += word[k:k + count]
    first = np.cumsum(words) - words  # each text's first word
    inside = (np.arange(count) - np.repeat(first, words)[:count]
              < np.repeat(grams, words)[:count])
    return np.split(mixed(gram[inside]), np.cumsum(grams)[:-1])


@cache
def rensa_minhash():
    """rensa's RMinHash, imported in the task that runs it (a module does not pickle into the
    executor's processes)."""
    return require("rensa", "dedup --minhash rensa").RMinHash


class RensaSignature(datatrove_minhash.MinhashDedupSignature):
    """datatrove's signature step with the shingles of split_words and rensa's RMinHash of them,
    num_buckets x hashes_per_bucket values seeded by the config's seed; a 32-bit HashConfig.
    Its files are datatrove's to the byte (a bucket's hashes, then the document's index in the
    task, sorted), but made a batch of documents at a time: one pass of array operations for
    the shingles, one call of rensa, one write per bucket, where datatrove's loop packs and
    writes each document into each bucket."""

    name = "🎯 MinHash stage 1, rensa"
    batch = 128

    def run(self, data, rank: int = 0, world_size: int = 1):
        paths = [f"bucket_{bucket:03d}/{rank:05d}.minhash.sig"
                 for bucket in range(self.config.num_buckets)]
        with self.track_time():
            if not self.check_can_skip_sig_writing(rank)[0]:
                files = [self.output_folder.open(path, mode="wb") for path in paths]
                documents, index = iter(data), 0
                while batch := list(islice(documents, self.batch)):
                    self.stat_update(datatrove_minhash.StatHints.total, value=len(batch))
                    shingles = shingle_hashes([document.text for document in batch],
                                              self.config.n_grams)
                    signed = np.flatnonzero([len(each) for each in shingles])
                    for file, records in zip(files, self.bucket_records(
                            [shingles[i] for i in signed], signed + index)):
                        file.write(records.tobytes())
                    index += len(batch)
                for file in files:
                    file.close()
            for path in paths:
                self.sort_records(path)

    def record_type(self) -> np.dtype:
        """A record of a bucket file: its hashes_per_bucket hashes, then the document's index."""
        return np.dtype([("hashes", f"<{self.config.hash_config.struct_format}",
                          (self.config.hashes_per_bucket,)), ("document", "<u4")])

    def bucket_records(self, shingles: list[np.ndarray],
                       documents: np.ndarray) -> list[np.ndarray]:
        """Each bucket's records of rensa's signatures of `shingles` (none empty), in one call,
        the documents' indices `documents`."""
        per, buckets = self.config.hashes_per_bucket, self.config.num_buckets
        records = np.zeros((buckets, len(shingles)), self.record_type())
        if shingles:
            offsets = np.zeros(len(shingles) + 1, np.uint64)
            np.cumsum([len(each) for each in shingles], out=offsets[1:])
            values = np.array(rensa_minhash().digest_matrix_from_flat_token_hashes(
                np.concatenate(shingles), offsets, self.num_hashes, self.config.seed).to_rows())
            records["hashes"] = values.reshape(len(shingles), buckets, per).swapaxes(0, 1)
            records["document"] = documents
        return list(records)

    def sort_records(self, path: str) -> None:
        """The bucket file `path` sorted as datatrove's buckets step reads it: by its hashes in
        turn, then the document's index."""
        with self.output_folder.open(path, mode="rb") as file:
            records = np.frombuffer(file.read(), self.record_type())
        hashes = records["hashes"]
        order = np.lexsort([records["document"]]
                           + [hashes[:, i] for i in reversed(range(hashes.shape[1]))])
        with self.output_folder.open(path, mode="wb") as file:
            file.write(records[order].tobytes())

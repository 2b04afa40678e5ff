"""Near-duplicate detection by shared word shingles, vectorised over a whole corpus.

A document's shingles are its runs of SHINGLE_WORDS consecutive lower-cased words, hashed to uint64.
Its containment is the fraction of its distinct shingles that some other document also has; an
edited copy keeps most of its shingles (a 3% word edit rate leaves about 3/4 of the 8-word runs
intact), an unrelated document of the same domain shares next to none.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SHINGLE_WORDS = 8
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def shingles(texts: list[str], k: int = SHINGLE_WORDS) -> tuple[np.ndarray, np.ndarray]:
    """(hash, document index) of every distinct shingle of every document (docs under k words
    have none)."""
    words = pc.utf8_split_whitespace(pc.utf8_lower(pa.array(texts, pa.large_string())))
    lengths = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
    ids = pc.dictionary_encode(pc.list_flatten(words)).indices.to_numpy().astype(np.uint64)
    doc_of_word = np.repeat(np.arange(len(texts)), lengths)
    if len(ids) < k:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    starts = np.arange(len(ids) - k + 1)
    valid = doc_of_word[starts] == doc_of_word[starts + k - 1]
    hashes = np.zeros(len(starts), np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):  # k passes over the whole corpus, not a loop over documents
            hashes = hashes * _MULTIPLIER + ids[starts + j] + np.uint64(j + 1)
    pairs = np.unique(np.stack([hashes[valid], doc_of_word[starts[valid]].astype(np.uint64)]),
                      axis=1)
    return pairs[0], pairs[1].astype(np.int64)


def containment(texts: list[str], k: int = SHINGLE_WORDS) -> np.ndarray:
    """Per document, the fraction of its distinct shingles found in at least one other document
    (0 for a document too short to have shingles)."""
    hashes, docs = shingles(texts, k)
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    shared = counts[inverse] > 1
    total = np.bincount(docs, minlength=len(texts))
    hit = np.bincount(docs, weights=shared, minlength=len(texts))
    return np.divide(hit, total, out=np.zeros(len(texts)), where=total > 0)


def containment_in(queries: list[str], reference: list[str], k: int = SHINGLE_WORDS) -> np.ndarray:
    """Per query document, the fraction of its distinct shingles that occur in `reference`."""
    q_hashes, q_docs = shingles(queries + reference, k)
    in_query = q_docs < len(queries)
    found = np.isin(q_hashes[in_query], q_hashes[~in_query])
    total = np.bincount(q_docs[in_query], minlength=len(queries))
    hit = np.bincount(q_docs[in_query], weights=found, minlength=len(queries))
    return np.divide(hit, total, out=np.zeros(len(queries)), where=total > 0)

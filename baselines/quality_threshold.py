"""`quality-threshold`: a quality filter, FineWeb-Edu's by default (Penedo et al. 2024).

FineWeb-Edu keeps a document when int_score >= 3, int_score = int(round(clamp(score, 0, 5)))
with Python's rounding (half to even: 2.5 -> 2, 3.5 -> 4). `rule='raw'` compares the score itself
(e.g. DCLM's fastText probability >= 0.018112). A filter keeps however many rows pass, while every
selector returns exactly k, so the filtered set is sampled the way one trains on a token budget
from a filtered corpus: k rows uniformly at random among the passing rows (seeded); if fewer than
k pass, all of them, then the failing rows closest to the threshold (highest rule value, random
among equal values). The history says how many rows passed. Score: N minus the row's position in
that order, so the top k of the score is the selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datamask.data import Dataset
from datamask.options import option
from datamask.selectors import Selector

from .common import check

RULES = ("int_score", "raw")


def fineweb_int_score(score: np.ndarray) -> np.ndarray:
    """int(round(clamp(score, 0, 5))) per row; np.rint rounds half to even, as Python's round."""
    return np.rint(np.clip(np.asarray(score, dtype=np.float64), 0.0, 5.0)).astype(np.int64)


@dataclass
class ThresholdOptions:
    threshold: float = option(3.0, "keep rows whose rule value is at least this (DCLM: 0.018112 "
                                   "with --rule raw)")
    rule: str = option("int_score", "int_score: FineWeb-Edu's int(round(clamp(score, 0, 5))), "
                                    "half to even; raw: the score itself", choices=RULES)
    seed: int = option(0, "seed of the sample among the passing rows")

    def check_together(self) -> None:
        check(bool(np.isfinite(self.threshold)), f"--threshold must be finite, got {self.threshold}")


class QualityThreshold(Selector):
    """Quality filter (FineWeb-Edu int_score >= 3 by default); k random rows among those passing."""

    name = "quality-threshold"
    Options = ThresholdOptions

    def _select(self, data: Dataset, k: int):
        p = self.options
        value = (fineweb_int_score(data.quality) if p.rule == "int_score"
                 else data.quality.astype(np.float64))
        passes = value >= p.threshold
        tiebreak = np.random.default_rng(p.seed).random(len(data))
        # passing rows first (in random order), then failing rows by value, random among equals
        order = np.lexsort((tiebreak, -np.where(passes, 0, value), ~passes))
        n = len(data)
        score = np.empty(n, dtype=np.float32)
        score[order] = np.arange(n, 0, -1)
        selected = np.zeros(n, dtype=bool)
        selected[order[:k]] = True
        n_pass = int(passes.sum())
        return selected, score, [{"rule": p.rule, "threshold": p.threshold,
                                  "passed": n_pass, "selected_passing": min(k, n_pass),
                                  "filled_below_threshold": max(0, k - n_pass)}]

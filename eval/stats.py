"""Confidence intervals over training seeds, paired differences, and the smallest difference a run
can resolve.

Every interval is a two-sided 95% Student t interval: mean +- t(0.975, n - 1) * sd / sqrt(n), with
n the number of seeds and sd the sample standard deviation (ddof 1). A paired difference compares
two methods seed by seed (method - reference on each seed both trained with), so what the seed
changes in both (initialisation, batch order) cancels. It is *resolved* when its interval excludes
0. With one seed there is no interval: nothing is resolved.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95


def critical_t(df: float) -> float:
    """t(1 - (1 - CONFIDENCE) / 2, df): the two-sided interval's multiplier of the standard error
    (df need not be whole: Welch-Satterthwaite's, eval/draws.py)."""
    return float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def t_quantile(n: int) -> float:
    """critical_t(n - 1): the multiplier of sd / sqrt(n) over n seeds."""
    return critical_t(n - 1)


def t_interval(values) -> dict:
    """{mean, sd, n, half_width, low, high} of `values`; sd and the interval are None for n < 2."""
    x = np.asarray(values, dtype=np.float64)
    n, mean = len(x), float(x.mean())
    if n < 2:
        return {"mean": mean, "sd": None, "n": n, "half_width": None, "low": None, "high": None}
    sd = float(x.std(ddof=1))
    half = resolvable_difference(sd, n)
    return {"mean": mean, "sd": sd, "n": n, "half_width": half, "low": mean - half,
            "high": mean + half}


def resolvable_difference(sd: float, n: int) -> float:
    """The 95% half-width t(0.975, n - 1) * sd / sqrt(n): a paired difference of spread `sd` over
    n seeds is resolved only when its mean lies further than this from 0."""
    return t_quantile(n) * sd / math.sqrt(n)


def seeds_to_resolve(mean: float, sd: float, most: int = 10_000) -> int | None:
    """The fewest seeds n at which a paired difference with this mean and spread would be
    resolved (t(0.975, n - 1) * sd / sqrt(n) < |mean|): the power estimate printed beside an
    unresolved control. Both inputs are estimates from the seeds run, so it is a guide, not a
    guarantee. None when the mean is 0 or more than `most` seeds would be needed."""
    if sd == 0:
        return 2 if mean != 0 else None
    return next((n for n in range(2, most + 1) if resolvable_difference(sd, n) < abs(mean)), None)


def paired_difference(method: dict, reference: dict) -> dict:
    """t_interval of method[seed] - reference[seed] over the seeds both have, plus `seeds` and
    `resolved` (the interval excludes 0)."""
    seeds = sorted(set(method) & set(reference))
    if not seeds:
        return {"mean": None, "sd": None, "n": 0, "half_width": None, "low": None, "high": None,
                "seeds": [], "resolved": False}
    out = t_interval([method[s] - reference[s] for s in seeds])
    out["seeds"] = seeds
    out["resolved"] = out["low"] is not None and (out["low"] > 0 or out["high"] < 0)
    return out


def pooled_sd(sds) -> float | None:
    """Root mean square of the standard deviations given (None ones skipped): one spread for
    several groups of equal size."""
    known = [s for s in sds if s is not None]
    return float(math.sqrt(np.mean(np.square(known)))) if known else None

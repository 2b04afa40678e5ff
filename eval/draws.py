"""Selection noise: a method compared with random over several selection draws as well as
several training seeds (reproduce/results/downstream/third-design-plan.md, fixed before its runs).

A run trains each selection with the same training seeds, so a paired difference over seeds
(eval/stats.py) holds only the training noise: two random selections differ in which documents
they hold, and that difference would be read as an effect. Here each side is a list of draws,
each draw {training seed: value}. On each shared seed, d = (the method's mean over its draws) -
(the reference's mean over its draws); over the S seeds d has mean d-bar and sd s_d. The
selection noise is V, the variance between random's draws of each draw's mean over the seeds
(it also holds training noise / S, so it errs wide). The difference's standard error is

    SE^2 = s_d^2 / S + V (1 / M + 1 / R)

for M method draws and R reference draws, with Welch-Satterthwaite degrees of freedom from
S - 1 and (the draws V was estimated on) - 1, and the two-sided 95% t interval d-bar +- t SE.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
from scipy import stats as scipy_stats

from .stats import critical_t, paired_difference, pooled_sd

POWER = 0.8  # the minimum detectable difference's power
DRAW = "~"  # a method's k-th selection draw is `<method>~<k>` (k >= 1), beside its arm's suffix


def draw_label(label: str, k: int) -> str:
    """The k-th draw of `label` (0: the label itself)."""
    return label if k == 0 else f"{label}{DRAW}{k}"


def drawn_from(label: str) -> str:
    """The method a label is a draw of ('random~2@strat' -> 'random@strat'); itself if none."""
    match = re.fullmatch(rf"(.+){DRAW}\d+(@\w+)?", label)
    return match.group(1) + (match.group(2) or "") if match else label


def draw_groups(labels) -> dict[str, list[str]]:
    """{method: its labels, the method's own first}, in the order the methods first appear."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault(drawn_from(label), []).append(label)
    return {method: sorted(group, key=lambda label: label != method)
            for method, group in groups.items()}


def shared_seeds(draws: list[dict]) -> list:
    """The training seeds every draw has."""
    return sorted(set.intersection(*(set(d) for d in draws))) if draws else []


def draw_variance(draws: list[dict]) -> float | None:
    """V: the variance (ddof 1) between draws of each draw's mean over the seeds all share; None
    under two draws or with no shared seed."""
    seeds = shared_seeds(draws)
    if len(draws) < 2 or not seeds:
        return None
    return float(np.var([np.mean([d[s] for s in seeds]) for d in draws], ddof=1))


def selection_difference(method: list[dict], reference: list[dict], variance: float,
                         variance_draws: int) -> dict:
    """Method minus reference, each a list of draws, with the selection noise `variance` (V,
    estimated on `variance_draws` draws) in its interval: {mean, se, df, low, high, n, draws,
    resolved}. Under two shared seeds nothing is resolved."""
    seeds = shared_seeds(method + reference)
    out = {"n": len(seeds), "draws": [len(method), len(reference)], "mean": None, "sd": None,
           "se": None, "df": None, "half_width": None, "low": None, "high": None,
           "resolved": False}
    if len(seeds) < 2:
        return out
    d = np.array([np.mean([m[s] for m in method]) - np.mean([r[s] for r in reference])
                  for s in seeds])
    sd = float(d.std(ddof=1))
    se, df = standard_error(sd, len(seeds), variance * (1 / len(method) + 1 / len(reference)),
                            variance_draws)
    half = critical_t(df) * se
    mean = float(d.mean())
    out.update(mean=mean, sd=sd, se=se, df=df, half_width=half, low=mean - half,
               high=mean + half,
               resolved=se > 0 and (mean - half > 0 or mean + half < 0))
    return out


def standard_error(sd: float, seeds: int, selection: float, variance_draws: int
                   ) -> tuple[float, float]:
    """(SE, Welch-Satterthwaite degrees of freedom) of a difference whose paired seeds spread by
    `sd` over `seeds` seeds and whose selection variance is `selection`, estimated on
    `variance_draws` draws."""
    parts = [(sd ** 2 / seeds, seeds - 1), (selection, variance_draws - 1)]
    total = sum(part for part, _ in parts)
    spread = sum(part ** 2 / df for part, df in parts if part > 0 and df > 0)
    return math.sqrt(total), total ** 2 / spread if spread else float(seeds - 1)


def null_false_positives(draws: list[dict]) -> dict:
    """Every pair of random's draws tested as a method against a reference (M = R = 1), with V
    estimated on the other draws: {pairs, resolved, rate, resolved_by_seeds}. A method's test
    estimates V on draws that do not include it; a pair tested with V from all the draws,
    itself included, can never be resolved (with five draws |d| / sqrt(2V) is at most 2, below
    every t quantile the test uses), so the pair is held out as a method is. A calibrated
    primary resolves about 5% of the pairs. `resolved_by_seeds`: the pairs the paired test over
    training seeds alone resolves, the rate a run with one draw per method would have."""
    if len(draws) < 4 or not shared_seeds(draws):
        return {"pairs": 0, "resolved": 0, "rate": None, "resolved_by_seeds": 0}
    tested, by_seeds = [], []
    for i, j in itertools.combinations(range(len(draws)), 2):
        rest = [d for k, d in enumerate(draws) if k not in (i, j)]
        tested.append(selection_difference([draws[i]], [draws[j]], draw_variance(rest),
                                           len(rest))["resolved"])
        by_seeds.append(paired_difference(draws[i], draws[j])["resolved"])
    return {"pairs": len(tested), "resolved": sum(tested), "rate": sum(tested) / len(tested),
            "resolved_by_seeds": sum(by_seeds)}


def minimum_detectable(se: float, df: float, power: float = POWER) -> float:
    """The smallest true difference a two-sided 95% test of standard error `se` resolves with
    probability `power`: (t(0.975, df) + t(power, df)) se."""
    return (critical_t(df) + float(scipy_stats.t.ppf(power, df))) * se


def selection_noise(columns, values: dict, reference: str) -> dict:
    """Per column, where `reference` has at least two draws in `values` ({label: {seed: {column:
    value}}}): its draws, the sd between them, the null's false positives, every other method's
    difference with it over all draws (`vs_reference`), and the minimum detectable difference
    of a one-draw method at the pooled paired sd of those differences. {} otherwise."""
    groups = draw_groups(values)
    references = groups.get(reference, [])
    if len(references) < 2:
        return {}

    def draws(labels: list[str], column: str) -> list[dict]:
        return [{s: v[column] for s, v in values[label].items()} for label in labels]

    out = {}
    for column in columns:
        randoms = draws(references, column)
        variance = draw_variance(randoms)
        vs = {method: selection_difference(draws(labels, column), randoms, variance,
                                           len(randoms))
              for method, labels in groups.items() if method != reference}
        sd = pooled_sd([d["sd"] for d in vs.values()])
        seeds = min((d["n"] for d in vs.values()), default=0)
        mde = None
        if sd is not None and seeds >= 2:
            mde = minimum_detectable(*standard_error(
                sd, seeds, variance * (1 + 1 / len(randoms)), len(randoms)))
        out[column] = {"draws": len(randoms), "sd_between_draws": math.sqrt(variance),
                       "null": null_false_positives(randoms), "paired_sd": sd, "seeds": seeds,
                       "minimum_detectable": mde, "vs_reference": vs}
    return out

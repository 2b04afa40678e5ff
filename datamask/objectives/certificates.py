"""How near a selection is to the best selection of its size: an upper bound on the objective's
optimum, computed from the selection itself, and the share of the room above a random selection
that the selection holds. Without it, a learner that rarely beats its greedy start cannot be told
from a greedy start that is already near the optimum.

At a fixed size k the objective as `Joint.combine` computes it is affine in the raw terms,
J(T) = c + a Q(T) + b D(T) with a, b >= 0 (`Joint.weights`), and the mean quality is modular,
Q(T) = sum_{t in T} q_t / k, so J(T) = c + sum_{t in T} m_t + b D(T) with m_t = a q_t / k. The
term scale's means sit in c and cancel from every difference. The bound by diversity metric
(docs/method.md#how-near-the-optimum):
- none weighed (lamb 1, or Pair_simi on one row): J is modular; the exchange bound below is then
  the optimum itself, the k largest m.
- Facility (dense, or on a kNN kernel): monotone submodular, so for any T of k rows
  D(T) <= D(S) + sum_{e in T - S} D(e | S) (Nemhauser, Wolsey and Fisher 1978), while the modular
  part changes by exactly sum_{T - S} m - sum_{S - T} m. With |T - S| = |S - T| = p <= k, J(T)
  exceeds J(S) by at most the best p swaps, each of an outside row worth m_e + b D(e | S) for a
  selected row worth m_s (`exchange_bound`): negative quality scores need no shift. On clustered
  rows the k gains overlap and that bound is loose, so the certificate takes the least of it and
  the Lagrangian bound of facility location's linear programme (`lagrangian_coverage_bound`).
- Pair_simi: b D(T) = -beta (||sum_T u||^2 - k') with beta = b / (k (k - 1)) and k' <= k the rows
  that are not all zero, concave in the sum of unit rows; J is at most c + beta k plus the
  maximum of its concave relaxation over fractional selections, bounded by Frank-Wolfe's dual
  (`relaxed_pair_bound`).
- DiSF: no bound (`NO_BOUND`); dense Facility past DENSE_PAIRS_LIMIT covered x all rows: not
  computed (its passes would outlast the selection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..greedy import one_thread
from .base import GroundSet, SetFunction
from .facility import CoverageLists, FacilityLocation
from .joint import Joint, TermScale
from .pair_similarity import PairSimilarity
from .sparse_facility import SparseFacilityLocation

RAW = TermScale(0.0, 1.0, 0.0, 1.0)  # a bare metric as a joint at lamb 0: combine(q, d) = d
RELAXATION_STEPS = 100  # Frank-Wolfe steps on Pair_simi's relaxation; every step's bound holds
COVERAGE_LIST = 32  # similarities kept per covered row for Facility's Lagrangian bound
LAGRANGIAN_STEPS = 300  # its subgradient steps, at most; every step's bound holds
LAGRANGIAN_PATIENCE = 10  # steps without a better bound before the step size is halved
# Facility's dense bound reads every covered row against every row: past this many pairs (at
# 20,000 rows covering themselves it is already about a lazy greedy's time on the 2-core boxes)
# it would outlast the selection it certifies, so it is not computed
DENSE_PAIRS_LIMIT = 20_000 ** 2
NO_BOUND = {"DiSF": "no bound: DiSF is minus a sum of squared correlations, and no bound on its "
                    "best value is known but 0, which says nothing of how near a selection is"}


@dataclass(frozen=True)
class Certificate:
    """One selection's certificate on its objective's own scale: its value; an upper bound on the
    best value of any selection of its size (None where no valid one is known, and
    `no_bound_reason` says why); and `random`, the exact mean value of a uniformly random
    selection of that size, the share's floor."""

    value: float
    bound: float | None = None
    random: float | None = None
    no_bound_reason: str | None = None

    def share_above_random(self, bound: float | None = None) -> float | None:
        """(value - random) / (bound - random): of the room between a random selection and the
        bound, the part this selection holds; for a selection above random, no more than its
        part of the room up to the true optimum (below random it is negative). The floor makes
        it mean the same on any scale (the standardised joint's zero is random masks of the
        scale's shape, not this selection's). `bound`: a tighter bound on the same optimum
        (another selection's). 1 where the bound is the floor (every selection scores the
        same)."""
        bound = self.bound if bound is None else bound
        if bound is None:
            return None
        room = bound - self.random
        return 1.0 if room <= 0 else (self.value - self.random) / room


def certificate(objective: SetFunction, ground: GroundSet, rows: torch.Tensor) -> Certificate:
    """The certificate of the selection `rows` (k row indices of `ground`, any device) on
    `objective`: a `Joint`, or a bare diversity metric (its raw value). Costs, in chunks, for
    Facility one pass over the N x N similarities (each covered row's largest similarities, its
    random floor and every row's gain) and LAGRANGIAN_STEPS passes over the lists kept,
    for Pair_simi RELAXATION_STEPS products of the rows with a vector. The bound is never below
    the selection's own value, which it can only undercut by rounding."""
    joint = objective if isinstance(objective, Joint) else Joint(objective, 0.0, RAW)
    rows = torch.as_tensor(rows, device=ground.device)
    k, metric = len(rows), joint.diversity
    quality = ground.quality.double()
    quality_weight, diversity_weight = joint.weights()
    per_row = quality * (quality_weight / k)
    mean_quality, random_quality = quality[rows].mean().item(), quality.mean().item()
    if joint.lamb == 1 or isinstance(metric, PairSimilarity) and k < 2:  # J is modular
        value = joint.combine(mean_quality, 0.0)
        bound = exchange_bound(value, per_row, rows)
        random = joint.combine(random_quality, 0.0)
    elif isinstance(metric, FacilityLocation) and \
            metric.covered_count(ground) * len(ground) > DENSE_PAIRS_LIMIT:
        return Certificate(float(joint(ground, rows)), no_bound_reason=(
            f"not computed: Facility's bound reads {metric.covered_count(ground):,} covered rows "
            f"against {len(ground):,} rows, past the {DENSE_PAIRS_LIMIT:,} pairs that take "
            "about a greedy's time (facility-knn-greedy's kNN kernel is certified at any size)"))
    elif isinstance(metric, (FacilityLocation, SparseFacilityLocation)):
        term = metric.incremental(ground)
        term.add_all(rows)
        value = joint.combine(mean_quality, term.covered / term.n_cover)
        weight = diversity_weight / term.n_cover
        if isinstance(metric, FacilityLocation):  # the gains in the lists' pass
            lists = metric.coverage_lists(ground, k, COVERAGE_LIST, coverage=term.cur)
            gains = lists.gains
        else:  # a kNN kernel's gains cost a pass over its entries
            lists, gains = metric.coverage_lists(ground, k, COVERAGE_LIST), term.gains().double()
        bound = min(exchange_bound(value, per_row, rows, gains * weight),
                    lagrangian_coverage_bound(value, per_row, rows, weight, term.cur, lists))
        random = joint.combine(random_quality, lists.random_value)
    elif isinstance(metric, PairSimilarity):
        value = float(joint(ground, rows))
        weight = diversity_weight / (k * (k - 1))
        bound = (joint.combine(0.0, 0.0) + weight * k
                 + relaxed_pair_bound(per_row, ground.unit, weight, rows))
        random = joint.combine(random_quality, metric.random_value(ground, k))
    else:
        return Certificate(float(joint(ground, rows)), no_bound_reason=NO_BOUND.get(
            metric.name, f"no bound: none is known for {metric.name}"))
    return Certificate(value, max(bound, value), random)


def certificate_flops(metric: SetFunction, rows: int, dim: int, k: int) -> float:
    """About the arithmetic of `certificate` on `metric` (bare or weighed) for k of `rows` x
    `dim`, by the path it takes: for Facility the selection's similarities and one pass of
    the covered rows against every row, then the Lagrangian steps over the lists kept; for
    Pair_simi RELAXATION_STEPS products of the rows with a vector; else the selection's value."""
    if isinstance(metric, FacilityLocation):
        covered = rows if metric.cover is None else len(metric.cover)
        if covered * rows > DENSE_PAIRS_LIMIT:  # not computed
            return metric.batch_flops(rows, dim, 1, k)
        return (2.0 * dim * covered * (k + rows)
                + 2.0 * LAGRANGIAN_STEPS * covered * COVERAGE_LIST)
    if isinstance(metric, PairSimilarity):
        return 2.0 * RELAXATION_STEPS * (rows + k) * dim
    return metric.batch_flops(rows, dim, 1, k)


def exchange_bound(value: float, per_row: torch.Tensor, rows: torch.Tensor,
                   gains: torch.Tensor | None = None) -> float:
    """`value` plus the best exchange of p <= k selected rows for as many others: an outside row
    is worth its `per_row` quality plus its weighted diversity gain on the selection (`gains`, 0
    on it; by submodularity no less than its worth beside any other rows), a selected row its
    `per_row` quality. The i-th best outside row against the i-th worst selected one, while that
    gains: the differences fall with i, so the best p swaps are their positive part."""
    outside = (per_row if gains is None else per_row + gains).index_fill(0, rows, -math.inf)
    swaps = min(len(rows), len(per_row) - len(rows))
    added = outside.topk(swaps).values
    removed = per_row[rows].sort().values[:swaps]
    return value + (added - removed).clamp_min(0).sum().item()


def lagrangian_coverage_bound(value: float, per_row: torch.Tensor, rows: torch.Tensor,
                              weight: float, cover: torch.Tensor, lists: CoverageLists,
                              steps: int = LAGRANGIAN_STEPS) -> float:
    """A tighter bound for Facility, the Lagrangian one of its linear programme. For any
    prices p_v of the covered rows, max_{u in T} s(v, u) <= p_v + sum_{u in T} (s(v, u) - p_v)+,
    so every T of k rows has J(T) <= J(S) - sum_S m - weight sum_v (cover_v - p_v)
    + the k largest of m_u + weight sum_v (s(v, u) - p_v)+ over all rows u (`cover`: the
    selection S's coverage of each row; `weight`: the diversity's factor over the rows
    covered). At p = cover it is `exchange_bound`; projected subgradient steps (Polyak's size
    toward `value`, halved when the bound stalls) lower it, each p giving a valid bound. Prices
    stay at or above `lists.rest`, so only each row's listed similarities can exceed them (they
    start at cover where it is above that, as after a good selection it nearly always is)."""
    k, n = len(rows), len(per_row)
    similarity, candidate = lists.similarity.double(), lists.candidate.reshape(-1)
    rest, start = lists.rest.double(), cover.double()
    price = torch.maximum(start, rest)
    base, best, pace, stale = value - per_row[rows].sum().item(), math.inf, 1.0, 0
    with one_thread(per_row.device):  # small ops, as a greedy's steps
        for _ in range(steps):
            excess = (similarity - price.unsqueeze(1)).clamp_min_(0)
            scores = per_row.index_add(0, candidate, excess.reshape(-1), alpha=weight)
            top = scores.topk(k)
            bound = base + weight * (price - start).sum().item() + top.values.sum().item()
            if bound < best:
                best, stale = bound, 0
            elif (stale := stale + 1) == LAGRANGIAN_PATIENCE:
                pace, stale = pace / 2, 0
            chosen = torch.zeros(n, dtype=torch.bool, device=per_row.device)
            chosen[top.indices] = True
            # the bound's slope in each price, over `weight`: 1 minus the picks above it
            slope = 1 - ((excess > 0) & chosen[candidate].view_as(excess)).sum(dim=1)
            slope.masked_fill_((price <= rest) & (slope > 0), 0)  # held at the floor
            norm = slope.square().sum().item()
            if norm == 0 or bound <= value or pace < 1e-3:
                break
            price = torch.maximum(price - pace * (bound - value) / (weight * norm) * slope, rest)
    return best


def relaxed_pair_bound(per_row: torch.Tensor, unit: torch.Tensor, weight: float,
                       rows: torch.Tensor, steps: int = RELAXATION_STEPS) -> float:
    """An upper bound on g(x) = per_row . x - weight ||unit^T x||^2 over every selection of k rows,
    and over fractional ones (0 <= x <= 1, sum x = k). g is concave, so for any y,
    g(x) <= g(y) + grad g(y) . (x - y), whose maximum over x is a top-k sum: the bound at y is
    topk(grad g(y)) + weight ||unit^T y||^2 (Frank-Wolfe's dual). Frank-Wolfe steps from the
    selection, with exact line search, move y toward the relaxation's maximum; the least bound
    met is returned. Products with the rows in their dtype, sums in float64."""
    k = len(rows)
    x = torch.zeros_like(per_row).index_fill_(0, rows, 1.0)
    total = unit[rows].sum(dim=0, dtype=torch.float64)  # unit^T x
    best = math.inf
    with one_thread(unit.device):  # small ops, as a greedy's steps
        for _ in range(steps):
            gradient = per_row - 2 * weight * (unit @ total.to(unit.dtype)).double()
            top = gradient.topk(k)
            spread = weight * total.square().sum().item()
            dual = top.values.sum().item() + spread
            best = min(best, dual)
            gap = dual - ((per_row @ x).item() - spread)  # grad g(x) . (vertex - x)
            if gap <= 1e-12 * max(1.0, abs(dual)):
                break
            toward = unit[top.indices].sum(dim=0, dtype=torch.float64) - total
            curvature = 2 * weight * toward.square().sum().item()
            step = 1.0 if curvature <= 0 else min(1.0, gap / curvature)
            x.mul_(1 - step).index_add_(0, top.indices, torch.full_like(top.values, step))
            total += step * toward
    return best


def certify(objective: SetFunction, ground: GroundSet,
            selections: dict[str, torch.Tensor | None],
            known: dict[str, Certificate] | None = None) -> dict[str, Certificate]:
    """The certificates of a run's named selections (None: not known), one computation for
    selections of the same rows (a learner that writes its start); `known`: certificates
    already computed, by name, on the same objective."""
    done: list[tuple[torch.Tensor, Certificate]] = []
    certificates = {}
    for name, rows in selections.items():
        if rows is None:
            continue
        key = torch.as_tensor(rows).cpu().sort().values
        found = [known[name]] if known and name in known else [
            computed for seen, computed in done if torch.equal(seen, key)]
        certificates[name] = found[0] if found else certificate(objective, ground, key)
        done.append((key, certificates[name]))
    return certificates


def certificate_fields(certificates: dict[str, Certificate], names) -> dict:
    """A closing JSON's certificate keys for the selections `names`: `objective_bound`, the
    least of their bounds (each bounds the same optimum); `objective_random`, the mean of a
    random selection, the share's floor; `share_above_random_<name>` of each, against that
    bound (null for a selection not certified); and `no_bound_reason` (null where bounded)."""
    bounds = [c.bound for c in certificates.values() if c.bound is not None]
    bound = min(bounds) if bounds else None
    any_one = next(iter(certificates.values()), None)
    fields = {"objective_bound": bound,
              "objective_random": None if bound is None else any_one.random}
    for name in names:
        known = certificates.get(name)
        fields[f"share_above_random_{name}"] = (None if known is None or bound is None
                                                else known.share_above_random(bound))
    fields["no_bound_reason"] = (None if bound is not None else any_one.no_bound_reason
                                 if any_one else "no bound: no selection to certify")
    return fields


def optimised_fields(objective: SetFunction, ground: GroundSet, rows: torch.Tensor) -> dict:
    """What a greedy's closing JSON says of its selection `rows`: the objective it optimised, by
    name, the selection's value on it, and its certificate."""
    certificates = certify(objective, ground, {"written": rows})
    return {"objective": objective.name, "objective_written": certificates["written"].value,
            **certificate_fields(certificates, ["written"])}

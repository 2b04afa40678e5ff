"""One greedy engine for every greedy selector: set functions apart from the optimiser.

A set function takes part through its incremental form, a "term" (the set functions' own terms
live beside them in `datamask.objectives`): `gains(idx)` scores every candidate x in `idx` (all
rows when None) given the current set S, as one tensor op, and `add(row, gain)` puts a row into S.
`score(gains, idx)` (identity by default) maps those gains to the value the greedy maximises; it
must not decrease in the gains, and it is recomputed on every look, which is where a cheap exact
term (the joint objective's quality) joins a costly one whose gains are kept as bounds.

The loop is written once here: it masks chosen rows, breaks ties to the lowest row (the first
maximum), can force the first pick (objectives that tie on every single row start from a seeded
row), and builds the history through `record`. Optimisers:
- naive: every step re-scores every candidate;
- lazy (Minoux 1978): for terms whose gains only shrink as S grows (submodular), a stale gain
  bounds the fresh one; each step refreshes the candidates with the largest bounds, a block at a
  time as one vectorised op, until the best value comes from a fresh gain. Same picks as naive.
- stochastic ("lazier than lazy greedy", Mirzasoleiman et al., AAAI 2015): each step scores only
  a uniform random sample of s = ceil((n / k) ln(1 / epsilon)) of the remaining candidates (all of
  them when s reaches their count, which makes it naive) and takes the sample's best. For a
  monotone submodular term its expected value is within 1 - 1/e - epsilon of the optimum, and it
  scores about n ln(1 / epsilon) gains in all, whatever k: the route at a million rows.
- batched: `rounds` rounds, each scoring every candidate once and taking the best ceil(k / rounds)
  of them at once; the rows of a round do not see each other's gains. For a term whose steps are
  small ops (Pair_simi's one matrix-vector product) the per-step overhead, not the arithmetic,
  is a greedy's cost, and this cuts it by the rows a round.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

LAZY_BLOCK = 32  # candidates refreshed at once by the lazy greedy
OPTIMIZERS = ("lazy", "naive", "stochastic", "batched")
BATCHED_ROUNDS = 200  # the batched greedy's default rounds (its --rounds flag)
STOCHASTIC_EPSILON = 0.01  # the stochastic greedy's default epsilon (its --epsilon flag)


class Term(Protocol):
    """A set function in incremental form (see the module docstring); its length is the number
    of candidates."""

    def __len__(self) -> int: ...

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor: ...

    def add(self, row: int, gain: torch.Tensor) -> None: ...


@dataclass
class Step:
    """What `record` sees after a pick: the step, the row, its value (0-d tensor, exact), the
    gains evaluated so far and the seconds since the greedy began (an anytime curve's clock)."""

    step: int
    row: int
    value: torch.Tensor
    gains_evaluated: int
    elapsed_s: float


Score = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]


@dataclass(frozen=True)
class Optimizer:
    """A greedy's optimiser (a name of OPTIMIZERS; the module docstring) and its own settings:
    the stochastic one's epsilon and the generator of its samples (on the term's device; seeded
    for repeatable picks), the batched one's rounds. The others read none of them."""

    name: str = "naive"
    epsilon: float = STOCHASTIC_EPSILON
    generator: torch.Generator | None = None
    rounds: int = BATCHED_ROUNDS

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, "
                             f"got {self.name!r}")


def greedy(term: Term, k: int, *, optimizer: Optimizer | str = "naive",
           score: Score | None = None, first: int | None = None,
           record: Callable[[Step], Any] | None = None,
           single_thread: bool = False) -> tuple[list[int], list]:
    """Greedy picks of k rows maximising `score(term.gains())`, and one `record` entry per pick.

    `optimizer`: an Optimizer, or the name of one at its defaults. `single_thread` runs the
    steps after the first full pass on one CPU thread (see `one_thread`): right for terms whose
    steps are small ops, wrong for big GEMMs."""
    if isinstance(optimizer, str):
        optimizer = Optimizer(optimizer)
    if optimizer.name == "stochastic":
        return _stochastic(term, k, score, first, record, single_thread, optimizer)
    if optimizer.name == "batched":
        return _batched(term, k, score, first, record, optimizer.rounds)
    lazy, began = optimizer.name == "lazy", time.perf_counter()
    bound = term.gains()  # exact gains at S = {}; under lazy, upper bounds afterwards
    n, evaluated = len(bound), len(bound)
    taken = torch.zeros(n, dtype=torch.bool, device=bound.device)
    fresh = torch.ones(n, dtype=torch.bool, device=bound.device)
    picks, history = [], []
    with one_thread(bound.device) if single_thread else nullcontext():
        for step in range(k):
            if step and not lazy:
                bound, evaluated = term.gains(), evaluated + n
            while True:
                values = (score(bound, None) if score else bound.clone()).masked_fill_(
                    taken, -torch.inf)
                best = first if step == 0 and first is not None else int(values.argmax())
                if not lazy or fresh[best]:
                    break
                top = values.masked_fill_(fresh, -torch.inf).topk(min(LAZY_BLOCK, n)).indices
                bound[top] = term.gains(top)
                fresh[top] = True
                evaluated += len(top)
            picks.append(best)
            taken[best] = True
            term.add(best, bound[best])
            fresh.fill_(False)
            if record:
                history.append(record(Step(step, best, values[best], evaluated,
                                           time.perf_counter() - began)))
    return picks, history


def stochastic_sample_size(n: int, k: int, epsilon: float) -> int:
    """Candidates scored per step by the stochastic greedy: ceil((n / k) ln(1 / epsilon))."""
    return max(1, math.ceil(n / max(k, 1) * math.log(1 / epsilon)))


class RemainingRows:
    """The rows not yet picked, for uniform samples without replacement at a cost that follows
    the sample, not the rows: `pool[:size]` holds them, a pick is swapped out in O(1)."""

    def __init__(self, n: int, device: torch.device, generator: torch.Generator):
        self.pool = torch.arange(n, device=device)
        self.position = torch.arange(n, device=device)  # of each row in pool
        self.size = n
        self.generator = generator

    def sample(self, count: int) -> torch.Tensor:
        """`count` distinct remaining rows drawn uniformly (all of them if fewer), ascending.
        A small sample draws 2 * count positions with replacement and keeps a random `count`
        of the distinct ones (uniform by symmetry), redrawing in the rare case of too few."""
        device = self.pool.device
        if count >= self.size:
            positions = torch.arange(self.size, device=device)
        elif 2 * count >= self.size:
            positions = torch.randperm(self.size, generator=self.generator, device=device)[:count]
        else:
            while True:
                drawn = torch.randint(self.size, (2 * count,), generator=self.generator,
                                      device=device).unique()
                if len(drawn) >= count:
                    break
            order = torch.randperm(len(drawn), generator=self.generator, device=device)
            positions = drawn[order[:count]]
        return self.pool[positions].sort().values

    def remove(self, row: int) -> None:
        self.size -= 1
        at, last = self.position[row].clone(), self.pool[self.size].clone()
        self.pool[at] = last
        self.position[last] = at


def _stochastic(term: Term, k: int, score: Score | None, first: int | None,
                record: Callable[[Step], Any] | None, single_thread: bool,
                optimizer: Optimizer) -> tuple[list[int], list]:
    """The stochastic optimiser (module docstring): the best of a fresh sample each step, ties
    to the lowest row of the sample."""
    epsilon, generator = optimizer.epsilon, optimizer.generator
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie strictly between 0 and 1, got {epsilon}")
    if generator is None:
        raise ValueError("the stochastic greedy needs a seeded generator on the term's device")
    n, device, began = len(term), generator.device, time.perf_counter()
    remaining = RemainingRows(n, device, generator)
    sample_size = stochastic_sample_size(n, k, epsilon)
    picks, history, evaluated = [], [], 0
    with one_thread(device) if single_thread else nullcontext():
        for step in range(k):
            idx = (torch.tensor([first], device=device) if step == 0 and first is not None
                   else remaining.sample(sample_size))
            gains = term.gains(idx)
            values = score(gains, idx) if score else gains
            at = int(values.argmax())
            best = int(idx[at])
            evaluated += len(idx)
            picks.append(best)
            remaining.remove(best)
            term.add(best, gains[at])
            if record:
                history.append(record(Step(step, best, values[at], evaluated,
                                           time.perf_counter() - began)))
    return picks, history


def _batched(term: Term, k: int, score: Score | None, first: int | None,
             record: Callable[[Step], Any] | None, rounds: int) -> tuple[list[int], list]:
    """The batched optimiser (module docstring): each round the best ceil(k / rounds) rows by
    the round's values (torch's top-k), `first` alone making the first round. Every round is a
    full pass over the candidates, a big op, so it keeps every thread."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    per_round, began, evaluated = math.ceil(k / rounds), time.perf_counter(), 0
    picks, history, taken = [], [], None
    while len(picks) < k:
        gains = term.gains()
        evaluated += len(gains)
        if taken is None:
            taken = torch.zeros(len(gains), dtype=torch.bool, device=gains.device)
        values = (score(gains, None) if score else gains.clone()).masked_fill_(taken, -torch.inf)
        chosen = ([first] if not picks and first is not None
                  else values.topk(min(per_round, k - len(picks))).indices.tolist())
        for row in chosen:
            picks.append(row)
            taken[row] = True
            term.add(row, gains[row])
            if record:
                history.append(record(Step(len(picks) - 1, row, values[row], evaluated,
                                           time.perf_counter() - began)))
    return picks, history


@contextmanager
def one_thread(device: torch.device):
    """Run a greedy's step loop on one CPU thread: its ops are small (a few rows of a kernel, one
    vector), so splitting each over threads costs a barrier per op, and on a busy machine a
    thread that waits for a core stalls every op (measured: 1 s on one thread, 4-40 s on two)."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

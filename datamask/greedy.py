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
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

LAZY_BLOCK = 32  # candidates refreshed at once by the lazy greedy
OPTIMIZERS = ("lazy", "naive")


class Term(Protocol):
    """A set function in incremental form (see the module docstring)."""

    def gains(self, idx: torch.Tensor | None = None) -> torch.Tensor: ...

    def add(self, row: int, gain: torch.Tensor) -> None: ...


@dataclass
class Step:
    """What `record` sees after a pick: the step, the row, the values every candidate had (chosen
    rows -inf; lazy: from bounds, exact at `row`) and the gains evaluated so far."""

    step: int
    row: int
    values: torch.Tensor
    gains_evaluated: int


Score = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def greedy(term: Term, k: int, *, optimizer: str = "naive", score: Score | None = None,
           first: int | None = None, record: Callable[[Step], Any] | None = None,
           single_thread: bool = False) -> tuple[list[int], list]:
    """Greedy picks of k rows maximising `score(term.gains())`, and one `record` entry per pick.

    `single_thread` runs the steps after the first full pass on one CPU thread (see
    `one_thread`): right for terms whose steps are small ops, wrong for big GEMMs."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    lazy = optimizer == "lazy"
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
                history.append(record(Step(step, best, values, evaluated)))
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

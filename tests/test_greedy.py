"""The greedy engine's lazy optimiser (`datamask.greedy`): the naive greedy's picks with tied
values, with a score that reads each row's own term (quality), when one step refreshes many
blocks of stale rows, and when every row is picked."""

from __future__ import annotations

import pytest
import torch

from datamask.greedy import LAZY_BLOCK, greedy
from datamask.objectives.facility import CoverageGains, clipped_cosine, kernel_rows


def picks_and_evaluated(unit: torch.Tensor, k: int, optimizer: str, quality=None):
    """The greedy's picks of k rows covering `unit`, and the gains it had evaluated after each."""
    term = CoverageGains(kernel_rows(clipped_cosine(unit, unit)), len(unit), len(unit))
    if quality is None:
        score = term.coverage_with
    else:  # a row's own quality beside its coverage, as the joint objective weighs them
        def score(gains, idx):
            return term.coverage_with(gains) + (quality if idx is None else quality[idx])
    return greedy(term, k, optimizer=optimizer, score=score,
                  record=lambda step: step.gains_evaluated)


def rounded_rows(n: int, dim: int, seed: int, decimals: int) -> torch.Tensor:
    """Unit rows rounded to a few digits, many of them repeated: tied gains at every step."""
    rows = torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))
    rows = torch.round(rows, decimals=decimals)
    return torch.nn.functional.normalize(rows, dim=1)


@pytest.mark.parametrize("decimals", [0, 2])
@pytest.mark.parametrize("with_quality", [False, True])
def test_lazy_picks_equal_naive_with_ties_and_a_score_per_row(decimals, with_quality):
    unit = rounded_rows(600, 4, seed=decimals, decimals=decimals)
    quality = (torch.arange(600, dtype=torch.float64) % 7) / 50 if with_quality else None
    lazy, evaluated = picks_and_evaluated(unit, 60, "lazy", quality)
    naive, _ = picks_and_evaluated(unit, 60, "naive", quality)
    assert lazy == naive
    assert len(set(lazy)) == 60
    assert evaluated[-1] < 60 * 600  # the lazy greedy refreshed fewer gains than naive scored


def test_a_step_that_refreshes_many_blocks_keeps_naives_picks():
    # rows on a few directions, repeated: after the first pick of a direction every row of it
    # loses its whole bound, so a step refreshes many blocks before a fresh one leads
    directions = torch.nn.functional.normalize(
        torch.randn(6, 16, generator=torch.Generator().manual_seed(3)), dim=1)
    unit = directions.repeat_interleave(24 * LAZY_BLOCK, dim=0)
    lazy, evaluated = picks_and_evaluated(unit, 8, "lazy")
    naive, _ = picks_and_evaluated(unit, 8, "naive")
    assert lazy == naive
    per_step = [after - before for before, after in zip(evaluated, evaluated[1:])]
    assert max(per_step) > 8 * LAZY_BLOCK


def test_picking_every_row_picks_each_once_as_naive_does():
    # past the first picks every gain is 0: the first row of every tie, and none comes back
    unit = rounded_rows(50, 3, seed=1, decimals=0)
    lazy, _ = picks_and_evaluated(unit, 50, "lazy")
    naive, _ = picks_and_evaluated(unit, 50, "naive")
    assert lazy == naive
    assert sorted(lazy) == list(range(50))

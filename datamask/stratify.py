"""Stratified selection: the budget split over a column's values in proportion to the input, each
part chosen by the selector within its stratum (`--stratify COLUMN`).

The budget k = budget(select_ratio, N) is split by the largest-remainder method: stratum s of n_s
rows gets floor(k n_s / N) or one more, the leftover rows going to the largest remainders (ties to
the smaller value), so the budgets sum to exactly k and the selection's mix equals the input's to
the row. Each stratum is then an input of its own: the selector runs on its rows alone with its
budget (the objective optimised per stratum). Optimising the joint objective under per-stratum
budgets would need every optimiser changed (the learner's Gumbel-top-k draws, every greedy's
candidate set); per stratum, every registered selector works unchanged behind `Selector`, and the
cost is lower (a selector's cost grows faster than linearly in rows). A stratum whose budget is 0
selects nothing, one whose budget is all its rows selects them all; neither runs the selector, and
their rows score 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .data import Dataset, budget
from .errors import UserError

if TYPE_CHECKING:  # the selectors (and torch) load where a selection runs, not where it is planned
    from .selectors import Selection, Selector


def largest_remainder(total: int, sizes) -> np.ndarray:
    """Split `total` over parts in proportion to `sizes` (int64): each part gets the floor or the
    ceiling of total * size / sum(sizes), in exact integer arithmetic, summing to `total`; the
    leftover units go to the largest remainders, ties to the earlier part."""
    sizes = np.asarray(sizes, dtype=np.int64)
    whole = int(sizes.sum())
    if not 0 <= total <= whole:
        raise ValueError(f"cannot split {total} over parts of {whole} rows")
    product = sizes.astype(object) * total  # Python integers: exact at any size
    share = (product // whole).astype(np.int64)
    remainder = (product % whole).astype(np.int64)
    order = np.lexsort((np.arange(len(sizes)), -remainder))
    share[order[:total - int(share.sum())]] += 1
    return share


def strata_of(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct values in sorted order, each row's index into them, and each one's rows."""
    distinct, labels = np.unique(values, return_inverse=True)
    return distinct, labels.reshape(-1), np.bincount(labels.reshape(-1), minlength=len(distinct))


def stratum_budgets(values: np.ndarray, k: int) -> dict:
    """{value: rows to select} for a budget of k rows over the rows' stratum `values`."""
    distinct, _, sizes = strata_of(values)
    return dict(zip(distinct.tolist(), largest_remainder(k, sizes).tolist()))


def select_stratified(selector: Selector, data: Dataset, values: np.ndarray,
                      select_ratio: float, column: str, budgets: Mapping | None = None,
                      per_stratum: Callable[[int, Dataset, float], Selector] | None = None
                      ) -> Selection:
    """Run `selector` within each stratum of `values` (one per row of `data`) and merge the parts
    into one Selection in input order: ids as given, each row's score from its stratum's run,
    wall time summed, params recording the column and each stratum's rows and budget.

    `budgets` ({value: rows}) replaces the proportional split of budget(select_ratio, N) (the
    pipeline gives each block its part of the whole input's split); `per_stratum(index, rows,
    ratio)` builds the selector of one stratum where it must differ (the learner's checkpoint)."""
    if len(values) != len(data):
        raise AssertionError(f"{len(values)} stratum values for {len(data)} rows")
    distinct, labels, sizes = strata_of(values)
    if budgets is None:
        budgets = stratum_budgets(values, budget(select_ratio, len(data)))
    selected = np.zeros(len(data), dtype=bool)
    score = np.zeros(len(data), dtype=np.float32)
    order = np.argsort(labels, kind="stable")  # rows of each stratum together, in input order
    starts = np.concatenate([[0], np.cumsum(sizes)])
    wall, history, strata = 0.0, [], []
    for index, value in enumerate(distinct.tolist()):
        rows = order[starts[index]:starts[index + 1]]
        n, k = len(rows), int(budgets.get(value, 0))
        strata.append({"value": value, "rows": n, "budget": k})
        if not 0 <= k <= n:
            raise AssertionError(f"stratum {value!r}: a budget of {k} for {n} rows")
        if k in (0, n):  # nothing to choose
            selected[rows] = k == n
            continue
        part = Dataset(data.ids[rows], data.quality[rows], data.features[rows])
        ratio = k / n  # budget(ratio, n) == k: the float error of k / n * n is far below 0.5
        chosen = per_stratum(index, part, ratio) if per_stratum else selector
        try:
            result = chosen.select(part, ratio)
        except UserError as err:
            raise UserError(f"--stratify {column}: stratum {value!r} ({n} rows, budget {k}): "
                            f"{err}") from None
        strata[-1].update(result.run)  # the learner's steps, stop and objectives, per stratum
        selected[rows], score[rows] = result.selected, result.score
        wall += result.wall_time_s
        history += [{"stratum": value, **entry} for entry in result.history]
    from .selectors import Selection

    params = {**selector.params, "select_ratio": select_ratio, "stratify": column,
              "strata": strata}
    return Selection(selector.name, data.ids, selected, score, params, wall, history)

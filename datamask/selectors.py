"""One small interface for every selector: `select(data, select_ratio) -> Selection`.

The DATAMASK learner is registered here; the baselines in the top-level `baselines` package
register themselves when it is imported. The CLI and Make targets only look selectors up by name.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .data import Dataset, budget, selection_table, write_table_atomic
from .errors import UserError
from .learner import LearnerConfig, MaskLearner


@dataclass
class Selection:
    method: str
    ids: np.ndarray  # (N,) the input ids, in input order
    selected: np.ndarray  # (N,) bool
    score: np.ndarray  # (N,) float32: the learner's final logit, a baseline's ranking score
    params: dict
    wall_time_s: float  # selector time only: no reading, writing or reporting
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # filled by datamask.report.Report

    def write(self, path, id_column: str) -> None:
        write_table_atomic(selection_table(self.ids, self.selected, self.score, id_column), path)


class Selector:
    """A selection method. Subclasses set `name` and implement `_select`; `select` times it and
    checks the budget, so no selector can return the wrong count unnoticed."""

    name: ClassVar[str]

    def __init__(self, **params):
        self.params = params

    def _select(self, data: Dataset, k: int) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Return (selected bool mask, per-row score, history) for a budget of k rows."""
        raise NotImplementedError

    def select(self, data: Dataset, select_ratio: float) -> Selection:
        k = budget(select_ratio, len(data))
        start = time.perf_counter()
        selected, score, history = self._select(data, k)
        wall = time.perf_counter() - start
        if selected.dtype != bool or selected.shape != (len(data),) or selected.sum() != k:
            raise AssertionError(f"selector {self.name} returned {selected.sum()} rows, not {k}")
        return Selection(self.name, data.ids, selected, np.asarray(score, np.float32),
                         {"select_ratio": select_ratio, **self.params}, wall, history)


SELECTORS: dict[str, type[Selector]] = {}


def register(cls: type[Selector]) -> type[Selector]:
    SELECTORS[cls.name] = cls
    return cls


def _load_baselines() -> None:
    import baselines  # noqa: F401  (registers on import; lazy, since baselines imports us)


def selector_names() -> list[str]:
    _load_baselines()
    return sorted(SELECTORS)


def selector_class(name: str) -> type[Selector]:
    _load_baselines()
    if name not in SELECTORS:
        raise UserError(f"unknown selector '{name}'; known: {', '.join(sorted(SELECTORS))}")
    return SELECTORS[name]


def make_selector(name: str, **params) -> Selector:
    return selector_class(name)(**params)


@register
class DataMask(Selector):
    """The policy-gradient mask learner. Params: the fields of LearnerConfig (but select_ratio),
    plus the run options of MaskLearner.fit (RUN_OPTIONS: logging, progress, checkpoints)."""

    name = "datamask"
    RUN_OPTIONS = ("evaluate", "eval_every", "log_path", "progress", "checkpoint_path",
                   "checkpoint_every", "resume")

    def __init__(self, **params):
        run = {key: params.pop(key) for key in self.RUN_OPTIONS if key in params}
        unknown = set(params) - {f.name for f in dataclasses.fields(LearnerConfig)}
        if unknown:
            raise UserError(f"datamask has no option {', '.join(sorted(unknown))}")
        super().__init__(**params)
        self.run_options = run

    def select(self, data: Dataset, select_ratio: float) -> Selection:
        config = LearnerConfig(select_ratio=select_ratio, **self.params)
        result = MaskLearner(config).fit(data, **self.run_options)
        return Selection(self.name, data.ids, result.selected, result.logits,
                         dataclasses.asdict(config), result.wall_time_s, result.history)

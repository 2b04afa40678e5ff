"""One small interface for every selector: `select(data, select_ratio) -> Selection`.

Selectors are found by name through the packaging entry-point group `datamask.selectors`: this
package registers the learner and the `baselines` package its baselines in pyproject.toml, and a
user's own package plugs in the same way (README, "Your own selector"). The core imports no
selector package itself; the CLI and Make targets only look selectors up by name.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import ClassVar

import numpy as np
import torch

from .data import Dataset, budget, selection_table, write_table_atomic
from .errors import UserError
from .learner import LearnerConfig, MaskLearner
from .objectives import optimised_fields
from .options import build

ENTRY_POINT_GROUP = "datamask.selectors"


@dataclass
class Selection:
    method: str
    ids: np.ndarray  # (N,) the input ids, in input order
    selected: np.ndarray  # (N,) bool
    score: np.ndarray  # (N,) float32: the learner's final logit, a baseline's ranking score
    params: dict
    wall_time_s: float  # selector time only: no reading, writing or reporting
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # the CLI's --report, on the whole input
    run: dict = field(default_factory=dict)  # what the run did (the learner's steps, its stop,
    # the step written, its objective and certificate: LearnResult.summary); for a greedy
    # baseline its objective and certificate (`optimised_fields`); empty for the others

    @property
    def selected_ids(self) -> np.ndarray:
        """The ids of the selected rows, in input order."""
        return self.ids[self.selected]

    def summary(self, output: str | None = None) -> dict:
        """The run's record, as `datamask select` and `datamask baseline` print it (with the
        `output` path they wrote to): rows, selected, time, what the run did (`run`), the strata
        of a stratified run, the report's metrics."""
        record = {"method": self.method, "rows": len(self.ids),
                  "selected": int(self.selected.sum()),
                  **({"output": output} if output is not None else {}),
                  "wall_time_s": round(self.wall_time_s, 3), **self.run}
        if "strata" in self.params:
            record["strata"] = self.params["strata"]
        if self.metrics:
            record["metrics"] = self.metrics
        return record

    def write(self, path, id_column: str) -> None:
        write_table_atomic(selection_table(self.ids, self.selected, self.score, id_column), path)


@dataclass
class NoOptions:
    """The options of a selector that takes none."""


class Selector:
    """A selection method. Subclasses set `name`, their typed `Options` (a dataclass of
    `datamask.options.option` fields) and implement `_select`; `select` times it and checks the
    budget, and no subclass overrides it, so none can return the wrong count unnoticed."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions

    def __init__(self, **params):
        self.options = build(self.Options, params, f"selector {self.name}")
        self.params = dataclasses.asdict(self.options)  # what Selection.params records

    def _select(self, data: Dataset, k: int) -> tuple:
        """Return (selected bool mask, per-row score, history) for a budget of k rows; a selector
        that maximises a set function adds a fourth item, (that function, its ground set), on
        which the selection is certified outside the selector's time (`optimised_fields`)."""
        raise NotImplementedError

    def _selection(self, data: Dataset, select_ratio: float, k: int) -> Selection:
        """Run the method and time it; a selector that times or records itself overrides this."""
        start = time.perf_counter()
        selected, score, history, *optimised = self._select(data, k)
        wall = time.perf_counter() - start
        run = {}
        if optimised:
            objective, ground = optimised[0]
            run = optimised_fields(objective, ground, torch.as_tensor(np.flatnonzero(selected)))
        return Selection(self.name, data.ids, selected, np.asarray(score, np.float32),
                         {"select_ratio": select_ratio, **self.params}, wall, history, run=run)

    def select(self, data: Dataset, select_ratio: float) -> Selection:
        k = budget(select_ratio, len(data))
        selection = self._selection(data, select_ratio, k)
        selected = selection.selected
        if selected.dtype != bool or selected.shape != (len(data),) or selected.sum() != k:
            raise AssertionError(f"selector {self.name} returned {selected.sum()} rows, not {k}")
        return selection


def _entry_points() -> dict[str, EntryPoint]:
    """The registered selectors by name (the first installed wins a repeated name)."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name, point)
    return found


def selector_names() -> list[str]:
    return sorted(_entry_points())


def selector_class(name: str) -> type[Selector]:
    """The class registered under `name`; an unknown name or a plugin that fails to import is
    a UserError naming it."""
    points = _entry_points()
    if name not in points:
        raise UserError(f"unknown selector '{name}'; known: {', '.join(sorted(points))}")
    try:
        cls = points[name].load()
    except Exception as err:  # the plugin's own bug or missing dependency: say which plugin
        raise UserError(f"selector '{name}' ({points[name].value}) failed to import: "
                        f"{type(err).__name__}: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Selector)):
        raise UserError(f"selector '{name}' ({points[name].value}) is not a Selector subclass")
    if cls.name != name:
        raise UserError(f"selector '{name}' ({points[name].value}) names itself '{cls.name}'")
    return cls


def make_selector(name: str, **params) -> Selector:
    return selector_class(name)(**params)


class DataMask(Selector):
    """The policy-gradient mask learner. Options: the fields of LearnerConfig (but select_ratio,
    which `select` gives), plus the run options of MaskLearner.fit (RUN_OPTIONS: logging,
    progress, checkpoints)."""

    name = "datamask"
    Options = LearnerConfig
    RUN_OPTIONS = ("evaluate", "eval_every", "log_path", "progress", "checkpoint_path",
                   "checkpoint_every", "resume")

    def __init__(self, **params):
        if "select_ratio" in params:
            raise UserError("datamask takes the select ratio from select(), not as an option")
        self.run_options = {key: params.pop(key) for key in self.RUN_OPTIONS if key in params}
        super().__init__(**params)
        del self.params["select_ratio"]

    def _selection(self, data: Dataset, select_ratio: float, k: int) -> Selection:
        config = dataclasses.replace(self.options, select_ratio=select_ratio)
        result = MaskLearner(config).fit(data, **self.run_options)
        return Selection(self.name, data.ids, result.selected, result.logits,
                         dataclasses.asdict(config), result.wall_time_s, result.history,
                         run=result.summary())

"""Typed result records of the experiments: what `timing`, `sweep` and `direct` write to
`<experiment>.json`, and what `findings` and `figures` read back. A record's JSON is its fields by
name (a group's final means flattened as `<name>_mean`), so the files written before these types
existed (reproduce/results/) read as they are.

Layering: this module imports only the core; `figures` reads results through it (figures sits
above reproduce)."""

from __future__ import annotations

import json
import os
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

from datamask.errors import UserError
from datamask.objectives import DIVERSITY

Value = float | str  # a swept knob's value: a number, or a name such as 'linear:10:1'
T = TypeVar("T")


def _encode(value):
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(kind, value):
    """`value` read from JSON as `kind`: records and containers of them are rebuilt, plain values
    are kept as JSON has them (a knob value stays an int or a string)."""
    if value is None:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _decode(options[0], value) if len(options) == 1 else value
    if origin is list:
        return [_decode(args[0], v) for v in value]
    if origin is dict:
        return {k: _decode(args[1], v) for k, v in value.items()}
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind.from_json(value)
    return value


@dataclass
class Record:
    def to_json(self) -> dict:
        return {f.name: _encode(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict):
        hints = typing.get_type_hints(cls)
        unknown = set(data) - set(hints)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {sorted(unknown)}")
        return cls(**{k: _decode(hints[k], v) for k, v in data.items()})


@dataclass
class Machine(Record):
    """What the timings ran on: read ratios, not absolute times, on a shared CPU."""
    cpu: str
    cores: int | None
    torch_threads: int
    torch: str
    device: str
    gpu: str | None
    python: str

    def line(self) -> str:
        return (f"Machine: {self.cpu}, {self.cores} cores, {self.torch_threads} torch threads,"
                f" torch {self.torch}, device {self.device}"
                + (f" ({self.gpu})" if self.gpu else ""))


@dataclass
class CurvePoint(Record):
    step: int
    elapsed_s: float
    objective: float


@dataclass
class Fit(Record):
    """t = coef * N^exponent seconds, fitted over `sizes`."""
    exponent: float
    coef: float
    sizes: list[int]

    def predict(self, n: int) -> float:
        return self.coef * n ** self.exponent


@dataclass
class Outcome(Record):
    """What a group of runs of one method on one metric ended with: the objective and wall time
    over the group, and the mean of each Report column (quality, each diversity metric) of the
    final selections, written as `<name>_mean`."""
    metric: str
    objective_mean: float
    objective_std: float
    wall_s_mean: float
    means: dict[str, float]

    def to_json(self) -> dict:
        data = super().to_json()
        data.update({f"{name}_mean": value for name, value in data.pop("means").items()})
        return data

    @classmethod
    def from_json(cls, data: dict):
        named = {f.name for f in fields(cls)}
        means = {k[:-len("_mean")]: v for k, v in data.items()
                 if k.endswith("_mean") and k not in named}
        rest = {k: v for k, v in data.items() if not (k.endswith("_mean") and k not in named)}
        return super().from_json(dict(rest, means=means))

    @staticmethod
    def stats(runs: list) -> dict:
        """The Outcome fields of `runs` (records with objective, wall_s and the Report `final`)."""
        objective = np.array([r.objective for r in runs])
        return {"objective_mean": float(objective.mean()), "objective_std": float(objective.std()),
                "wall_s_mean": float(np.mean([r.wall_s for r in runs])),
                "means": {name: float(np.mean([r.final[name] for r in runs]))
                          for name in ("quality", *DIVERSITY)}}


def best_of(rows: Iterable[T], key: Callable[[T], float] = lambda s: s.objective_mean) -> T:
    return max(rows, key=key)


def of_metric(rows: Iterable[T], metric: str) -> list[T]:
    return [r for r in rows if r.metric == metric]


@dataclass
class ExperimentResult(Record):
    """What every results file starts with: the experiment's name (its file's and its Make
    target's), the machine, and the flags it ran with."""
    experiment: str
    machine: Machine
    config: dict[str, Any]

    @property
    def metrics(self) -> list[str]:
        return self.config["metrics"]


# ---------------------------------------------------------------- timing

@dataclass
class PaperTiming(Record):
    metric: str
    n: int
    greedy_s: float
    datamask_s: float
    time_ratio: float
    device: str


@dataclass
class TimingRun(Record):
    """One selector at one (metric, N). status: 'measured' (wall_s the fastest of `repeats` runs),
    'extrapolated' (the fit's prediction) or 'killed' (at the budget; the prediction if larger);
    objective is None unless measured; a learner run has its curve, and under the read-off
    stopping rule the step its written selection was read at (0 on a scored start); a learner
    run in blocks (--learner_blocks) has each block's seconds and its plan's instead of a curve."""
    metric: str
    n: int
    label: str
    selector: str
    params: dict[str, Any]
    role: str  # 'learner' | 'reference' | 'fast'
    status: str
    wall_s: float
    objective: float | None
    random_objective: float
    repeats: int | None = None
    curve: list[CurvePoint] | None = None
    best_step: int | None = None
    block_s: list[float] | None = None
    plan_s: float | None = None


@dataclass
class Comparison(Record):
    """The learner against one greedy at the same (metric, N)."""
    metric: str
    n: int
    greedy: str
    greedy_role: str
    greedy_status: str
    time_ratio: float
    objective_ratio: float | None
    gain_ratio: float | None
    time_to_greedy_objective_s: float | None


@dataclass
class TimingResult(ExperimentResult):
    paper: PaperTiming
    runs: list[TimingRun]
    fits: dict[str, dict[str, Fit | None]]
    comparisons: list[Comparison]
    crossover: dict[str, int | None]

    def run_of(self, metric: str, n: int, label: str) -> TimingRun | None:
        """`label`'s run on `metric` at `n` rows (None: not in this result)."""
        return next((r for r in self.runs if (r.metric, r.n, r.label) == (metric, n, label)),
                    None)


# ---------------------------------------------------------------- sweep and direct

@dataclass
class GreedyLevel(Record):
    """The joint greedy on the sweep's objective at one lamb: the yardstick."""
    metric: str
    lamb: float
    wall_s: float
    objective: float


@dataclass
class SweepRun(Record):
    metric: str
    value: Value
    seed: int
    params: dict[str, Any]
    wall_s: float
    objective: float
    final: dict[str, float]
    curve: list[CurvePoint]
    steps_taken: int | None = None  # fewer than n_epochs where --patience stopped it
    best_step: int | None = None  # the stopping rule's written read-off (0: the start's)


@dataclass
class SweepSummary(Outcome):
    """stable: every seed ended above its first-step objective and the seeds' final objectives
    span at most a quarter of the mean gain."""
    value: Value
    start_mean: float
    stable: bool


@dataclass
class SweepResult(ExperimentResult):
    knob: str
    paper: str
    runs: list[SweepRun]
    summary: list[SweepSummary]
    greedy: list[GreedyLevel]
    best: dict[str, Value]
    smallest_stable: dict[str, Value | None]


@dataclass
class DirectRun(Record):
    method: str
    metric: str
    seed: int | None
    params: dict[str, Any]
    wall_s: float
    objective: float
    final: dict[str, float]


@dataclass
class DirectSummary(Outcome):
    """gap_to_learner: objective_mean minus the learner's; share_of_learner: their ratio (None
    when the learner's is not above 0)."""
    method: str
    runs: int
    wall_s_std: float
    gap_to_learner: float
    share_of_learner: float | None


@dataclass
class DirectResult(ExperimentResult):
    methods: list[str]
    runs: list[DirectRun]
    summary: list[DirectSummary]
    best: dict[str, str]


# ---------------------------------------------------------------- clusters

@dataclass
class ClusterRun(Record):
    """One `datamask select` run at its defaults: the diversity metric's value of its selection
    on all rows, its mean quality, and the synthetic clusters it covers."""
    metric: str
    lamb: float
    seed: int
    wall_s: float
    steps: int
    written_step: int | None
    diversity: float
    quality: float
    clusters: int
    largest_share: float


@dataclass
class ClustersResult(ExperimentResult):
    """`random`: the same columns for uniformly random selections (one per seed and metric), the
    yardstick."""
    runs: list[ClusterRun]
    random: list[ClusterRun]


# ---------------------------------------------------------------- length bias

@dataclass
class LengthCorpus(Record):
    """A corpus of prepared rows: its mean `text_length` (characters), their coefficient of
    variation, and the half-width of the chance band of a random selection's length ratio."""
    name: str
    folder: str
    rows: int
    selected: int
    mean_length: float
    cv: float
    chance_half_width: float


@dataclass
class LengthRun(Record):
    """One selection on one corpus: its mean length over the corpus's (`ratio`); seed None for a
    selector that takes none."""
    corpus: str
    selection: str
    seed: int | None
    ratio: float
    mean_length: float
    wall_s: float


@dataclass
class LengthSummary(Record):
    """A selection's runs on one corpus: role ('quality', 'diversity': judged by the rule;
    'reported'), the distinct selections its seeds made, the ratio's min, mean and max, and
    'long', 'short' or 'within chance' (every seed beyond the chance band, or not)."""
    corpus: str
    selection: str
    role: str
    seeds: int
    distinct: int
    ratio_min: float
    ratio_mean: float
    ratio_max: float
    against_chance: str


@dataclass
class LengthBiasResult(ExperimentResult):
    corpora: list[LengthCorpus]
    runs: list[LengthRun]
    summary: list[LengthSummary]

    def of(self, corpus: str) -> dict[str, LengthSummary]:
        """The corpus's summaries by selection."""
        return {s.selection: s for s in self.summary if s.corpus == corpus}


Result = TimingResult | SweepResult | DirectResult | ClustersResult | LengthBiasResult


def result_type(experiment: str) -> type:
    if experiment == "timing":
        return TimingResult
    if experiment == "ablation-direct":
        return DirectResult
    if experiment == "clusters":
        return ClustersResult
    if experiment == "length-bias":
        return LengthBiasResult
    if experiment.startswith("ablation-"):
        return SweepResult
    raise UserError(f"unknown experiment {experiment!r}")


def read_result(results: str, experiment: str) -> Result | None:
    """`results/<experiment>.json` as its record, or None when the file does not exist."""
    path = os.path.join(results, f"{experiment}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    try:
        return result_type(experiment).from_json(data)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise UserError(f"{path}: not a {experiment} results file ({err})") from None


def stop_sweeps(folder: os.PathLike) -> list[tuple[int, Result | None]]:
    """`make ablation-stop`'s sweeps in `folder`, (rows, result) from its n<N>/ folders, by rows."""
    rows = sorted(int(path.name[1:]) for path in Path(folder).glob("n*") if path.name[1:].isdigit())
    return [(n, read_result(os.path.join(folder, f"n{n}"), "ablation-stop")) for n in rows]

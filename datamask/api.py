"""Selection from Python: `datamask.select` on arrays and `datamask.select_table` on a table held
in memory (pyarrow, pandas, `datasets`, or anything with Arrow's stream interface). Both run what
`datamask select` and `datamask baseline` run, on the same checks, with the same messages (a
setting is named by its flag, `--lamb`), and return the `Selection` whose `summary()` is the
record those commands print; the CLI calls the shared steps here.

Neither pandas nor `datasets` is imported: an object of theirs is recognised through its module,
loaded already when the caller holds one.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pyarrow as pa

from .data import FEATURE_COLUMN, ID_COLUMN, QUALITY_COLUMN, Dataset, check_ratio, table_dataset
from .errors import UserError, quoted
from .learner import LearnerConfig, fitting_partial
from .options import build, check_field
from .report import REPORT_FLOPS, Report
from .selectors import DataMask, Selection, Selector, selector_class

DEFAULTS = LearnerConfig()
LEARNER = "datamask"
# Options every baseline is given where it takes them, whether set or not: the report scores
# with them too. The seed where none is set (a baseline's, the report's random masks):
COMMON_BASELINE_OPTIONS = ("seed", "lamb")
BASELINE_SEED = 0
# How errors name the input where they would name a file, and the columns the arrays become.
ARRAYS, ARRAY_COLUMNS = "datamask.select", ("ids", "quality", "embeddings")
TABLE = "datamask.select_table"


def select(ids, quality, embeddings, select_ratio: float = DEFAULTS.select_ratio, *,
           method: str = LEARNER, report: bool = False, progress: bool = False,
           **settings) -> Selection:
    """Select `select_ratio` of the rows: `ids` (N integers, unique), `quality` (N numbers,
    higher is better), `embeddings` (N x d numbers). `method` is a registered selector's name
    (`datamask.selector_names()`): the learner (its settings are LearnerConfig's: algorithm,
    lamb, seed, device, n_epochs, ...) or a baseline (its Options'). `report` adds the CLI's
    --report metrics. Every setting and every row is checked before any work."""
    return _select(lambda: table_dataset(_arrays_table(ids, quality, embeddings), ARRAYS,
                                         *ARRAY_COLUMNS),
                   select_ratio, method=method, report=report, progress=progress,
                   settings=settings)


def select_table(table, select_ratio: float = DEFAULTS.select_ratio, *,
                 id_column: str = ID_COLUMN, quality_column: str = QUALITY_COLUMN,
                 feature_column: str = FEATURE_COLUMN, method: str = LEARNER,
                 report: bool = False, progress: bool = False, **settings) -> Selection:
    """`select` on a table's columns (the defaults are the data contract's): a pyarrow Table, a
    pandas DataFrame (a named index counts as a column), a `datasets.Dataset` (its rows as it
    shows them, after any select or shuffle), or another table with the Arrow stream interface
    (polars, DuckDB). The embedding column holds one list of numbers per row."""
    return _select(lambda: table_dataset(_as_arrow(table), TABLE, id_column, quality_column,
                                         feature_column),
                   select_ratio, method=method, report=report, progress=progress,
                   settings=settings)


def _select(read, select_ratio: float, *, method: str, report: bool, progress: bool,
            settings: dict) -> Selection:
    """`method`'s selection of the dataset `read()` returns, the settings checked first, as the
    CLI checks its flags before it reads."""
    check_ratio(select_ratio)
    if method == LEARNER:
        config = learner_config(settings, select_ratio)
        data = read()
        selector = DataMask(**fit_partial(settings, config, data), progress=progress)
        lamb, seed = config.lamb, config.seed
    else:
        cls = selector_class(method)
        common = {"seed": settings.get("seed", BASELINE_SEED),
                  "lamb": settings.get("lamb", DEFAULTS.lamb)}
        selector = cls(**baseline_options(cls, {key: value for key, value in settings.items()
                                                if key not in common}, common))
        lamb, seed = check_field(LearnerConfig, "lamb", common["lamb"]), common["seed"]
        data = read()
    return run_selection(selector, data, select_ratio, report=Report(
        data, select_ratio, lamb, seed=seed, budget_flops=REPORT_FLOPS, progress=progress)
        if report else None)


def learner_config(params: dict, select_ratio: float) -> LearnerConfig:
    """The learner's settings from those given (`params`, by field name), checked."""
    if "min_lr" in params and params.get("lr_schedule", DEFAULTS.lr_schedule) == "constant":
        raise UserError("--min_lr has no effect with --lr_schedule constant (the default): add "
                        "--lr_schedule linear for the original train_mask.py's decay, or drop it")
    return build(LearnerConfig, dict(params, select_ratio=select_ratio), "datamask select")


def fit_partial(params: dict, config: LearnerConfig, data: Dataset) -> dict:
    """The learner's params with --partial, when not given, fitted to `data` (the default fits
    large inputs; where a step's masks would hold 1 row it is raised, and said on stderr)."""
    if "partial" in params:
        return params
    partial = fitting_partial(config, data.quality)
    if partial == config.partial:
        return params
    print(f"datamask: --partial {partial:.3g}, not the default {config.partial:g}: at "
          f"{len(data)} rows a step's masks would hold 1 row (give --partial to choose)",
          file=sys.stderr)
    return {**params, "partial": partial}


def baseline_options(cls: type[Selector], given: dict, common: dict) -> dict:
    """The options baseline `cls` is given: each of `given` (an error if it takes none of that
    name), and each of `common` (COMMON_BASELINE_OPTIONS) that it takes."""
    accepted = {field.name for field in dataclasses.fields(cls.Options)}
    unknown = sorted(set(given) - accepted)
    if unknown:
        raise UserError(f"baseline {cls.name} takes no {', '.join('--' + key for key in unknown)}")
    return {**given, **{key: value for key, value in common.items() if key in accepted}}


def run_selection(selector: Selector, data: Dataset, select_ratio: float, *,
                  report: Report | None = None, stratify: str | None = None,
                  strata: np.ndarray | None = None, per_stratum=None) -> Selection:
    """Select (within each stratum of `strata`, the values of the column `stratify`), then
    score the selection on the whole input with `report`; nothing is written."""
    if stratify:
        from .stratify import select_stratified

        selection = select_stratified(selector, data, strata, select_ratio, stratify,
                                      per_stratum=per_stratum)
    else:
        selection = selector.select(data, select_ratio)
    if report:
        selection.metrics = report.scored(selection.selected)
    return selection


def _arrays_table(ids, quality, embeddings) -> pa.Table:
    """The three arrays as the columns of one table, which the checks of a file's columns then
    read; what only arrays can get wrong (their shapes) is refused here, naming the argument."""
    arrays = {}
    for name, values, dims in zip(ARRAY_COLUMNS, (ids, quality, embeddings), (1, 1, 2)):
        try:
            arrays[name] = np.asarray(values)
        except (ValueError, TypeError) as err:  # ragged rows, a tensor on a GPU
            raise UserError(f"{ARRAYS}: {name} is not an array of numbers ({quoted(err)})") from None
        if arrays[name].ndim != dims:
            shape = "N x d, one row of numbers per id" if dims == 2 else "N, one value per id"
            raise UserError(f"{ARRAYS}: {name} must be {dims}-d ({shape}), got an array of "
                            f"shape {arrays[name].shape}")
    lengths = {name: len(values) for name, values in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise UserError(f"{ARRAYS}: ids, quality and embeddings must have one row per id, got "
                        f"{', '.join(f'{n} {name}' for name, n in lengths.items())}")
    matrix = np.ascontiguousarray(arrays.pop("embeddings"))
    try:
        columns = {name: pa.array(values) for name, values in arrays.items()}
        columns["embeddings"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)),
                                                                  matrix.shape[1])
    except (pa.ArrowException, TypeError) as err:  # mixed objects
        raise UserError(f"{ARRAYS}: the arrays are not numbers ({quoted(err)})") from None
    return pa.table(columns)


def _as_arrow(table) -> pa.Table:
    """The table as a pyarrow Table (without a copy where its columns are Arrow already)."""
    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    datasets = sys.modules.get("datasets")  # loaded where the caller holds a Dataset
    if datasets is not None and isinstance(table, datasets.Dataset):
        return table.with_format("arrow")[:]
    if hasattr(table, "__arrow_c_stream__"):  # pandas, polars, DuckDB
        try:
            return pa.table(table)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise UserError(f"{TABLE}: the table cannot be read as Arrow ({quoted(err)})") from None
    raise UserError(f"{TABLE}: takes a pyarrow Table, a pandas DataFrame, a datasets.Dataset or "
                    f"another table with the Arrow stream interface, got {type(table).__name__}")

"""`datamask.select` and `datamask.select_table`: the CLI's selection and record on the same rows
and seed, from numpy arrays, pandas, Arrow and `datasets`; the CLI's refusals, before any work."""

import json
import re
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datamask
import datamask.api
from datamask.cli import main
from datamask.data import read_dataset
from datamask.errors import UserError
from datamask.examples.synthetic import synthetic_dataset
from conftest import write_shard

ROOT = Path(__file__).resolve().parent.parent
LEARNER = {"algorithm": "DiSF", "n_epochs": 12, "seed": 3, "lamb": 0.4}
# what differs between two runs of one selection: the time, and where the CLI wrote it
UNEQUAL = ("wall_time_s", "output")


@pytest.fixture(scope="module")
def rows():
    return synthetic_dataset(240, dim=6, n_clusters=4, seed=1)


def record(summary: dict) -> dict:
    return {key: value for key, value in summary.items() if key not in UNEQUAL}


def run_cli(tmp_path, capsys, data, *command) -> tuple[pa.Table, dict]:
    """`datamask COMMAND` on `data` written as a shard: its output table and printed record."""
    shard = write_shard(tmp_path / "in.parquet", data)
    out = tmp_path / "out.parquet"
    assert main([*command, "--input", str(shard), "--output", str(out),
                 "--select_ratio", "0.1"]) == 0
    return pq.read_table(out), json.loads(capsys.readouterr().out)


def flags(settings: dict) -> list[str]:
    return [part for key, value in settings.items() for part in (f"--{key}", str(value))]


def test_the_learner_on_arrays_is_the_cli_selection(tmp_path, capsys, rows):
    table, summary = run_cli(tmp_path, capsys, rows, "select", "--no_progress", *flags(LEARNER))
    result = datamask.select(rows.ids, rows.quality, rows.features, 0.1, **LEARNER)
    np.testing.assert_array_equal(result.ids, table.column("chunk_id").to_numpy())
    np.testing.assert_array_equal(result.selected, table.column("selected").to_numpy())
    np.testing.assert_array_equal(result.score, table.column("score").to_numpy())
    assert record(result.summary()) == record(summary) and summary["steps_run"] == 12
    np.testing.assert_array_equal(result.selected_ids, rows.ids[result.selected])


def test_a_baseline_by_name_is_the_cli_baseline(tmp_path, capsys, rows):
    table, summary = run_cli(tmp_path, capsys, rows, "baseline", "facility-greedy", "--lamb",
                             "0.3", "--report")
    result = datamask.select(rows.ids, rows.quality, rows.features, 0.1,
                             method="facility-greedy", lamb=0.3, report=True)
    np.testing.assert_array_equal(result.selected, table.column("selected").to_numpy())
    assert result.method == "facility-greedy" and "objective_bound" in summary
    assert record(result.summary()) == record(summary)  # the report's metrics included


def frames(data):
    """The same rows as each kind of table select_table takes, and their id column's name."""
    embeddings = list(data.features.astype(np.float64))
    frame = pd.DataFrame({"doc": data.ids, "q": data.quality, "emb": embeddings})
    arrow = pa.table({"doc": data.ids, "q": data.quality,
                      "emb": pa.FixedSizeListArray.from_arrays(pa.array(data.features.ravel()),
                                                               data.dim)})
    # a datasets.Dataset whose rows are a selection of its table, in the order shown
    order = np.random.default_rng(0).permutation(len(data))
    shuffled = datasets.Dataset.from_pandas(frame.iloc[order]).select(np.argsort(order))
    return {"pandas": frame, "pandas index": frame.set_index("doc"), "arrow": arrow,
            "record batch": arrow.to_batches()[0], "datasets": shuffled}


@pytest.mark.parametrize("kind", ["pandas", "pandas index", "arrow", "record batch", "datasets"])
def test_each_kind_of_table_selects_the_rows_the_arrays_do(rows, kind):
    table = frames(rows)[kind]
    result = datamask.select_table(table, 0.1, id_column="doc", quality_column="q",
                                   feature_column="emb", **LEARNER)
    arrays = datamask.select(rows.ids, rows.quality, rows.features, 0.1, **LEARNER)
    np.testing.assert_array_equal(result.ids, rows.ids)
    np.testing.assert_array_equal(result.selected, arrays.selected)
    assert record(result.summary()) == record(arrays.summary())


def test_a_uint64_id_keeps_its_value(rows):
    ids = rows.ids.astype(np.uint64) + np.uint64(2**63)
    result = datamask.select(ids, rows.quality, rows.features, 0.1, method="quality-topk")
    assert result.ids.dtype == np.uint64 and set(result.selected_ids) <= set(ids)


def bad(data, **change):
    arrays = {"ids": data.ids.copy(), "quality": data.quality.copy(),
              "embeddings": data.features.copy()}
    for name, edit in change.items():
        arrays[name] = edit(arrays[name])
    return arrays


def put(array, row, value):
    array[row] = value
    return array


REFUSED = [
    ({"ids": lambda a: a[:-1]}, {}, "ids, quality and embeddings must have one row per id, got "
                                    "239 ids, 240 quality, 240 embeddings"),
    ({"quality": lambda a: put(a, 7, np.nan)}, {},
     "datamask.select: quality column 'quality' is NaN, inf or null at row 7"),
    ({"embeddings": lambda a: put(a, 5, np.inf)}, {},
     "datamask.select: column 'embeddings' has NaN or inf at row 5"),
    ({"ids": lambda a: put(a, 9, a[2])}, {}, "duplicate id .* in column 'ids' \\(in "
                                             "datamask.select\\)"),
    ({"embeddings": lambda a: a[:, 0]}, {}, "embeddings must be 2-d .*shape \\(240,\\)"),
    ({"quality": lambda a: a[:, None]}, {}, "quality must be 1-d"),
    ({"ids": lambda a: a.astype(str)}, {}, "id column 'ids' must be integer, found string"),
    ({}, {"select_ratio": 0}, "--select_ratio must lie strictly between 0 and 1, got 0"),
    ({}, {"select_ratio": 1.5}, "--select_ratio must lie strictly between 0 and 1"),
    ({}, {"lamb": 2}, "--lamb must lie in \\[0, 1\\], got 2"),
    ({}, {"n_epoch": 5}, "datamask select takes no --n_epoch"),
    ({}, {"min_lr": 0.1}, "--min_lr has no effect with --lr_schedule constant"),
    ({}, {"method": "nope"}, "unknown selector 'nope'"),
    ({}, {"method": "quality-topk", "neighbours": 3}, "baseline quality-topk takes no "
                                                      "--neighbours"),
    ({}, {"method": "random", "lamb": -1}, "--lamb must lie in \\[0, 1\\], got -1"),
]


@pytest.mark.parametrize("change,settings,message", REFUSED)
def test_bad_input_is_one_user_error_before_any_work(monkeypatch, rows, change, settings,
                                                     message):
    def started(*args, **kwargs):
        raise AssertionError("a selection started")

    monkeypatch.setattr(datamask.api, "run_selection", started)
    with pytest.raises(UserError, match=message):
        datamask.select(**bad(rows, **change), **{"select_ratio": 0.1, **settings})


@pytest.mark.parametrize("column,edit", [
    ("q", lambda t: t.set_column(1, "q", pa.array([None] + [0.5] * (len(t) - 1), pa.float64()))),
    ("emb", lambda t: t.set_column(2, "emb", pa.array([[1.0, 2.0]] * (len(t) - 1) + [[1.0]]))),
    ("doc", lambda t: t.set_column(0, "doc", pa.array([1] * len(t)))),
    ("q", lambda t: t.drop_columns(["q"])),
])
def test_a_table_is_refused_in_the_words_a_file_is(tmp_path, rows, column, edit):
    """The same check, with the table named where the file would be."""
    table = edit(frames(rows)["arrow"].cast(pa.schema([("doc", pa.int64()), ("q", pa.float64()),
                                                       ("emb", pa.list_(pa.float64()))])))
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    with pytest.raises(UserError) as from_file:
        read_dataset([path], "doc", "q", "emb")
    with pytest.raises(UserError) as from_table:
        datamask.select_table(table, id_column="doc", quality_column="q", feature_column="emb")
    expected = str(from_file.value).replace(str(path), "datamask.select_table")
    assert str(from_table.value) == expected.replace("the file has", "the table has")
    assert f"'{column}'" in expected


def test_what_is_not_a_table_is_named():
    with pytest.raises(UserError, match="select_table: takes a pyarrow Table, .* got list"):
        datamask.select_table([[1, 0.5, [1.0]]])


def test_the_core_selects_without_pandas_or_datasets(rows):
    """Neither is imported by the core: with both unimportable, arrays and Arrow tables work."""
    code = (
        "import sys\n"
        "class Absent:  # finds pandas and datasets nowhere, as where they are not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pandas', 'datasets'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "import numpy as np, pyarrow as pa, datamask\n"
        "ids, q = np.arange(50), np.linspace(0, 1, 50)\n"
        "e = np.random.default_rng(0).standard_normal((50, 4))\n"
        "a = datamask.select(ids, q, e, 0.2, method='quality-topk')\n"
        "t = pa.table({'chunk_id': ids, 'quality_score': q, 'feature_arr': list(e)})\n"
        "b = datamask.select_table(t, 0.2, method='quality-topk')\n"
        "print(int(a.selected.sum()), (a.selected == b.selected).all(),\n"
        "      any(name in sys.modules for name in ('pandas', 'datasets')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["10", "True", "False"]


def test_import_datamask_imports_no_torch():
    """The API is loaded on first use: a pipeline stage that imports datamask.data never trains."""
    done = subprocess.run([sys.executable, "-c", "import sys, datamask, datamask.data; "
                           "before = 'torch' in sys.modules; datamask.select; "
                           "print(before, 'torch' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"datamask {datamask.__version__}\n"


def library_example() -> str:
    """The runnable example of docs/library.md: its first python block under "## From Python"."""
    page = (ROOT / "docs" / "library.md").read_text()
    section = page.split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_library_page_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(library_example(), "docs/library.md", "exec"), namespace)
    result = namespace["result"]
    assert isinstance(result, datamask.Selection) and result.selected.sum() == 100

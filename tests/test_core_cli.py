"""The command line end to end on generated Parquet, and the data contract's errors."""

import argparse
import json
import os
import re
import stat
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.cli import main
from datamask.data import read_dataset, write_dataset
from datamask.errors import UserError
from datamask.examples.synthetic import synthetic_dataset
from datamask.learner import TRAIN_MASK_FLAGS, LearnerConfig
from datamask.options import fields_of


@pytest.fixture
def shard(tmp_path):
    data = synthetic_dataset(400, dim=8, n_clusters=5, seed=0)
    path = tmp_path / "in.parquet"
    write_dataset(path, data)
    return path, data


def test_select_end_to_end(tmp_path, shard, capsys):
    path, data = shard
    out = tmp_path / "out.parquet"
    code = main(["select", "--input", str(path), "--output", str(out), "--algorithm", "DiSF",
                 "--select_ratio", "0.1", "--n_epochs", "30", "--no_progress", "--report"])
    assert code == 0
    table = pq.read_table(out)
    assert table.schema.names == ["chunk_id", "selected", "score"]
    assert table.schema.field("selected").type == pa.bool_()
    np.testing.assert_array_equal(table.column("chunk_id").to_numpy(), data.ids)  # input order
    assert table.column("selected").to_numpy().sum() == 40
    summary = json.loads(capsys.readouterr().out)
    assert summary["selected"] == 40 and set(summary["metrics"]) >= {"quality", "joint_DiSF"}
    assert not list(tmp_path.glob(".*.tmp"))
    # DiSF has no bound; the report certifies each joint that has one
    assert summary["objective_bound"] is None and summary["share_above_random_written"] is None
    assert summary["no_bound_reason"].startswith("no bound: DiSF")
    metrics = summary["metrics"]
    assert metrics["joint_DiSF_bound"] is None
    assert metrics["joint_DiSF_no_bound_reason"].startswith("no bound: DiSF")
    for name in ("Facility", "Pair_simi"):
        assert metrics[f"joint_{name}_no_bound_reason"] is None
        assert metrics[f"joint_{name}_random"] <= metrics[f"joint_{name}_bound"]
        assert metrics[f"joint_{name}_bound"] >= metrics[f"joint_{name}"] - 1e-5
        share = (metrics[f"joint_{name}"] - metrics[f"joint_{name}_random"]) / (
            metrics[f"joint_{name}_bound"] - metrics[f"joint_{name}_random"])
        assert metrics[f"joint_{name}_share_above_random"] == pytest.approx(share, abs=1e-5)



def test_the_report_below_its_budget_is_exact_and_past_it_estimates_and_says_so(
        tmp_path, shard, capsys, monkeypatch):
    """Below the budget --report is the exact report, value for value; past it (the budget made
    tiny here) Facility is the coverage of a seeded sample of the rows and the other metrics'
    term scales come from their first draw of masks, the output and the progress lines say so."""
    import torch

    import datamask.report as report
    from datamask.objectives import Joint, TermScale, diversity

    path, data = shard
    selected = np.zeros(len(data), bool)
    selected[::10] = True  # 40 of 400, the budget at ratio 0.1
    exact = report.Report(data, 0.1, 0.5)
    exact_values = {**exact(selected), **exact.certificates(selected)}
    assert report.Report(data, 0.1, 0.5, budget_flops=report.REPORT_FLOPS).scored(
        selected) == exact_values
    monkeypatch.setattr(report, "REPORT_FLOPS", 1e5)
    monkeypatch.setattr(report, "SMALLEST_SAMPLE", 50)
    out = tmp_path / "out.parquet"
    capsys.readouterr()
    assert main(["baseline", "random", "--input", str(path), "--output", str(out),
                 "--select_ratio", "0.1", "--report"]) == 0
    printed = capsys.readouterr()
    chosen = pq.read_table(out).column("selected").to_numpy()
    metrics = json.loads(printed.out)["metrics"]
    assert metrics["report_estimates"] == {
        "Pair_simi": "term scale on a sample of 32 of the 256 random masks",
        "Facility": "on a sample of 50 rows: the coverage of 50 of the 400 rows, drawn with seed 0",
        "DiSF": "term scale on a sample of 32 of the 256 random masks"}
    lines = printed.err.splitlines()
    assert [line.split(" (")[0] for line in lines[:9]] == [
        f"datamask: report {i}/9: {name} {part}" for i, (name, part) in enumerate(
            ((n, p) for n in ("Pair_simi", "Facility", "DiSF")
             for p in ("term scale", "value", "bound")), 1)]
    assert "datamask: report: Facility on a sample of 50 rows" in printed.err
    alone = {**exact(chosen), **exact.certificates(chosen)}
    assert metrics["quality"] == alone["quality"] and metrics["DiSF"] == alone["DiSF"]
    scale = TermScale.scored(exact.ground, 40, diversity("DiSF"), 0, n_grounds=1)
    assert metrics["joint_DiSF"] == pytest.approx(Joint(diversity("DiSF"), 0.5, scale).combine(
        alone["quality"], alone["DiSF"]), rel=1e-5)
    assert scale != exact.joint("DiSF").scale
    unit = data.features / np.linalg.norm(data.features, axis=1, keepdims=True)
    cover = torch.randperm(400, generator=torch.Generator().manual_seed(0))[:50].numpy()
    coverage = (unit[cover] @ unit[chosen].T).clip(0).max(axis=1).mean()
    assert metrics["Facility"] == pytest.approx(coverage, rel=1e-5)
    assert metrics["Facility"] != alone["Facility"]
    assert metrics["joint_Facility_bound"] >= metrics["joint_Facility"] - 1e-5

def test_train_mask_module_takes_the_original_flags(tmp_path, shard):
    path, data = shard
    out = tmp_path / "out.parquet"
    log = tmp_path / "log.jsonl"
    subprocess.run([sys.executable, "-m", "datamask.train_mask", "--input", str(path),
                    "--output", str(out), "--device", "cpu", "--n_epochs", "12",
                    "--algorithm", "Facility", "--partial", "0.5", "--max_lr", "5",
                    "--min_lr", "0.5", "--n_rollout", "32", "--select_ratio", "0.2",
                    "--init", "quality", "--lamb", "0.3", "--log_jsonl", str(log),
                    "--no_progress"], check=True, capture_output=True)
    assert pq.read_table(out).column("selected").to_numpy().sum() == 80
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(12))
    # the original's linear decay, although `datamask select` defaults to a constant rate
    assert records[0]["lr"] == 5 and records[-1]["lr"] == pytest.approx(0.5)
    shown = subprocess.run([sys.executable, "-m", "datamask.train_mask", "--help"], check=True,
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    for flag, default in (("lr_schedule", "linear"), ("init", "same"), ("stop_every", "0"),
                          ("probes", "0")):  # its help shows the defaults it runs
        entry = re.search(rf"^  --{flag} .*?\(default:\s+(\S+?)\)", shown.stdout, re.M | re.S)
        assert entry.group(1) == default, flag


def test_several_inputs_and_variable_length_lists(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for part in range(2):
        ids = np.arange(part * 50, part * 50 + 50)
        table = pa.table({"doc": ids, "q": rng.random(50),
                          "emb": pa.array([list(v) for v in rng.random((50, 4))])})
        paths.append(tmp_path / f"part{part}.parquet")
        pq.write_table(table, paths[-1])
    data = read_dataset(paths, "doc", "q", "emb")
    assert data.features.shape == (100, 4) and data.features.flags.c_contiguous
    np.testing.assert_array_equal(data.ids, np.arange(100))
    out = tmp_path / "out.parquet"
    assert main(["baseline", "quality-topk", "--input", *map(str, paths), "--output", str(out),
                 "--id_column", "doc", "--quality_column", "q", "--feature_column", "emb"]) == 0
    assert pq.read_table(out).column_names == ["doc", "selected", "score"]


def test_the_original_flags_are_flags_of_the_learner_grouped_apart(capsys):
    flags = {f.name for f, _ in fields_of(LearnerConfig) if f.metadata["flag"]}
    assert set(TRAIN_MASK_FLAGS) <= flags
    with pytest.raises(SystemExit):
        main(["select", "--help"])
    text = capsys.readouterr().out
    original = text.split("learner (names of the original train_mask.py):")[1].split(
        "learner (added by this project):")[0]
    assert set(re.findall(r"^  --(\w+)", original, re.M)) == set(TRAIN_MASK_FLAGS)


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["select", "--help"])
    text = capsys.readouterr().out
    for flag in ("--input", "--output", "--device", "--n_epochs", "--algorithm", "--partial",
                 "--max_lr", "--min_lr", "--n_rollout", "--select_ratio", "--init", "--lamb",
                 "--seed", "--prune_ratio", "--lr_schedule", "--logprob", "--readoff", "--log_jsonl",
                 "--scale_on"):
        assert flag in text


def _write(tmp_path, name, **columns):
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize("make_input,message", [
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], feature_arr=[[0.0], [1.0]]),
     "missing column 'quality_score'"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0, 1.0], [1.0]]), "inconsistent length.*row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0], [float("nan")]]), "NaN or inf at row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 2], quality_score=[0.1, float("nan")],
                      feature_arr=[[0.0], [1.0]]), "quality column 'quality_score'.*row 1"),
    (lambda t: _write(t, "a.parquet", chunk_id=[1, 1], quality_score=[0.1, 0.2],
                      feature_arr=[[0.0], [1.0]]), "duplicate id 1"),
    (lambda t: (t / "b.txt").write_text("not parquet") and t / "b.txt", "not a readable Parquet"),
])
def test_bad_input_is_named_and_writes_nothing(tmp_path, capsys, make_input, message):
    path = make_input(tmp_path)
    out = tmp_path / "out.parquet"
    code = main(["select", "--input", str(path), "--output", str(out), "--no_progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and re.search(message, err), err
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_duplicate_ids_across_files_are_refused(tmp_path, shard):
    path, _ = shard
    with pytest.raises(UserError, match="duplicate id .* and "):
        read_dataset([path, path])


def test_missing_output_folder_is_refused_before_work(tmp_path, shard, capsys):
    path, _ = shard
    assert main(["select", "--input", str(path), "--output", str(tmp_path / "no" / "o.parquet")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("flags,message", [
    (["--select_ratio", "0"], "--select_ratio must lie strictly between 0 and 1"),
    (["--select_ratio", "1"], "--select_ratio must lie strictly between 0 and 1"),
    (["--select_ratio", "0.001"], "selects zero rows"),
    (["--n_rollout", "1"], "--n_rollout must be at least 2"),
    (["--partial", "0"], r"--partial must lie in \(0, 1\]"),
    (["--partial", "1.2"], r"--partial must lie in \(0, 1\]"),
    (["--max_lr", "inf"], "--max_lr and --min_lr must be finite"),
    (["--lr_schedule", "linear", "--min_lr", "nan"], "--max_lr and --min_lr must be finite"),
    (["--min_lr", "0.5"], "--min_lr has no effect with --lr_schedule constant"),
    (["--algorithm", "Nope"], "argument --algorithm: invalid choice"),
    (["--checkpoint_every", "-1"], "--checkpoint_every must be 0 or more"),
])
def test_bad_flags_are_named_and_write_nothing(tmp_path, shard, capsys, flags, message):
    path, _ = shard
    out = tmp_path / "out.parquet"
    try:
        code = main(["select", "--input", str(path), "--output", str(out), "--no_progress", *flags])
    except SystemExit as exit_:  # argparse's own refusals (choices) exit 2 as well
        code = exit_.code
    assert code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.glob("out.parquet*"))


def test_baseline_no_progress_hides_the_reports_progress_lines_as_select_does(tmp_path, shard,
                                                                              capsys):
    """`datamask baseline --report` prints a line as each part of the report ends; with
    --no_progress, as on `select`, it prints none, and writes the same selection and metrics."""
    path, _ = shard
    printed = {}
    for flags in ([], ["--no_progress"]):
        out = tmp_path / f"out{len(flags)}.parquet"
        capsys.readouterr()
        assert main(["baseline", "random", "--input", str(path), "--output", str(out),
                     "--select_ratio", "0.1", "--report", *flags]) == 0
        done = capsys.readouterr()
        printed[bool(flags)] = (done.err, json.loads(done.out)["metrics"],
                                pq.read_table(out).column("selected").to_pylist())
    assert "datamask: report 1/9: Pair_simi term scale" in printed[False][0]
    assert "datamask: report" not in printed[True][0]
    assert printed[True][1:] == printed[False][1:]


def test_empty_file_and_unknown_baseline(tmp_path, shard, capsys):
    empty = _write(tmp_path, "empty.parquet", chunk_id=pa.array([], pa.int64()),
                   quality_score=pa.array([], pa.float32()),
                   feature_arr=pa.array([], pa.list_(pa.float32())))
    out = tmp_path / "out.parquet"
    assert main(["select", "--input", str(empty), "--output", str(out)]) == 2
    assert f"{empty}: the file has no rows" in capsys.readouterr().err
    path, _ = shard
    assert main(["baseline", "no-such", "--input", str(path), "--output", str(out)]) == 2
    assert "unknown selector 'no-such'" in capsys.readouterr().err
    assert not out.exists()


def test_feature_length_must_agree_across_files(tmp_path):
    a = _write(tmp_path, "a.parquet", chunk_id=[1], quality_score=[0.1], feature_arr=[[0.0, 1.0]])
    b = _write(tmp_path, "b.parquet", chunk_id=[2], quality_score=[0.1], feature_arr=[[0.0]])
    with pytest.raises(UserError, match=f"{b}: column 'feature_arr' has 1-d vectors at row 0"):
        read_dataset([a, b])


def test_outputs_get_the_umask_permissions(tmp_path, shard):
    """Outputs are created like any new file (mode 0666 less the umask), not mkstemp's 0600."""
    from reproduce.pipeline.common import atomic_folder

    path, _ = shard
    old = os.umask(0o022)
    try:
        out = tmp_path / "out.parquet"
        assert main(["baseline", "random", "--input", str(path), "--output", str(out)]) == 0
        with atomic_folder(tmp_path / "folder") as folder:
            (folder / "x").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o755


@pytest.mark.parametrize("flags,message", [
    (["random", "--lamb", "1.5", "--report"], r"--lamb must lie in \[0, 1\], got 1.5"),
    (["random", "--select_ratio", "1.5"], "--select_ratio must lie strictly between 0 and 1"),
    (["random", "--trade_off", "0.3"], "baseline random takes no --trade_off"),
    (["mmr", "--trade_off", "2"], r"--trade_off must lie in \[0, 1\]"),
    (["semdedup", "--eps", "0.1", "3"], r"--eps values must lie in \[0, 2\]"),
    (["datamask"], "datamask select"),
])
def test_every_baseline_flag_is_checked_before_any_output(tmp_path, shard, capsys, flags, message):
    path, _ = shard
    out = tmp_path / "out.parquet"
    assert main(["baseline", *flags, "--input", str(path), "--output", str(out)]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.glob(".out.parquet*"))


def test_no_selector_skips_the_budget_check():
    """`Selector.select` checks the count; every registered selector keeps it (the learner used
    to override it)."""
    from datamask.selectors import Selector, selector_class, selector_names

    for name in selector_names():
        assert selector_class(name).select is Selector.select, name


def test_options_are_typed_and_named(shard):
    from datamask.selectors import make_selector

    with pytest.raises(UserError, match="--neighbors must be a whole number, got 2.5"):
        make_selector("knn-density", neighbors=2.5)
    with pytest.raises(UserError, match="selector random takes no --lamb"):
        make_selector("random", lamb=0.5)
    assert make_selector("semdedup", eps=[0.1, 1]).options.eps == (0.1, 1.0)
    assert make_selector("datamask", max_lr=5).options.max_lr == 5.0


def test_baselines_declare_each_flag_with_one_type():
    """`datamask baseline` has one flag per option name: the baselines must agree on its type."""
    from datamask.cli import baseline_classes

    kinds = {}  # (type, list or not); None may be one baseline's default and not another's
    for name, cls in baseline_classes()[0].items():
        for field, kind in fields_of(cls.Options):
            assert kinds.setdefault(field.name, kind[:2]) == kind[:2], (name, field.name)


PLUGIN = '''
from dataclasses import dataclass

import numpy as np

from datamask.options import Range, option
from datamask.selectors import Selector


@dataclass
class LongestOptions:
    power: float = option(1.0, "rank rows by feature norm to this power", within=Range(0.0))


class Longest(Selector):
    """The k rows whose feature vectors are longest."""

    name = "longest"
    Options = LongestOptions

    def _select(self, data, k):
        score = np.linalg.norm(data.features, axis=1) ** self.options.power
        selected = np.zeros(len(data), dtype=bool)
        selected[np.argsort(-score, kind="stable")[:k]] = True
        return selected, score, []
'''


def _install_plugin(root, monkeypatch, entry: str) -> None:
    """A package on sys.path with the metadata pip writes: what `pip install` of a user's own
    selector package leaves behind, without touching the environment."""
    (root / "my_selectors.py").write_text(PLUGIN)
    info = root / "my_selectors-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-selectors\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[datamask.selectors]\n{entry}\n")
    monkeypatch.syspath_prepend(str(root))


def test_a_user_selector_plugs_in_through_its_entry_point(tmp_path, shard, monkeypatch, capsys):
    _install_plugin(tmp_path, monkeypatch, "longest = my_selectors:Longest")
    path, data = shard
    out = tmp_path / "out.parquet"
    assert main(["baseline", "longest", "--power", "2", "--input", str(path),
                 "--output", str(out)]) == 0
    chosen = pq.read_table(out).column("selected").to_numpy()
    norms = np.linalg.norm(data.features, axis=1)
    assert chosen.sum() == 40 and norms[chosen].min() >= norms[~chosen].max()
    capsys.readouterr()
    assert main(["baseline", "--list"]) == 0
    assert "longest            The k rows whose feature vectors are longest." in capsys.readouterr().out


def test_a_broken_plugin_is_named(tmp_path, shard, monkeypatch, capsys):
    _install_plugin(tmp_path, monkeypatch, "broken = my_selectors_missing:Nothing")
    path, _ = shard
    out = tmp_path / "out.parquet"
    assert main(["baseline", "broken", "--input", str(path), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "selector 'broken' (my_selectors_missing:Nothing) failed to import" in err
    assert main(["baseline", "random", "--input", str(path), "--output", str(out)]) == 0


def test_pipeline_is_a_subcommand_the_core_finds(capsys):
    from datamask.selectors import selector_names

    assert main(["pipeline", "methods"]) == 0
    assert capsys.readouterr().out.split() == selector_names()


def test_train_defaults_are_the_demo_config():
    """reproduce/pipeline/train.py's dataclass defaults and configs/demo.yaml say the same thing."""
    from reproduce.pipeline.train import ModelConfig, TrainConfig, load_config

    assert load_config("demo", {}) == (ModelConfig(), TrainConfig())


def test_the_downstream_configs_keep_the_budgets_their_comments_state():
    """Every shipped config loads, and the two downstream configs read the token budget their
    comments (and docs/downstream.md) give: max_steps x batch_size x (seq_len + 1)."""
    from pathlib import Path

    from reproduce.pipeline.train import load_config, token_budget

    for path in sorted((Path(__file__).parents[1] / "reproduce" / "pipeline" / "configs").glob("*.yaml")):
        load_config(path.stem, {})
    for name, tokens in (("downstream", 1_233_600), ("downstream-gpu", 8_208_000)):
        model, train = load_config(name, {})
        assert token_budget(model, train) == tokens



def _subparser(parser, name):
    """The subcommand parser `name` of `datamask`'s parser."""
    return next(action for action in parser._actions
                if isinstance(action, argparse._SubParsersAction)).choices[name]


def test_every_flag_help_is_short_and_speaks_of_the_product(monkeypatch):
    """Every flag's help of select (and of python -m datamask.train_mask, its defaults its own),
    baseline (every registered baseline's options), synth and demo passes tests/test_docs.py's
    check (three lines at 100 columns, no history), and each docs link reaches its heading."""
    from datamask.cli import baseline_classes, build_parser
    from datamask.selectors import selector_names
    from datamask.train_mask import ORIGINAL_DEFAULTS
    from test_docs import HELP_COLUMNS, ROOT, anchors, help_problems, rendered_help

    monkeypatch.setenv("COLUMNS", str(HELP_COLUMNS))
    classes, broken = baseline_classes()
    assert not broken and set(classes) | {"datamask"} >= set(selector_names())
    parser = build_parser()
    parsers = [("datamask", parser)] + [(f"datamask {command}", _subparser(parser, command))
                                        for command in ("select", "baseline", "synth", "demo")]
    parsers.append(("train_mask", _subparser(build_parser(ORIGINAL_DEFAULTS), "select")))
    assert [p for name, each in parsers for p in help_problems(name, each)] == []
    for name, each in parsers:
        for invocation, lines in rendered_help(each).items():
            for doc, anchor in re.findall(r"docs/([\w.-]+\.md)#([\w-]+)", " ".join(lines)):
                assert anchor in anchors(ROOT / "docs" / doc), (name, invocation, doc, anchor)


def baseline_help(capsys, *words: str) -> str:
    with pytest.raises(SystemExit) as done:
        main(["baseline", *words, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_a_named_baselines_help_lists_its_flags_and_no_other(capsys):
    """`datamask baseline mmr --help` shows mmr's --trade_off and none of knn-density's or
    semdedup's flags; without a name every baseline's flags are listed, each with its owners."""
    text = baseline_help(capsys, "mmr")
    assert "mmr's options" in text and "--trade_off" in text and "--device" in text
    for other in ("--neighbors", "--penalty", "--eps", "--n_clusters", "--picks_per_batch"):
        assert other not in text
    text = baseline_help(capsys, "knn-density")
    assert "--neighbors" in text and "--penalty" in text and "--trade_off" not in text
    text = baseline_help(capsys)
    assert all(flag in text for flag in ("--trade_off", "--neighbors", "--eps"))
    assert "mmr: " in text and "knn-density: " in text

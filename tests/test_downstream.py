"""The downstream orchestrator (reproduce/experiments/downstream.py) end to end on the small pool of
test_pool.py with a tiny model: both arms, the null and both dose series, the epochs budget, the
averaged checkpoints, the tables per arm and arms.md; a second invocation trains nothing again;
and the run plan's refusals (a kill mid-training and the proxy probe: test_downstream_alone.py)."""

import json
import re
import shutil
import sys
import time
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.errors import UserError
from reproduce.experiments import downstream
from reproduce.experiments.downstream import (epoch_steps, in_parallel, main, parse_draws,
                                              parse_methods, plan_runs, python)
from reproduce.experiments.downstream_report import STRATIFIED
from reproduce.pipeline.common import METHODS, Progress

TINY = ["hidden_size=32", "intermediate_size=64", "num_hidden_layers=1",
        "num_attention_heads=2", "num_key_value_heads=2", "seq_len=32", "batch_size=4",
        "warmup_steps=1", "average_last=2", "ema_decay=0.9"]
# The fixture's epochs budget: 62 steps of random's selection, enough for the two averaged
# checkpoints 3 steps apart; the assertions read which runs were trained and tabled, not how well.
EPOCHS = 0.1


@pytest.fixture(scope="module")
def run(pool, prepared, tmp_path_factory):
    out = tmp_path_factory.mktemp("downstream") / "run"
    argv = ["--pool", str(pool[0]), "--output", str(out), "--methods", "random", "quality-topk",
            "--junk", "0.5", "--dup", "0.5", "--seeds", "0", "1", "--config", "demo",
            "--select_ratio", "0.3", "--block_size", "0", "--vocab_size", "300",
            "--heldout_docs", "2", "--epochs", str(EPOCHS), "--jobs", "2", "--tasks",
            *[a for s in TINY for a in ("--set", s)]]  # the tasks: scored in the outside test
    assert main(argv) == 0
    return out, argv


def test_every_selection_of_both_arms_and_the_calibration_is_trained_and_tabled(run):
    out, _ = run
    record = json.loads((out / "downstream.json").read_text())
    labels = {"random", "quality-topk", "random@strat", "quality-topk@strat", "random-null",
              "junk-0.5", "dup-0.5"}
    assert set(record["runs"]) == labels
    assert {(r["method"], r["seed"]) for r in record["trained"]} == {
        (label, seed) for label in labels for seed in (0, 1)}
    hashes = {r["method"]: r["selection"] for r in record["trained"]}  # one per label
    assert len({(r["method"], r["selection"]) for r in record["trained"]}) == len(labels)
    assert hashes["random"].startswith("sha256:") and hashes["random"] != hashes["random-null"]
    free = json.loads((out / "tables" / "table2.json").read_text())
    assert set(free["methods"]) == labels - {"random@strat", "quality-topk@strat"}
    assert free["reference"] == "random" and "bpb macro (EMA)" in free["power"]
    assert set(free["verdict"]["calibration"]["smallest_resolved"]) == {"junk", "dup"}
    assert free["snr"]["bpb macro"]["noise_from"] == ["random-null"]  # no 0.25 dose here
    stratified = json.loads((out / "tables-stratified" / "table2.json").read_text())
    assert set(stratified["methods"]) == {"random@strat", "quality-topk@strat"}
    assert stratified["reference"] == "random" + STRATIFIED
    # the stratified arm is calibrated by the free arm's rows, not left without a control
    lines = stratified["verdict"]["lines"]
    assert lines[0].startswith("Calibration: this arm has no calibration rows of its own; its "
                               "calibration is the free arm's rows (against random; same proxy, "
                               "same seeds)")
    assert lines[1] == free["verdict"]["lines"][0] and "random-null - random" in lines[1]
    assert not any(line.startswith("Power:") for line in lines)
    arms = (out / "arms.md").read_text()
    assert "| quality-topk |" in arms and "random-null" not in arms and "junk-0.5" not in arms
    for name in ("forest", "dose-response"):
        assert (out / "figures" / f"{name}.png").is_file()


def test_the_epochs_budget_is_read_off_randoms_tokens_and_is_the_same_for_all(run):
    out, _ = run
    tokens = json.loads((out / "tokens" / "random" / "summary.json").read_text())["tokens"]
    steps = epoch_steps(tokens, EPOCHS, 4, 32)
    summaries = [json.loads(p.read_text()) for p in (out / "train").glob("*/seed*/summary.json")]
    assert len(summaries) == 14
    assert {s["train"]["max_steps"] for s in summaries} == {steps}
    assert {s["train"]["average_every"] for s in summaries} == {max(1, steps // 20)}


def test_a_second_invocation_trains_nothing_again_and_ends_on_the_verdict(run, capsys):
    out, argv = run
    stamps = {p: p.stat().st_mtime_ns for p in [*(out / "train").glob("*/seed*/summary.json"),
                                               *(out / "select").glob("*/summary.json")]}
    capsys.readouterr()
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    printed = capsys.readouterr().out
    last = printed.splitlines()[-40:]
    free = json.loads((out / "tables" / "table2.json").read_text())["verdict"]
    # the null and each series' smallest resolved dose, each method in both arms with arms.md's
    # reading, the paper's ordering, and where the full tables and figures are
    text = " ".join(" ".join(last).split())  # list items are wrapped at 100 columns
    for line in free["lines"]:
        if line.startswith("Calibration:"):
            assert f"- {line}" in text
    row = next(line for line in last if line.startswith("| quality-topk |"))
    assert row.count("±") == 2 and row.endswith(f"{arms_reading(out, 'quality-topk')} |")
    assert any(line.startswith("| method | free arm | stratified arm | the difference is |")
               for line in last)
    assert "its calibration is the free arm's rows" in text
    for path in (out / "tables" / "table2.md", out / "tables-stratified" / "table2.md",
                 out / "figures" / "forest.png", out / "figures" / "dose-response.png",
                 out / "arms.md"):
        assert any(line.startswith(f"- {path}:") for line in last)
    verdict = (out / "verdict.md").read_text().splitlines()
    assert len(verdict) <= 40 and printed.splitlines()[-len(verdict):] == verdict
    assert "Bits per byte on the held-out domains" not in printed  # the tables stay in files


def test_a_target_outside_the_pool_scores_every_run_again_without_training(run, tmp_path):
    """Given --outside later, a finished run evaluates each checkpoint again (its scores lacked
    the target) and trains nothing; the tables gain the target's columns, and the BBC tasks'
    (the runs were scored without them, `--tasks` alone)."""
    out, argv = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    target = tmp_path / "outside"
    target.mkdir()
    pool_dir = argv[argv.index("--pool") + 1]
    for name in ("books", "docs"):  # held-out text stands in for the fetched sources here
        texts = pq.read_table(f"{pool_dir}/heldout/{name}.parquet").column("text").to_pylist()
        pq.write_table(pa.table({"text": texts[:2]}), target / f"other-{name}.parquet")
    (target / "outside.json").write_text("{}")
    trained = {p: p.stat().st_mtime_ns for p in (copy / "train").glob("*/seed*/summary.json")}
    # the free arm's two methods at seed 0 only, scored one after the other (one stage worker
    # importing torch, transformers and lm-eval, not two), to keep the test short: the other runs
    # stay as they were
    argv = [copy if a == str(out) else a for a in argv] + ["--arms", "free", "--no_null",
                                                           "--junk", "--dup", "--seeds", "0",
                                                           "--jobs", "1"]
    argv = [str(a) for a in argv if a != "--tasks"]
    assert main([*argv, "--outside", str(target)]) == 0  # the default tasks this time
    assert {p: p.stat().st_mtime_ns for p in trained} == trained
    scores = {p.stem: json.loads(p.read_text()) for p in (copy / "eval").glob("*.json")}
    again = {f"{m}.seed0" for m in ("random", "quality-topk")}
    assert all(set(scores[k]["outside"]) == {"folder", "bpb", "bpb_ema"}
               and set(scores[k]["results"]) == {"bbc_cloze", "bbc_headline"} for k in again)
    assert not any("outside" in v or "results" in v for k, v in scores.items() if k not in again)
    table = json.loads((copy / "tables" / "table2.json").read_text())
    assert {"bpb outside macro (EMA)", "bpb outside other-books", "BBC-Cloze"} <= set(
        table["power"])
    (target / "outside.json").unlink()
    assert main([*argv, "--outside", str(target)]) != 0  # not a built target: refused


def test_a_run_scored_in_its_training_process_scores_as_evaluate_alone(run, tmp_path):
    """Each run trains and is scored in one process (`train ... + evaluate ...`); `evaluate`
    alone on the same checkpoint writes the same bits per byte."""
    out, argv = run
    pool_dir = argv[argv.index("--pool") + 1]
    python("reproduce", "evaluate", "--checkpoints", str(out / "train" / "random" / "seed0"),
           "--heldout", f"{pool_dir}/heldout", "--heldout_docs", "2", "--output", str(tmp_path))
    alone = json.loads((tmp_path / "random.seed0.json").read_text())
    chained = json.loads((out / "eval" / "random.seed0.json").read_text())
    scores = {k for k in chained if k.startswith("bpb")}
    assert scores >= {"bpb", "bpb_ema", "bpb_last"}
    assert {k: alone[k] for k in scores} == {k: chained[k] for k in scores}


def arms_reading(out, method: str) -> str:
    """arms.md's last column for `method` (empty where the cell is: only the closing bar is cut,
    so an empty last cell is not read as the one before it)."""
    row = next(line for line in (out / "arms.md").read_text().splitlines()
               if line.startswith(f"| {method} |"))
    return row.rstrip().removesuffix("|").rsplit("|", 1)[1].strip()


def test_a_failing_stage_stops_the_runs_not_yet_started():
    """in_parallel: the first failure is raised and the queued tasks never start (without the
    cancel all 50 would run, 10 ms each, before the error came back)."""
    started = []

    def task(i):
        started.append(i)
        if i == 0:
            raise UserError("the first run fails")
        time.sleep(0.01)

    with pytest.raises(UserError, match="the first run fails"):
        in_parallel([partial(task, i) for i in range(50)], 1)
    assert started[0] == 0 and len(started) < 50


def test_a_stage_is_done_only_where_an_earlier_run_wrote_its_output_for_these_settings(tmp_path):
    """A selection of another spec, or of the other arm, is made again; a score file without the
    target outside the pool is scored again."""
    out = tmp_path / "select" / "random"
    select = partial(downstream.Select, pool=tmp_path, ratio=0.3, block_size=0, seed=0, output=out)
    assert not select(spec="random", stratify=False).finished()
    out.mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps({"method": "random"}))
    assert select(spec="random", stratify=False).finished()
    assert not select(spec="random:seed=1", stratify=False).finished()
    assert not select(spec="random", stratify=True).finished()
    scores = tmp_path / "eval" / "random.seed0.json"
    scores.parent.mkdir()
    scores.write_text(json.dumps({"bpb": 1.0}))
    evaluate = partial(downstream.Evaluate, checkpoint=tmp_path / "train" / "random" / "seed0",
                       pool=tmp_path, tasks=[], heldout_docs=None, output=scores)
    assert evaluate(outside=None).finished()
    assert not evaluate(outside=tmp_path / "outside").finished()
    assert evaluate(outside=None).argv()[-1] == str(scores.parent)

def test_epoch_steps_round_up_to_whole_windows():
    assert epoch_steps(1000, 1.0, 4, 24) == 10  # 1000 / (4 x 25) = 10
    assert epoch_steps(1001, 1.0, 4, 24) == 11
    assert epoch_steps(10, 0.01, 4, 24) == 1


def test_run_plan_labels_and_refusals():
    methods = parse_methods(["random", "quality-topk"])
    runs = plan_runs(methods, ["free", "stratified"], True, [0.1, 0.25], [0.5], select_seed=3)
    assert runs["random-null"] == {"spec": "random:seed=4", "stratify": False}
    assert runs["quality-topk@strat"] == {"spec": "quality-topk", "stratify": True}
    assert runs["junk-0.25"] == {"series": "junk", "dose": 0.25} and "dup-0.5" in runs
    assert set(plan_runs(methods, ["free"], False, [], [], 0)) == {"random", "quality-topk"}
    for args, message in (((["free", "bogus"], True, [], []), "--arms"),
                          ((["free"], True, [1.5], []), "--junk 1.5"),
                          ((["free"], True, [], [0.0]), "--dup 0.0")):
        with pytest.raises(UserError, match=message):
            plan_runs(methods, *args, 0)
    with pytest.raises(UserError, match="keep `random`"):
        plan_runs(parse_methods(["quality-topk"]), ["free"], True, [], [], 0)


def test_drawn_methods_select_again_with_the_next_seeds_and_random_draws_replace_the_null():
    methods = parse_methods(["random", "datamask-Pair_simi", "quality-topk"])
    draws = parse_draws(["random=3", "datamask-Pair_simi=2"], methods)
    runs = plan_runs(methods, ["free", "stratified"], True, [0.25], [], 5, draws)
    assert runs["random~1"] == {"spec": "random:seed=6", "stratify": False}
    assert runs["random~2@strat"] == {"spec": "random:seed=7", "stratify": True}
    assert runs["datamask-Pair_simi~1"]["spec"] == METHODS["datamask-Pair_simi"] + ",seed=6"
    assert "random~3" not in runs and "quality-topk~1" not in runs
    assert "random-null" not in runs and "junk-0.25" in runs  # the draws are the null now
    for bad in ("random=0", "random", "semdedup=2"):
        with pytest.raises(UserError, match=f"--draws {bad}"):
            parse_draws([bad], methods)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_bad_setting_is_refused_before_any_stage_runs(pool, tmp_path, capsys):
    out = tmp_path / "bad"
    for setting, message in (("bogus=1", "--set bogus: not a model or train setting"),
                             ("max_steps", "--set max_steps: expected KEY=VALUE")):
        assert main(["--pool", str(pool[0]), "--output", str(out), "--methods", "random",
                     "--set", setting]) == 2
        assert message in capsys.readouterr().err
        assert not (out / "select").exists()


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# (flag named in the error, the flags given): POOL and OUT stand for the pool and the run folder
BAD_FLAGS = [
    ("--jobs", ["--jobs", "0"]),
    ("--epochs", ["--epochs", "0"]),
    ("--epochs", ["--epochs", "-1"]),
    ("--seeds", ["--seeds", "0", "0"]),
    ("--seeds", ["--seeds", "-1"]),
    ("--select_ratio", ["--select_ratio", "1.5"]),
    ("--select_ratio", ["--select_ratio", "0"]),
    ("--vocab_size", ["--vocab_size", "1"]),
    ("--block_size", ["--block_size", "-1"]),
    ("--select_seed", ["--select_seed", "-1"]),
    ("--heldout_docs", ["--heldout_docs", "0"]),
    ("--output", ["--output", "POOL"]),
    ("--output", ["--output", "POOL/run"]),
    ("--output", ["--output", "POOL/.."]),
    ("--pool", ["--pool", "OUT/nowhere"]),
    ("--outside", ["--outside", "POOL/heldout"]),  # no outside.json
    ("--config", ["--config", "nowhere"]),
    ("--set", ["--set", "bogus=1"]),
    ("--tasks", ["--tasks", "bbc_cloze", "nowhere"]),
    ("--primary", ["--primary", "bpb nowhere"]),
    ("--primary", ["--primary", "bpb outside macro"]),  # no --outside
    ("--primary", ["--primary", "bpb macro (EMA)"]),  # the config keeps no EMA
    ("--methods", ["--methods", "bogus"]),
    ("--methods", ["--methods", "random", "mine=nowhere"]),
    ("--methods", ["--methods", "random", "mine=random:bogus=1"]),
    ("--methods", ["--methods", "quality-topk"]),  # the null is built from random's selection
    ("--draws", ["--draws", "random=0"]),
    ("--junk", ["--junk", "1.5"]),
    ("--dup", ["--dup", "0"]),
]


@pytest.mark.parametrize("flag, given", BAD_FLAGS, ids=[" ".join(g) for _, g in BAD_FLAGS])
def test_a_bad_flag_is_refused_in_one_line_before_anything_is_written(pool, tmp_path, capsys,
                                                                      flag, given):
    folder, out = pool[0], tmp_path / "run"
    given = [a.replace("POOL", str(folder)).replace("OUT", str(out)) for a in given]
    before = listing(folder.parent)
    argv = ["--pool", str(folder), "--output", str(out), "--methods", "random", *given]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and flag in err[0], err
    assert not out.exists() and listing(folder.parent) == before


def test_settings_refuse_a_bad_value_naming_its_flag_when_made():
    """Settings are checked when made, as the command line makes them: a range their field
    states, and the rules between values (distinct seeds, a vocabulary train_tokenizer trains)."""
    for given, message in (({"jobs": 0}, "--jobs must be at least 1, got 0"),
                           ({"epochs": 0}, "--epochs must lie strictly between 0 and inf"),
                           ({"heldout_docs": 0}, "--heldout_docs must be at least 1, got 0"),
                           ({"arms": ("free", "both")}, "--arms must be one of free, stratified"),
                           ({"seeds": (1, 1)}, "--seeds 1 1: must be distinct"),
                           ({"vocab_size": 1}, "--vocab_size must be from 300")):
        with pytest.raises(UserError, match=re.escape(message)):
            downstream.Settings(pool="pool", output="run", **given)


def test_the_makefiles_command_lines_make_the_settings_they_meant():
    """The demo's flags as the Makefile gives them (a flag alone for no doses and no tasks, --set
    repeated) and the defaults where a flag is left out."""
    from datamask.options import given

    argv = ["--pool", "p", "--output", "o", "--methods", "datamask-Pair_simi", "random",
            "--seeds", "0", "1", "--arms", "free", "--epochs", "4", "--set", "average_last=0",
            "--set", "ema_decay=0.9", "--primary", "bpb macro (EMA)", "--select_ratio", "0.25",
            "--heldout_docs", "10", "--junk", "0.5", "--dup", "--tasks"]
    demo, plain = (downstream.Settings(**given(downstream.settings_parser().parse_args(flags),
                                               downstream.Settings))
                   for flags in (argv, argv[:4]))
    assert (demo.methods, demo.seeds, demo.arms, demo.epochs, demo.set, demo.primary) == (
        ("datamask-Pair_simi", "random"), (0, 1), ("free",), 4.0,
        ("average_last=0", "ema_decay=0.9"), ("bpb macro (EMA)",))
    assert (demo.select_ratio, demo.heldout_docs, demo.junk, demo.dup, demo.tasks) == (
        0.25, 10, (0.5,), (), ())
    assert (plain.methods, plain.junk, plain.tasks, plain.set, plain.seeds, plain.select_ratio,
            plain.block_size, plain.vocab_size, plain.jobs, plain.outside) == (
        tuple(METHODS), (0.05, 0.1, 0.25, 0.5), ("bbc_cloze", "bbc_headline"), (), (0, 1, 2),
        0.1, 5000, 4096, 2, None)


def test_the_primaries_a_run_may_name_are_the_columns_its_tables_will_have():
    """Named by the tables' own code: the averaged variants where the config keeps them, the
    outside ones with a target outside the pool, a task's where it is lower-is-better."""
    from eval.tables import lower_is_better_columns

    assert lower_is_better_columns([], ["books", "news"], [], None) == [
        "bpb macro", "bpb books", "bpb news", "bpb prose"]
    assert lower_is_better_columns(["bbc_cloze", "bbc_heldout"], ["news"], ["bpb_ema"],
                                   ["gcide"]) == [
        "BBC bits/byte", "bpb macro", "bpb news", "bpb macro (EMA)", "bpb outside macro",
        "bpb outside gcide", "bpb outside macro (EMA)"]


def test_each_finished_item_says_the_count_done_and_the_time_left(monkeypatch, capsys):
    """An item an earlier run finished counts as done but not in the rate; the last line has
    no estimate."""
    clock = iter([100.0, 100.0, 110.0, 130.0, 400.0])
    monkeypatch.setattr("time.time", lambda: next(clock))
    progress = Progress("train+evaluate", 4)
    progress.tick("random seed 0", worked=False)
    for what in ("junk-0.5 seed 0", "random seed 1", "junk-0.5 seed 1"):
        progress.tick(what)
    assert capsys.readouterr().out.splitlines() == [
        "downstream: train+evaluate 1/4: random seed 0 (0 s in)",
        "downstream: train+evaluate 2/4: junk-0.5 seed 0 (10 s in; about 20 s left)",
        "downstream: train+evaluate 3/4: random seed 1 (30 s in; about 15 s left)",
        "downstream: train+evaluate 4/4: junk-0.5 seed 1 (300 s in)"]

"""Evaluation with power: bits per byte, the continuous multiple-choice metric, confidence
intervals, paired differences, the tables and the verdict rule, on small hand-checkable inputs."""

import json
import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from datamask.errors import UserError
from reproduce.pool.control import kept_fractions

TEXTS = {"news": ["The minister said the economy grew by two per cent last year.",
                  "Shares fell sharply on Monday after the bank's results."],
         "docs": ["Call open() with the path; it returns a file object. Close it when done, "
                  "or use a with block so that it closes even after an error."]}
SEQ_LEN = 8


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A randomly initialised 2-layer Llama with a 300-entry byte-level BPE tokenizer, saved the
    way the train stage saves one (model + tokenizer + summary.json with the training seq_len)."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from reproduce.pipeline.tokenize import EOS, train_tokenizer

    root = tmp_path_factory.mktemp("bpb")
    (root / "shard").mkdir()
    pq.write_table(pa.table({"text": [t for ts in TEXTS.values() for t in ts] * 3}),
                   root / "shard" / "0.parquet")
    train_tokenizer([str(root / "shard")], root / "tokenizer.json", vocab_size=300)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(root / "tokenizer.json"),
                                        eos_token=EOS, pad_token=EOS)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None))
    path = root / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "summary.json").write_text(json.dumps({"model": {"seq_len": SEQ_LEN},
                                                   "train": {"seed": 3}}))
    heldout = root / "heldout"
    heldout.mkdir()
    for domain, texts in TEXTS.items():
        pq.write_table(pa.table({"text": texts}), heldout / f"{domain}.parquet")
    return path, heldout, model.eval(), tokenizer


def hand_nll(model, tokenizer, text, seq_len):
    """-ln p of every text token, window by window, written out the slow obvious way."""
    sequence = [tokenizer.eos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
    total = 0.0
    for lo in range(0, len(sequence) - 1, seq_len):
        window = sequence[lo:lo + seq_len + 1]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([window[:-1]])).logits[0]
        logp = torch.log_softmax(logits.double(), dim=-1)
        total -= sum(logp[i, window[i + 1]].item() for i in range(len(window) - 1))
    return total


def test_bits_per_byte_equals_the_hand_computation_per_domain_and_macro(checkpoint):
    from eval.bpb import bits_per_byte

    path, heldout, model, tokenizer = checkpoint
    scores = bits_per_byte(path, heldout, batch_size=3, device="cpu")
    assert scores["seq_len"] == SEQ_LEN
    expected = {}
    for domain, texts in TEXTS.items():
        nats = sum(hand_nll(model, tokenizer, t, SEQ_LEN) for t in texts)
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        expected[domain] = nats / n_bytes / math.log(2)
        got = scores["domains"][domain]
        assert got["bytes"] == n_bytes and got["documents"] == len(texts)
        assert got["bits_per_byte"] == pytest.approx(expected[domain], rel=1e-5)
    assert scores["macro"] == pytest.approx(np.mean(list(expected.values())), rel=1e-5)


def test_one_window_covers_a_short_text_and_batching_does_not_change_it(checkpoint):
    from eval.bpb import bits_per_byte

    path, heldout, model, tokenizer = checkpoint
    whole = bits_per_byte(path, heldout, batch_size=1, device="cpu", seq_len=64)
    windowed = bits_per_byte(path, heldout, batch_size=1, device="cpu")
    single = sum(hand_nll(model, tokenizer, t, 64) for t in TEXTS["news"])
    assert whole["domains"]["news"]["nll_bits"] == pytest.approx(single / math.log(2), rel=1e-5)
    # the context length is applied: the training seq_len (8) cuts these texts into windows
    assert windowed["domains"]["news"]["nll_bits"] != whole["domains"]["news"]["nll_bits"]
    batched = bits_per_byte(path, heldout, batch_size=16, device="cpu")
    assert batched["macro"] == pytest.approx(windowed["macro"], rel=1e-6)
    first = bits_per_byte(path, heldout, batch_size=4, device="cpu", seq_len=64, max_docs=1)
    assert first["domains"]["news"]["nll_bits"] == pytest.approx(
        hand_nll(model, tokenizer, TEXTS["news"][0], 64) / math.log(2), rel=1e-5)


def test_windows_cover_every_target_once():
    from eval.bpb import windows

    lengths = np.array([5, 0, 8, 1])
    first, size = windows(lengths, 4)
    # documents laid out as [s]+5, [s], [s]+8, [s]+1 start at 0, 6, 7, 16
    assert first.tolist() == [0, 4, 7, 11, 16] and size.tolist() == [4, 1, 4, 4, 1]
    assert size.sum() == lengths.sum()


def test_heldout_errors_name_the_file_and_row(tmp_path):
    from eval.bpb import read_heldout

    with pytest.raises(UserError, match="no <domain>.parquet"):
        read_heldout(tmp_path)
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(UserError, match="a.parquet: no column 'text'"):
        read_heldout(tmp_path)
    pq.write_table(pa.table({"text": ["x", ""]}), tmp_path / "a.parquet")
    with pytest.raises(UserError, match="a.parquet: row 1"):
        read_heldout(tmp_path)
    with pytest.raises(UserError, match="--heldout_docs must be at least 1"):
        read_heldout(tmp_path, 0)


def test_correct_prob_norm_is_the_softmax_of_per_character_log_likelihoods():
    from eval.run import correct_prob_norm

    lls = np.array([-12.0, -6.0, -9.0])
    lengths = np.array([4.0, 2.0, 3.0])  # per character: -3, -3, -3: no choice preferred
    assert correct_prob_norm(lls, lengths, [1]) == pytest.approx(1 / 3)
    lls = np.array([-4.0, -2.0])
    lengths = np.array([2.0, 2.0])  # per character -2 and -1
    hand = math.exp(-1) / (math.exp(-2) + math.exp(-1))
    assert correct_prob_norm(lls, lengths, [1]) == pytest.approx(hand)
    assert correct_prob_norm(lls, lengths, [0, 1]) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def bbc_tasks(tmp_path_factory):
    from reproduce.pipeline.bbc import write_bbc_fineweb

    root = tmp_path_factory.mktemp("tasks")
    write_bbc_fineweb(root / "fineweb", root / "tasks", n_shards=1, limit=60, seed=1)
    return root / "tasks"


def test_the_continuous_metric_agrees_with_lm_evals_acc_norm_per_sample(checkpoint, bbc_tasks):
    import lm_eval

    from eval.run import sample_correct_prob, task_manager

    path = checkpoint[0]
    names = ["bbc_cloze", "bbc_headline"]
    manager = task_manager(str(bbc_tasks), names)
    tasks = manager.load(names)["tasks"]
    result = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": str(path)},
                                     tasks=names, task_manager=manager, batch_size=8, limit=5,
                                     device="cpu", log_samples=True)
    for name in names:
        for sample in result["samples"][name]:
            lls = np.array([r[0] for r in sample["filtered_resps"]])
            choices = tasks[name].doc_to_choice(sample["doc"])
            per_char = lls / np.array([len(c) for c in choices])
            p = sample_correct_prob(tasks[name], sample)
            assert 0 < p < 1
            # acc_norm picks the argmax of the same per-character score the softmax reads
            assert (p == pytest.approx(np.exp(per_char).max() / np.exp(per_char).sum())) \
                == bool(sample["acc_norm"])


def test_evaluate_writes_one_file_per_method_and_seed(checkpoint, bbc_tasks, tmp_path):
    from eval.run import EvaluateConfig, evaluate

    path, heldout = checkpoint[0], checkpoint[1]
    run = tmp_path / "train" / "quality-topk" / "seed4"
    run.parent.mkdir(parents=True)
    run.symlink_to(path)
    records = evaluate(EvaluateConfig(checkpoints=[path, run], tasks=["bbc_headline"],
                                      output=tmp_path / "eval", data_dir=bbc_tasks, batch_size=8,
                                      limit=3, heldout=heldout))
    assert sorted(p.name for p in (tmp_path / "eval").glob("*.json")) == \
        ["model.seed3.json", "quality-topk.seed4.json"]  # seed3: from summary.json's train.seed
    record = json.loads((tmp_path / "eval" / "quality-topk.seed4.json").read_text())
    assert record == records[1] and (record["method"], record["seed"]) == ("quality-topk", 4)
    assert 0 < record["continuous"]["bbc_headline"]["correct_prob_norm"] < 1
    assert record["continuous"]["bbc_headline"]["n"] == 3
    assert sorted(record["bpb"]["domains"]) == ["docs", "news"]
    assert record["bpb"]["macro"] == pytest.approx(records[0]["bpb"]["macro"])
    with pytest.raises(UserError, match="both method model, seed 3"):
        evaluate(EvaluateConfig(checkpoints=[path, path], output=tmp_path / "again",
                                heldout=heldout))
    with pytest.raises(UserError, match="give --tasks, --heldout or both"):
        evaluate(EvaluateConfig(checkpoints=[path], output=tmp_path / "again"))


def test_t_interval_equals_scipys():
    from scipy import stats

    from eval.stats import t_interval

    x = np.array([2.61, 2.58, 2.66, 2.60])
    got = t_interval(x)
    low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert (got["low"], got["high"]) == (pytest.approx(low), pytest.approx(high))
    assert got["sd"] == pytest.approx(x.std(ddof=1)) and got["n"] == 4
    assert t_interval([2.6])["half_width"] is None


def test_paired_difference_uses_shared_seeds_and_flags_resolution():
    from scipy import stats

    from eval.stats import paired_difference, resolvable_difference

    reference = {0: 2.60, 1: 2.70, 2: 2.65, 3: 9.99}
    shifted = {0: 2.50, 1: 2.61, 2: 2.54}  # 0.10, 0.09, 0.11 below on seeds 0-2
    d = paired_difference(shifted, reference)
    diffs = np.array([-0.10, -0.09, -0.11])
    assert d["seeds"] == [0, 1, 2] and d["mean"] == pytest.approx(diffs.mean())
    low, high = stats.t.interval(0.95, 2, loc=diffs.mean(), scale=stats.sem(diffs))
    assert (d["low"], d["high"]) == (pytest.approx(low), pytest.approx(high))
    assert d["resolved"] and d["high"] < 0
    assert d["half_width"] == pytest.approx(resolvable_difference(diffs.std(ddof=1), 3))
    # the same mean shift with a seed-to-seed spread larger than it is not resolved
    noisy = paired_difference({0: 2.40, 1: 2.75, 2: 2.50}, reference)
    assert noisy["mean"] == pytest.approx(-0.10) and not noisy["resolved"]
    assert not paired_difference({0: 2.5}, reference)["resolved"]  # one seed: no interval
    assert paired_difference({7: 2.5}, reference)["n"] == 0


def test_seeds_to_resolve_is_the_first_n_whose_interval_excludes_the_mean():
    from eval.stats import resolvable_difference, seeds_to_resolve

    # sweep point C's control - random: mean +0.0218, paired sd 0.0645 over 3 seeds
    n = seeds_to_resolve(0.0218, 0.0645)
    assert n == 37
    assert resolvable_difference(0.0645, n) < 0.0218 <= resolvable_difference(0.0645, n - 1)
    assert seeds_to_resolve(-0.0218, 0.0645) == n  # the sign does not matter
    assert seeds_to_resolve(0.2, 0.01) == 2 and seeds_to_resolve(0.0, 0.05) is None


def fabricated_record(method, seed, bpb, acc, prob):
    """A result file as evaluate writes one (inputs for the tables; not results of any run)."""
    return {"method": method, "seed": seed, "checkpoint": f"/nowhere/{method}/seed{seed}",
            "tasks": ["bbc_cloze"], "results": {"bbc_cloze": {"acc_norm,none": acc}},
            "continuous": {"bbc_cloze": {"correct_prob_norm": prob, "n": 10}},
            "bpb": {"macro": float(np.mean(bpb)),
                    "domains": {"news": {"bits_per_byte": bpb[0]},
                                "docs": {"bits_per_byte": bpb[1]}}}}


def write_fabricated(folder, shifts, control_shift=0.2, reference="random"):
    """Seeds 0-2 of `reference`, a control `control_shift` bits/byte worse (None: no control),
    and one method per (name, per-seed shifts)."""
    folder.mkdir(parents=True, exist_ok=True)
    base = {0: 2.60, 1: 2.70, 2: 2.65}
    control = {} if control_shift is None else {
        "control": [control_shift + e for e in (0.01, -0.01, 0)]}
    methods = {reference: [0, 0, 0], **control, **shifts}
    for method, offsets in methods.items():
        for seed, offset in zip(base, offsets):
            bpb = [base[seed] + offset, base[seed] + 0.3 + offset]
            record = fabricated_record(method, seed, bpb, 0.25 + seed / 100, 0.25 - offset / 10)
            (folder / f"{method}.seed{seed}.json").write_text(json.dumps(record))
    return sorted(folder.glob("*.json"))


def test_tables_give_cis_paired_differences_power_and_the_verdict(tmp_path):
    from eval.stats import t_interval
    from eval.tables import write_tables

    files = write_fabricated(tmp_path / "eval", {"datamask": [-0.10, -0.09, -0.11],
                                                 "quality-topk": [-0.2, 0.25, 0.0]})
    text = write_tables(files, tmp_path / "tables")
    table = json.loads((tmp_path / "tables" / "table2.json").read_text())
    assert [c["name"] for c in table["columns"]] == [
        "BBC-Cloze", "Avg", "BBC-Cloze P(correct)", "bpb macro", "bpb news", "bpb docs"]
    macro = table["methods"]["datamask"]["cells"]["bpb macro"]
    expected = t_interval([2.75 - 0.10, 2.85 - 0.09, 2.80 - 0.11])  # base + 0.15 + shift
    assert macro["mean"] == pytest.approx(expected["mean"])
    assert macro["half_width"] == pytest.approx(expected["half_width"])
    diff = table["vs_reference"]["datamask"]["bpb macro"]
    assert diff["mean"] == pytest.approx(-0.10) and diff["resolved"]
    assert not table["vs_reference"]["quality-topk"]["bpb macro"]["resolved"]
    assert table["vs_reference"]["control"]["bpb macro"]["low"] > 0
    power = table["power"]["bpb macro"]
    assert power["n_seeds"] == 3 and power["smallest_resolvable"] > 0
    v = table["verdict"]
    assert v["control"]["separated"]
    assert v["vs_random"] == {"datamask": "beats random", "quality-topk": "unresolved"}
    assert v["ordering"]["datamask"]["outcome"] == "unresolved"  # not resolved vs quality-topk
    assert v["ordering"]["datamask"]["against"]["random"] == "below 0"
    assert "rule fixed before the results" in text and "datamask: beats random" in text
    assert "+0.2000 ± " in text and "**worse**" in text  # the control's paired difference
    rows = (tmp_path / "tables" / "table2.csv").read_text().splitlines()
    assert rows[0].startswith("method,BBC-Cloze,Avg,BBC-Cloze P(correct),bpb macro")
    assert rows[0].endswith(",bpb docs ci95,seeds") and len(rows) == 5


def test_verdict_says_when_the_control_is_not_separated(tmp_path):
    from eval.tables import write_tables

    files = write_fabricated(tmp_path / "eval", {"datamask": [-0.30, -0.28, -0.31]},
                             control_shift=0.0)
    write_tables(files, tmp_path / "tables")
    v = json.loads((tmp_path / "tables" / "table2.json").read_text())["verdict"]
    assert not v["control"]["separated"]
    assert "too small to resolve anything" in v["lines"][0]
    assert "observed difference +0.0000 would need more than 10,000 seeds" in v["lines"][0]
    assert v["ordering"]["datamask"]["outcome"] == "holds"  # resolved below random, the only other


def test_tables_reject_repeated_runs_and_mismatched_metrics(tmp_path):
    from eval.tables import write_tables

    files = write_fabricated(tmp_path / "eval", {})
    copy = tmp_path / "copy.json"
    copy.write_text(files[0].read_text())
    with pytest.raises(UserError, match="both method control, seed 0"):
        write_tables(files + [copy], tmp_path / "t")
    record = json.loads(files[0].read_text())
    del record["bpb"]["domains"]["docs"]
    copy.write_text(json.dumps({**record, "seed": 9}))
    with pytest.raises(UserError, match="copy.json: has the columns"):
        write_tables(files + [copy], tmp_path / "t")


def test_downstream_figures_are_drawn_from_the_tables_json(tmp_path, capsys):
    """The forest plot has one row per method with both arms' differences (the null and the
    control apart, the doses left to the dose-response figure) and arms.md's reading."""
    from eval.tables import write_tables
    from figures.downstream import by_arm, dose_rows, forest_rows, main

    write_tables(write_fabricated(tmp_path / "free", {
        "datamask": [-0.10, -0.09, -0.11], "quality-topk": [0.20, 0.21, 0.19],
        "random-null": [0.01, -0.01, 0.0], "junk-0.1": [0.05, -0.04, 0.0],
        "junk-0.5": [0.30, 0.31, 0.29]}), tmp_path / "tables")
    write_tables(write_fabricated(tmp_path / "strat", {
        "datamask@strat": [-0.05, -0.06, -0.04], "quality-topk@strat": [0.1, -0.1, 0.0]},
        control_shift=None, reference="random@strat"), tmp_path / "tables-stratified",
        reference="random@strat")
    paths = [str(tmp_path / folder / "table2.json") for folder in ("tables", "tables-stratified")]
    tables = [json.loads(open(path).read()) for path in paths]
    rows = forest_rows(by_arm(tables))
    assert [row["method"] for row in rows] == ["datamask", "quality-topk", "control",
                                               "random-null"]
    assert [row["calibration"] for row in rows] == [False, False, True, True]
    datamask, topk = rows[0], rows[1]
    assert datamask["arms"]["free"]["mean"] == pytest.approx(-0.10)
    assert datamask["arms"]["stratified"]["mean"] == pytest.approx(-0.05)
    assert (datamask["reading"], topk["reading"]) == ("choice within domains", "mix")
    assert set(rows[2]["arms"]) == {"free"}  # the control and the null are the free arm's
    junk = dose_rows(tables[0])["junk"]
    assert [d["dose"] for d in junk["doses"]] == [0.1, 0.5] and junk["smallest_resolved"] == 0.5
    assert main(["--table", *paths, "--output", str(tmp_path / "fig")]) == 0
    for name in ("forest", "dose-response"):
        assert (tmp_path / "fig" / f"{name}.png").stat().st_size > 10_000
    assert main(["--table", paths[1], "--output", str(tmp_path / "one")]) == 0  # one arm
    assert "dose-response not drawn" in capsys.readouterr().out
    assert main(["--table", paths[0], paths[0], "--output", str(tmp_path)]) == 2
    assert "two tables of the free arm" in capsys.readouterr().err
    assert main(["--table", str(tmp_path / "none.json"), "--output", str(tmp_path)]) == 2
    assert "none.json: no such file" in capsys.readouterr().err


def test_the_downstream_figures_import_no_torch():
    """A downstream run draws its figures in a process of their own, which reads JSON and draws:
    torch, imported there through a neighbouring figure module, cost it about 2 s of CPU."""
    done = subprocess.run([sys.executable, "-c", "import sys, figures.downstream; "
                           "print(sorted({'torch', 'transformers'} & set(sys.modules)))"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_tables_report_the_planted_rows_each_selection_kept(tmp_path):
    """The chain checkpoint -> train summary -> tokens summary -> selection leads to the pool's
    labels (fabricated: a 10-row pool and two selections)."""
    from eval.tables import write_tables

    pool = tmp_path / "pool"
    (pool / "fineweb").mkdir(parents=True)
    ids = [f"row{i}" for i in range(10)]
    planted = ["none"] * 6 + ["exact_dup", "exact_dup", "junk", "junk"]
    pq.write_table(pa.table({"id": ids, "domain": ["news"] * 10, "planted": planted}),
                   pool / "fineweb" / "0.parquet")
    keep = {"random": {"row0", "row1", "row6", "row8"}, "control": {"row6", "row7", "row8"}}
    files = write_fabricated(tmp_path / "eval", {})
    for path in files:
        record = json.loads(path.read_text())
        run = tmp_path / "runs" / record["method"] / f"seed{record['seed']}"
        (run / "tokens").mkdir(parents=True)
        selection = tmp_path / "select" / record["method"] / "selection.parquet"
        selection.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": ids, "selected": [i in keep[record["method"]]
                                                         for i in ids]}), selection)
        (run / "summary.json").write_text(json.dumps({"tokens": str(run / "tokens")}))
        (run / "tokens" / "summary.json").write_text(json.dumps({"selection": str(selection)}))
        path.write_text(json.dumps({**record, "checkpoint": str(run)}))
    text = write_tables(files, tmp_path / "tables", kept_of=partial(kept_fractions, pool))
    kept = json.loads((tmp_path / "tables" / "table2.json").read_text())["planted_kept"]
    assert kept["random"] == {"none": pytest.approx(2 / 6), "exact_dup": 0.5, "junk": 0.5}
    assert kept["control"] == {"none": 0.0, "exact_dup": 1.0, "junk": 0.5}
    assert "| control | 1.000 | 0.500 | 0.000 |" in text  # kinds sorted: exact_dup junk none

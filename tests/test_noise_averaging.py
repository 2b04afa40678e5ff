"""Noise reduction: the train stage keeps the last checkpoints, their weight
average and an EMA of the weights; evaluate scores held-out bits per byte on each of them.

A tiny model trains 3 steps with average_last=3, average_every=1 (every step kept), so the
averaged and EMA weights can be recomputed by hand from the kept checkpoints on disk."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from datamask.errors import UserError
from reproduce.pipeline.gpu_check import write_tiny_token_set
from reproduce.pipeline.train import kept_steps, load_config, train

DECAY = 0.6
SMALL = {"max_steps": 3, "batch_size": 2, "seq_len": 32, "threads": 1, "seed": 4}
HELDOUT = {"news": ["The minister said the economy grew by two per cent last year.",
                    "Shares fell sharply on Monday after the bank's results."],
           "sport": ["The striker scored twice before half time as the home side won."]}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Tiny token set, one default run and one with every averaging option, held-out text."""
    root = write_tiny_token_set(tmp_path_factory.mktemp("noise"), n_articles=12, vocab_size=300)
    runs = {}
    for name, extra in (("plain", {}),
                        ("averaging", {"average_last": 3, "average_every": 1,
                                       "ema_decay": DECAY})):
        model_cfg, cfg = load_config("demo", {**SMALL, **extra})
        runs[name] = train(root / "tokens", root / "tokenizer.json",
                           root / "train" / name / "seed4", model_cfg, cfg, progress=False)
    (root / "heldout").mkdir()
    for domain, texts in HELDOUT.items():
        pq.write_table(pa.table({"text": texts}), root / "heldout" / f"{domain}.parquet")
    return root, runs


def weights(folder) -> dict:
    return load_file(str(folder / "model.safetensors"))


def test_defaults_write_no_extra_checkpoint_and_averaging_leaves_training_as_it_was(work):
    root, runs = work
    plain, averaging = root / "train" / "plain" / "seed4", root / "train" / "averaging" / "seed4"
    assert not any((plain / kind).exists() for kind in ("last", "averaged", "ema"))
    assert runs["plain"]["extra_checkpoints"] == {}
    # the final checkpoint is bitwise the same with or without averaging
    a, b = weights(plain), weights(averaging)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [[json.loads(line)["loss"] for line in (run / "train_log.jsonl").open()]
              for run in (plain, averaging)]
    assert losses[0] == losses[1]


def test_averaged_is_the_mean_of_the_kept_and_ema_follows_its_recursion(work):
    root, runs = work
    ckpt = root / "train" / "averaging" / "seed4"
    assert runs["averaging"]["extra_checkpoints"] == {
        "last/step0": {"kind": "last", "step": 0}, "last/step1": {"kind": "last", "step": 1},
        "last/step2": {"kind": "last", "step": 2},
        "averaged": {"kind": "averaged", "steps": [0, 1, 2]},
        "ema": {"kind": "ema", "decay": DECAY}}
    assert json.loads((ckpt / "summary.json").read_text()) == runs["averaging"]
    kept = [weights(ckpt / "last" / f"step{s}") for s in range(3)]
    final, averaged, ema = weights(ckpt), weights(ckpt / "averaged"), weights(ckpt / "ema")
    assert kept[0].keys() == final.keys() == averaged.keys() == ema.keys()
    changed = 0
    for name in final:
        torch.testing.assert_close(kept[2][name], final[name], rtol=0, atol=0)  # the last step
        steps = [k[name].double() for k in kept]
        torch.testing.assert_close(averaged[name].double(), sum(steps) / 3, rtol=0, atol=1e-7)
        hand = steps[0]  # the EMA starts at the weights after the first step
        for later in steps[1:]:
            hand = DECAY * hand + (1 - DECAY) * later
        torch.testing.assert_close(ema[name].double(), hand, rtol=0, atol=1e-6)
        changed += not torch.equal(kept[0][name], kept[2][name])
    assert changed  # the steps did move the weights, so the checks above can fail
    for folder in ("last/step1", "averaged", "ema"):  # loadable as the main checkpoint is
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(ckpt / folder)
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        assert AutoTokenizer.from_pretrained(ckpt / folder).eos_token == "<|endoftext|>"
        summary = json.loads((ckpt / folder / "summary.json").read_text())
        assert summary["model"]["seq_len"] == 32 and summary["train"]["seed"] == 4


def test_kept_steps_end_at_the_last_step_and_bad_settings_are_refused():
    _, cfg = load_config("demo", {"max_steps": 60, "average_last": 4, "average_every": 5})
    assert kept_steps(cfg) == [44, 49, 54, 59]
    for bad, match in (({"average_last": 4, "average_every": 20}, "average_last=4"),
                       ({"average_last": 2, "average_every": 0}, "average_every"),
                       ({"ema_decay": 1.0}, "ema_decay")):
        _, cfg = load_config("demo", {"max_steps": 60, **bad})
        with pytest.raises(UserError, match=match):
            kept_steps(cfg)


def test_evaluate_scores_every_averaging_checkpoint_and_tables_load_old_and_new(work):
    from eval.bpb import bits_per_byte
    from eval.run import EvaluateConfig, evaluate
    from eval.tables import load_results

    root, _ = work
    records = evaluate(EvaluateConfig(
        checkpoints=[root / "train" / "averaging" / "seed4", root / "train" / "plain" / "seed4"],
        output=root / "eval", batch_size=4, device="cpu", heldout=root / "heldout"))
    new, old = records
    assert not {"bpb_last", "bpb_last_mean", "bpb_last_sd", "bpb_averaged", "bpb_ema"} & set(old)
    last = new["bpb_last"]
    assert [s["step"] for s in last] == [0, 1, 2]
    macros = [s["macro"] for s in last]
    assert new["bpb_last_mean"]["macro"] == pytest.approx(np.mean(macros), rel=1e-12)
    assert new["bpb_last_mean"]["n"] == 3
    assert new["bpb_last_sd"] == pytest.approx(np.std(macros, ddof=1), rel=1e-12)
    assert new["bpb_last_sd"] > 0
    for domain in HELDOUT:
        assert new["bpb_last_mean"]["domains"][domain]["bits_per_byte"] == pytest.approx(
            np.mean([s["domains"][domain]["bits_per_byte"] for s in last]), rel=1e-12)
    assert last[-1]["macro"] == pytest.approx(new["bpb"]["macro"], rel=1e-6)  # same weights
    ema_folder = root / "train" / "averaging" / "seed4" / "ema"
    assert new["bpb_ema"]["macro"] == pytest.approx(
        bits_per_byte(ema_folder, root / "heldout", 4, "cpu")["macro"], rel=1e-9)
    assert set(new["bpb_averaged"]["domains"]) == set(HELDOUT)
    assert new["bpb_averaged"]["macro"] != new["bpb"]["macro"]
    # eval/tables reads a result file without the new keys as before, and one with them with
    # the averaged columns beside; one table of both is refused (the same metrics for every run)
    files = {path.stem.split(".")[0]: path for path in (root / "eval").glob("*.json")}
    columns, values, _ = load_results([files["plain"]])
    assert "bpb macro" in columns and not any("(" in c for c in columns)
    assert values["plain"][4]["bpb macro"] == pytest.approx(old["bpb"]["macro"])
    columns, values, _ = load_results([files["averaging"]])
    assert values["averaging"][4]["bpb macro (EMA)"] == pytest.approx(new["bpb_ema"]["macro"])
    assert values["averaging"][4]["bpb macro (last mean)"] == pytest.approx(
        new["bpb_last_mean"]["macro"])
    with pytest.raises(UserError, match="one table needs the same metrics"):
        load_results(sorted(files.values()))


def test_evaluate_refuses_a_broken_averaging_checkpoint_before_scoring(work, tmp_path):
    import shutil

    from eval.run import EvaluateConfig, evaluate

    root, _ = work
    broken = tmp_path / "broken" / "seed4"
    shutil.copytree(root / "train" / "averaging" / "seed4", broken)
    (broken / "ema" / "config.json").unlink()
    with pytest.raises(UserError, match="ema: not a save_pretrained folder"):
        evaluate(EvaluateConfig(checkpoints=[broken], output=tmp_path / "eval", device="cpu",
                                heldout=root / "heldout"))
    assert not (tmp_path / "eval").exists()

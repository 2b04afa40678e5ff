"""Evaluation with power: bits per byte, the continuous multiple-choice metric, confidence
intervals, paired differences, the tables and the verdict rule, on small hand-checkable inputs."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from datamask.errors import UserError

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

    from reproduce.tokenize import EOS, train_tokenizer

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
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
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

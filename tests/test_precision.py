"""prepare's transformer near the GPU's hardware, checked on the CPU: its batch loop gives
sentence-transformers' encode vectors to the bit in fp32 (the texts cut before tokenizing
included), the cut leaves every token id as it was, bf16 gives vectors close to fp32's and
names itself in the identity, and --precision is refused in one line where it cannot run."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from datamask.errors import UserError
from reproduce.cli import main
from reproduce.pipeline.embedders import (Embedder, batch_for_memory, cut_text,
                                          make_embedder)
from reproduce.pipeline.prepare import (HeuristicQuality, PrepareConfig, check_embedding_model,
                                        prepare)

MAX_TOKENS = 32  # the budget is then 192 characters: most pool texts are cut


@pytest.fixture(scope="module")
def texts(pool):
    """Pool texts, most far longer than the budget, and three that test the cut's edges: a word
    longer than WordPiece reads (one [UNK]) filling the budget, so the cut text falls short and
    is tokenized whole; no whitespace before the budget; exactly the budget long."""
    _, _, rows = pool
    edges = ["x" * 185 + " " + "the rest of a sentence " * 20,
             "y" * 400 + " tail words here",
             "z " * 96]
    return [r["text"] for r in rows[:37]] + edges


@pytest.fixture(scope="module")
def fp32():
    return Embedder(max_seq_length=MAX_TOKENS, batch_size=8).load()


def test_cut_text_stops_before_the_last_whitespace_within_the_budget():
    assert cut_text("one two three", 9) == "one two"
    assert cut_text("one two\nthree four", 12) == "one two"
    assert cut_text("short", 9) == "short" and cut_text("abcdefghijk", 9) == "abcdefghijk"
    assert cut_text("abc\tdefghijk", 9) == "abc"


def test_the_cut_leaves_every_token_id_as_the_whole_text_gives_it(fp32, texts):
    assert fp32.cut_budget == 6 * MAX_TOKENS
    assert sum(len(t) > fp32.cut_budget for t in texts) >= 30  # the cut is exercised
    for start in range(0, len(texts), 8):
        batch = texts[start:start + 8]
        ours, whole = fp32.features(batch), fp32.model.preprocess(batch)
        assert ours.keys() == whole.keys()
        for key, value in whole.items():  # the tensors, and the modality's name
            same = value.equal(ours[key]) if hasattr(value, "equal") else value == ours[key]
            assert same, (start, key)
    unk = fp32.features(texts[-3:-2])["input_ids"]  # its cut is 185 x's: one [UNK], too short
    assert unk.shape[1] == MAX_TOKENS


def test_fp32_vectors_are_encodes_to_the_bit(fp32, texts):
    ours = fp32(texts)
    theirs = fp32.model.encode(texts, batch_size=8, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
    assert ours.dtype == np.float32 and np.array_equal(ours, theirs)
    assert "precision" not in fp32.identity  # folders prepared before --precision keep their rows


def test_bf16_on_the_cpu_is_close_to_fp32_and_names_itself(fp32, texts):
    bf16 = Embedder(max_seq_length=MAX_TOKENS, batch_size=8, precision="bf16").load()
    assert str(next(bf16.model.parameters()).dtype) == "torch.bfloat16"
    low, high = bf16(texts), fp32(texts)
    cosines = np.sum(low * high, axis=1)
    assert np.allclose(np.linalg.norm(low, axis=1), 1, atol=1e-5)
    assert not np.array_equal(low, high)  # bf16 arithmetic, not fp32's
    assert cosines.min() > 0.99, cosines.min()
    assert bf16.identity == {**fp32.identity, "precision": "bf16"}


def test_a_folder_of_one_precision_refuses_another(tmp_path, fp32, pool):
    """Two rows of a pool shard prepared in fp32; bf16 into the same folder is refused before
    any work, the folder left as it was."""
    shards = tmp_path / "shards"
    shards.mkdir()
    first = sorted((pool[0] / "fineweb").glob("*.parquet"))[0]
    pq.write_table(pq.read_table(first, columns=["text", "id"]).slice(0, 2), shards / "a.parquet")
    out = tmp_path / "out"
    config = PrepareConfig(input=[shards], output=out, no_progress=True)
    prepare(config, embedder=fp32, scorer=HeuristicQuality())
    bf16 = Embedder(max_seq_length=MAX_TOKENS, precision="bf16")
    with pytest.raises(UserError, match="another embedding model or precision"):
        check_embedding_model(out, [shards / "a.parquet"], bf16, {})
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(UserError, match="precision"):
        prepare(config, embedder=bf16, scorer=HeuristicQuality())
    assert sorted(p.name for p in out.iterdir()) == before
    shutil.rmtree(out)


def test_precision_is_refused_in_one_line_where_it_cannot_run(tmp_path, capsys, pool,
                                                               small_static):
    fineweb = str(pool[0] / "fineweb")
    for flags, words in ((["--precision", "fp16"], ("--precision fp16", "GPU")),
                         (["--precision", "bf16", "--embedding_model", f"static:{small_static}"],
                          ("--precision bf16", "static")),
                         (["--precision", "int8"], ("--precision", "int8"))):
        try:
            code = main(["prepare", "--input", fineweb, "--output", str(tmp_path / "out"),
                         *flags])
        except SystemExit as exit_:  # argparse's refusal of a choice
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert all(w in err for w in words), err
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="--precision must be one of"):
        Embedder(precision="fp8")
    with pytest.raises(UserError, match="static"):
        make_embedder(f"static:{small_static}", precision="bf16")


def test_the_cuda_batch_is_the_largest_power_of_two_in_half_the_free_memory():
    mib = 2**20
    assert batch_for_memory(80_000 * mib, 4 * mib) == 1024  # capped
    assert batch_for_memory(1000 * mib, 4 * mib) == 64  # 125 fit: 64
    assert batch_for_memory(3 * mib, 4 * mib) == 1  # none fits: one at a time
    assert batch_for_memory(1000 * mib, 4 * mib, cap=32) == 32

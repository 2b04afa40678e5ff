"""The reproduction pipeline, stage by stage, on a tiny slice of the BBC corpus (offline).

One module-scoped run feeds the stages in order (data -> prepare -> select -> tokenize -> train ->
evaluate -> tables); each test asserts on one stage's files."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from datamask.data import ID_COLUMN, budget, read_dataset
from datamask.errors import UserError
from datamask.stratify import largest_remainder
from reproduce.pipeline.bbc import FINEWEB_SCHEMA, write_bbc_fineweb
from reproduce.cli import main
from reproduce.pipeline.embedders import Embedder, model_identity
from reproduce.pipeline.prepare import HeuristicQuality, PrepareConfig, chunk_id, prepare
from reproduce.pipeline.select import SelectConfig, run_select
from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer
from reproduce.pipeline.train import load_config, token_budget, train, window_order

RATIO = 0.25


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    info = write_bbc_fineweb(root / "fineweb", root / "tasks", n_shards=2, limit=44, seed=1)
    return root, info


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def of_fineweb(root: Path, output: Path) -> PrepareConfig:
    """prepare's config for the work folder's FineWeb shards into `output`, without bars."""
    return PrepareConfig(input=[root / "fineweb"], output=output, no_progress=True)


@pytest.fixture(scope="module")
def prepared(work, embedder):
    root, _ = work
    summary = prepare(of_fineweb(root, root / "prepared"), embedder=embedder,
                      scorer=HeuristicQuality())
    return root / "prepared", summary


@pytest.fixture(scope="module")
def selections(work, prepared):
    root, _ = work
    return {m: run_select(SelectConfig(input=[str(prepared[0])],
                                       output=root / "select" / m.split(":")[0], method=m,
                                       select_ratio=RATIO, block_size=20))
            for m in ("quality-topk", "datamask:n_epochs=20,n_rollout=8", "random")}


@pytest.fixture(scope="module")
def tokenizer(work):
    root, _ = work
    train_tokenizer([str(root / "fineweb")], root / "tokenizer.json", vocab_size=400)
    return root / "tokenizer.json"


@pytest.fixture(scope="module")
def checkpoints(work, selections, tokenizer):
    root, _ = work
    model_cfg, train_cfg = load_config("demo", {"max_steps": 3, "batch_size": 2, "seq_len": 64})
    out = {}
    for method in ("quality-topk", "random"):
        run_tokenize(TokenizeConfig(input=root / "fineweb",
                                    selection=root / "select" / method / "selection.parquet",
                                    tokenizer=tokenizer, output=root / "tokens" / method))
        out[method] = train(root / "tokens" / method, tokenizer, root / "train" / method,
                            model_cfg, train_cfg, progress=False)
    return out


@pytest.fixture(scope="module")
def results(work, checkpoints):
    from eval.run import EvaluateConfig, evaluate

    root, _ = work
    return evaluate(EvaluateConfig(checkpoints=[root / "train" / m for m in checkpoints],
                                   tasks=["bbc_cloze", "bbc_headline", "bbc_heldout"],
                                   output=root / "eval", data_dir=root / "tasks", batch_size=8,
                                   limit=3))


def test_data_writes_fineweb_shards_and_keeps_tasks_out_of_the_pool(work):
    root, info = work
    tables = [pq.read_table(p) for p in sorted((root / "fineweb").glob("*.parquet"))]
    assert len(tables) == 2 and all(t.schema.equals(FINEWEB_SCHEMA) for t in tables)
    ids = [i for t in tables for i in t.column("id").to_pylist()]
    assert len(ids) == len(set(ids)) == info["pool_documents"] == 44 - info["held_out_documents"]
    held = {json.loads(line)["source_id"]
            for line in (root / "tasks" / "bbc_cloze.jsonl").read_text().splitlines()}
    assert held and not held & set(ids)
    item = json.loads((root / "tasks" / "bbc_headline.jsonl").read_text().splitlines()[0])
    assert len(item["choices"]["text"]) == 4 and item["answerKey"] in item["choices"]["label"]


def test_prepare_keeps_every_id_in_order_and_reuses_prepared_rows(work, prepared, embedder):
    root, _ = work
    folder, summary = prepared
    for shard in sorted((root / "fineweb").glob("*.parquet")):
        source = pq.read_table(shard, columns=["id", "text"])
        out = pq.read_table(folder / shard.name)
        assert out.column("id").to_pylist() == source.column("id").to_pylist()
        ids, texts = source.column("id").to_pylist(), source.column("text").to_pylist()
        assert out.column(ID_COLUMN).to_pylist() == [chunk_id(i) for i in ids]
        assert out.column("text_length").to_pylist() == [len(t) for t in texts]
    data = read_dataset(sorted(folder.glob("*.parquet")))  # the core's contract reader accepts it
    assert data.dim == 384 and np.allclose(np.linalg.norm(data.features, axis=1), 1, atol=1e-4)
    assert ((data.quality >= 0) & (data.quality < 5)).all() and data.quality.std() > 0
    assert summary["embedded"] == summary["rows"] == len(data)

    stamps = [p.stat().st_mtime_ns for p in sorted(folder.glob("*.parquet"))]
    again = prepare(of_fineweb(root, folder), embedder=embedder, scorer=HeuristicQuality())
    assert again["embedded"] == 0 and again["rows"] == len(data)
    assert [p.stat().st_mtime_ns for p in sorted(folder.glob("*.parquet"))] == stamps

    # the same model installed elsewhere (another clone's virtualenv) is the same model
    moved = root / "elsewhere" / "model"
    shutil.copytree(embedder.model_name, moved)
    assert Embedder(str(moved)).identity == embedder.identity
    fresh = Embedder(str(moved))
    again = prepare(of_fineweb(root, folder), embedder=fresh, scorer=HeuristicQuality())
    assert again["embedded"] == 0
    assert "model" not in vars(fresh)  # up to date: the model was never loaded
    assert fresh.identity["max_seq_length"] == embedder.model.max_seq_length  # read, not loaded
    (moved / "vocab.txt").write_text((moved / "vocab.txt").read_text() + "changed\n")
    assert model_identity(str(moved)) != embedder.identity["model"]
    shutil.rmtree(moved.parent)

    # a new shard: only its rows are embedded, the others are left as they are
    first = sorted((root / "fineweb").glob("*.parquet"))[0]
    extra = root / "more" / "extra.parquet"
    extra.parent.mkdir()
    table = pq.read_table(first).slice(0, 3)
    copies = [[i + "-copy" for i in table.column("id").to_pylist()]]
    pq.write_table(table.set_column(1, "id", copies), extra)
    grown = prepare(PrepareConfig(input=[root / "fineweb", extra], output=folder,
                                  no_progress=True), embedder=embedder, scorer=HeuristicQuality())
    assert grown["embedded"] == 3 and grown["rows"] == len(data) + 3
    added = read_dataset([folder / "extra.parquet"])
    assert np.allclose(added.features, data.features[:3], atol=1e-5)
    (folder / "extra.parquet").unlink()



def test_a_rerun_on_unchanged_inputs_loads_no_model_and_a_touched_input_does(work, prepared,
                                                                            embedder, monkeypatch):
    root, _ = work
    folder, _ = prepared
    stamps = [p.stat().st_mtime_ns for p in sorted(folder.glob("*.parquet"))]

    def load(self):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Embedder, "load", load)
    quality = HeuristicQuality()
    again = prepare(of_fineweb(root, folder), embedder=embedder, scorer=quality)
    assert again["embedded"] == 0 and again["rows"] == sum(f["reused"]
                                                          for f in again["files"].values())
    assert "scorer" not in vars(quality)  # nor spaCy and the filters: nothing was scored
    assert [p.stat().st_mtime_ns for p in sorted(folder.glob("*.parquet"))] == stamps
    shard = sorted((root / "fineweb").glob("*.parquet"))[0]
    shard.touch()  # the same bytes, a new modification time: its rows are checked again
    with pytest.raises(AssertionError, match="the model was loaded"):
        prepare(of_fineweb(root, folder), embedder=embedder, scorer=HeuristicQuality())
    monkeypatch.undo()
    assert prepare(of_fineweb(root, folder), embedder=embedder,
                   scorer=HeuristicQuality())["embedded"] == 0

def test_prepare_names_the_file_and_column_of_bad_input(tmp_path, work, embedder):
    table = pq.read_table(sorted((work[0] / "fineweb").glob("*.parquet"))[0])
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.drop_columns(["text"]), bad)
    with pytest.raises(UserError, match=r"bad\.parquet.*'text'"):
        prepare(PrepareConfig(input=[bad], output=tmp_path / "out", no_progress=True),
                embedder=embedder, scorer=HeuristicQuality())


def test_select_in_blocks_keeps_every_id_once_and_selects_per_block(prepared, selections, work):
    root, _ = work
    data = read_dataset(sorted(prepared[0].glob("*.parquet")))
    for method, summary in selections.items():
        table = pq.read_table(summary["output"])
        assert sorted(table.column(ID_COLUMN).to_pylist()) == sorted(data.ids.tolist())
        blocks = table.column("block").to_numpy()
        selected = table.column("selected").to_numpy()
        assert summary["blocks"] == 2 == len(set(blocks.tolist()))
        # the whole input's budget, each block its largest-remainder share of it
        assert selected.sum() == summary["selected"] == budget(RATIO, len(data))
        assert np.bincount(blocks, weights=selected).tolist() == largest_remainder(
            budget(RATIO, len(data)), np.bincount(blocks)).tolist()
        # each block's summary says what its learner did; a baseline's has nothing to say
        folder = Path(summary["output"]).parent / "blocks"
        for said in (json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))):
            if method.startswith("datamask"):
                assert said["steps_run"] == 20 and said["stop_reason"] == "steps"
                assert 0 <= said["written_step"] <= 20
                assert said["objective_written"] >= said["objective_start"]  # scored start
            else:
                assert "steps_run" not in said
    # quality-topk per block: the selected rows are exactly each block's best
    table = pq.read_table(root / "select" / "quality-topk" / "selection.parquet")
    quality = dict(zip(data.ids.tolist(), data.quality.tolist()))
    for b in set(table.column("block").to_pylist()):
        rows = [r for r in table.to_pylist() if r["block"] == b]
        worst_kept = min(quality[r[ID_COLUMN]] for r in rows if r["selected"])
        best_dropped = max(quality[r[ID_COLUMN]] for r in rows if not r["selected"])
        assert worst_kept >= best_dropped


def test_tokenize_writes_only_the_selected_documents(work, tokenizer, checkpoints):
    from tokenizers import Tokenizer

    root, _ = work
    tok = Tokenizer.from_file(str(tokenizer))
    texts = {i: t for f in sorted((root / "fineweb").glob("*.parquet"))
             for i, t in zip(*pq.read_table(f, columns=["id", "text"]).to_pydict().values())}
    for method in checkpoints:
        sel = pq.read_table(root / "select" / method / "selection.parquet").to_pylist()
        chosen = [r["id"] for r in sel if r["selected"]]
        expected = sum(len(tok.encode(texts[i]).ids) + 1 for i in chosen)  # + <|endoftext|>
        summary = json.loads((root / "tokens" / method / "summary.json").read_text())
        on_disk = sum(p.stat().st_size // 2 for p in (root / "tokens" / method).glob("*.ds"))
        assert summary["documents"] == len(chosen) and summary["tokens"] == on_disk == expected


def test_one_task_writes_the_one_process_tokenizers_tokens(work, tokenizer, checkpoints,
                                                           tmp_path):
    """With one task the merge reads its one rank's file in order: token for token what
    datatrove's DocumentTokenizer writes alone with the same seed, so runs tokenized before the
    stage had ranks and a merge train on the same windows."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    from reproduce.pipeline.tokenize import EOS, KeepSelected

    root, _ = work
    alone = tmp_path / "alone"
    LocalPipelineExecutor(pipeline=[
        ParquetReader(str(root / "fineweb"), glob_pattern="*.parquet", text_key="text",
                      id_key="id"),
        KeepSelected(str(root / "select" / "random" / "selection.parquet")),
        DocumentTokenizer(output_folder=str(alone), tokenizer_name_or_path=str(tokenizer),
                          eos_token=EOS, seed=0, shuffle_documents=True)],
        tasks=1, logging_dir=str(tmp_path / "logs")).run()

    def tokens(folder):
        return b"".join(p.read_bytes() for p in sorted(folder.glob("*.ds")))

    assert tokens(root / "tokens" / "random") == tokens(alone) != b""


def test_train_saves_a_checkpoint_that_loads(work, checkpoints):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, _ = work
    path = root / "train" / "random"
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    ids = torch.tensor([tok("The minister said")["input_ids"]])
    vocab = checkpoints["random"]["vocab_size"]
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], vocab)
    assert np.isfinite(checkpoints["random"]["final_loss"])
    assert len((path / "train_log.jsonl").read_text().splitlines()) >= 1


def test_window_order_repeats_whole_epochs_and_follows_the_seed():
    order = window_order(7, 20, seed=3)
    assert len(order) == 20
    assert sorted(order[:7]) == sorted(order[7:14]) == list(range(7))  # every window once an epoch
    assert len(set(order[14:].tolist())) == 6  # the cut last epoch repeats nothing either
    assert np.array_equal(order, window_order(7, 20, seed=3))
    assert not np.array_equal(order, window_order(7, 20, seed=4))


def test_train_is_bitwise_repeatable_and_the_seed_changes_it(work, checkpoints, tokenizer):
    """The determinism check: the same seed gives the same weights, bit for bit; another seed
    (initialisation and window order) gives others. The summary states the budget it read."""
    from safetensors.torch import load_file

    root, _ = work
    weights = {}
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        model_cfg, cfg = load_config("demo", {"max_steps": 4, "batch_size": 3, "seq_len": 32,
                                              "seed": seed})
        summary = train(root / "tokens" / "random", tokenizer, root / "det" / name, model_cfg, cfg,
                        progress=False)
        weights[name] = load_file(str(root / "det" / name / "model.safetensors"))
    assert all((weights["a"][k] == weights["b"][k]).all() for k in weights["a"])
    assert any(not (weights["a"][k] == weights["c"][k]).all() for k in weights["a"])
    assert summary["tokens_seen"] == token_budget(model_cfg, cfg) == 4 * 3 * 33
    assert summary["epochs"] == pytest.approx(4 * 3 / summary["windows"], abs=1e-4)
    assert summary["unique_tokens_seen"] == min(12, summary["windows"]) * 33


def test_tokenizer_training_is_repeatable(work, tokenizer, tmp_path):
    root, _ = work
    again = tmp_path / "again.json"
    train_tokenizer([str(root / "fineweb")], again, vocab_size=400)
    assert again.read_bytes() == tokenizer.read_bytes()


def test_evaluate_reports_the_local_tasks_metrics(results):
    for record in results:
        for task in ("bbc_cloze", "bbc_headline"):
            assert 0.0 <= record["results"][task]["acc_norm,none"] <= 1.0
            assert record["n-samples"][task]["effective"] == 3
        assert record["results"]["bbc_heldout"]["bits_per_byte,none"] > 0


def test_tables_have_one_row_per_method_and_flag_the_paper(work, results):
    from eval.tables import paper_table, write_tables

    root, _ = work
    text = write_tables(sorted((root / "eval").glob("*.json")), root / "tables")
    rows = (root / "tables" / "table2.csv").read_text().splitlines()
    assert rows[0].startswith("method,BBC-Cloze,BBC-Headline,BBC bits/byte,Avg")
    assert sorted(r.split(",")[0] for r in rows[1:]) == ["quality-topk", "random"]
    assert "| quality-topk |" in text
    for row in rows[1:]:  # Avg: the accuracies' mean, bits/byte left out
        cloze, headline, _, avg = map(float, row.split(",")[1:5])
        assert avg == pytest.approx((cloze + headline) / 2)
    paper = paper_table()
    flagged = paper.loc[paper["flag"] != "", ["model", "corpus"]].to_numpy().tolist()
    assert flagged == [["7B-MoE", "FineWeb"]]


def test_cli_errors_name_the_flag(tmp_path, capsys, prepared):
    code = main(["select", "--input", str(prepared[0]), "--output", str(tmp_path / "s"),
                 "--method", "no-such-selector"])
    assert code == 2 and "no-such-selector" in capsys.readouterr().err
    code = main(["train", "--tokens", str(tmp_path), "--tokenizer", str(tmp_path / "t.json"),
                 "--output", str(tmp_path / "m"), "--set", "max_stepz=3"])
    assert code == 2 and "max_stepz" in capsys.readouterr().err


def test_stages_joined_by_plus_run_in_one_process_in_order_and_stop_at_the_first_failure(
        tmp_path, capsys, prepared):
    from datamask.selectors import selector_names

    assert main(["methods", "+", "methods", "--demo"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:-1] == selector_names() and "random" in printed[-1].split()
    code = main(["select", "--input", str(prepared[0]), "--output", str(tmp_path / "s"),
                 "--method", "no-such-selector", "+", "methods"])
    captured = capsys.readouterr()
    assert code == 2 and "no-such-selector" in captured.err and captured.out == ""


def write_fasttext_model(path, words, labels, input_vectors, output_vectors) -> None:
    """A supervised fastText model in fastText's own binary format (file version 12): softmax
    loss, no subwords or word n-grams, so a text's label probabilities are exactly softmax(output
    @ the mean input vector of its known words). Written, not trained: this wheel's trainer stops
    with "Encountered NaN" on tiny files in about half of the processes (it depends on the
    memory layout, not the seed or the thread count)."""
    import struct

    dim = input_vectors.shape[1]
    # dim, ws, epoch, minCount, neg, wordNgrams, loss (3 softmax), model (3 supervised), bucket,
    # minn, maxn, lrUpdateRate, t
    header = [struct.pack("<ii", 793712314, 12),
              struct.pack("<12id", dim, 5, 5, 1, 5, 1, 3, 3, 0, 0, 0, 100, 1e-4)]
    entries = [(word, 0) for word in words] + [(label, 1) for label in labels]
    header.append(struct.pack("<iiiqq", len(entries), len(words), len(labels), len(entries), -1))
    header += [word.encode() + b"\0" + struct.pack("<qb", 1, kind) for word, kind in entries]
    matrices = [b"\0" + struct.pack("<qq", *m.shape) + np.ascontiguousarray(m, "<f4").tobytes()
                for m in (input_vectors, output_vectors)]  # each after a "not quantised" flag
    path.write_bytes(b"".join(header + matrices))


def test_fasttext_quality_is_the_probability_of_the_label(tmp_path):
    import pyarrow as pa

    from reproduce.pipeline.prepare import make_scorer

    model = tmp_path / "q.bin"
    write_fasttext_model(model, ["minister", "economy", "cheap"], ["__label__hq", "__label__lq"],
                         np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
                         np.array([[2.0, -2.0], [-2.0, 2.0]]))
    scorer = make_scorer("fasttext", [], str(model), "__label__hq")
    scores = scorer(pa.table({"text": ["the minister said\nthe economy grew", "buy now cheap"]}),
                    tmp_path)
    # known words: minister and economy (mean (1, 0)), then cheap ((0, 1)): logits +-4
    hq = 1 / (1 + np.exp(-4.0))
    np.testing.assert_allclose(scores, [hq, 1 - hq], atol=2e-5)  # fastText adds 1e-5
    assert scores.dtype == np.float32 and ((scores >= 0) & (scores <= 1)).all()
    assert make_scorer("fasttext", [], str(model), "__label__lq")(
        pa.table({"text": ["cheap"]}), tmp_path)[0] == pytest.approx(hq, abs=2e-5)
    with pytest.raises(UserError, match="__label__nope"):
        make_scorer("fasttext", [], str(model), "__label__nope")


def test_rerun_skips_finished_blocks_and_recomputes_a_crashed_one(tmp_path, prepared):
    """A block whose task died (no completion, no output) is recomputed on the rerun; finished
    blocks are left as they are; the merged selection is the same as before."""
    out = tmp_path / "select"
    first = run_select(SelectConfig(input=[str(prepared[0])], output=out, method="quality-topk",
                                    select_ratio=RATIO, block_size=20))
    before = pq.read_table(first["output"])
    outputs = sorted((out / "blocks").glob("*.parquet"))
    completions = sorted((out / "logs" / "blocks" / "completions").iterdir())
    assert len(outputs) == len(completions) == 2
    kept_mtime = outputs[0].stat().st_mtime_ns
    outputs[1].unlink()  # as if block 1's task had been killed before it finished
    completions[1].unlink()
    again = run_select(SelectConfig(input=[str(prepared[0])], output=out, method="quality-topk",
                                    select_ratio=RATIO, block_size=20))
    assert outputs[0].stat().st_mtime_ns == kept_mtime and outputs[1].exists()
    assert pq.read_table(again["output"]).equals(before)


def test_stage_links_are_absolute_so_tables_follow_them_from_any_folder(work, tokenizer,
                                                                         selections, tmp_path,
                                                                         monkeypatch):
    """Run tokenize -> train -> evaluate with relative paths from the work folder, then follow
    the result file's chain (checkpoint -> tokens -> selection) from another folder."""
    from eval.run import EvaluateConfig, evaluate
    from eval.tables import stage_summaries

    root, _ = work
    monkeypatch.chdir(root)
    run_tokenize(TokenizeConfig(input=Path("fineweb"),
                                selection=Path("select/random/selection.parquet"),
                                tokenizer=tokenizer, output=Path("relative/tokens")))
    model_cfg, cfg = load_config("demo", {"max_steps": 1, "batch_size": 2, "seq_len": 32})
    train(Path("relative/tokens"), tokenizer, Path("relative/train/random"), model_cfg, cfg,
          progress=False)
    [record] = evaluate(EvaluateConfig(checkpoints=[Path("relative/train/random")],
                                       tasks=["bbc_heldout"], output=Path("relative/eval"),
                                       data_dir=root / "tasks", batch_size=8, limit=2))
    monkeypatch.chdir(tmp_path)
    chain = stage_summaries(record)
    assert record["checkpoint"] == str(root / "relative" / "train" / "random")
    assert chain["selection"] == str(root / "select" / "random" / "selection.parquet")
    assert chain["train"]["tokens"] == str(root / "relative" / "tokens")
    assert chain["select"] and chain["tokens"]["documents"] > 0


def test_select_refuses_a_negative_block_size_before_writing(tmp_path, prepared):
    out = tmp_path / "select"
    with pytest.raises(UserError, match="--block_size must be at least 0, got -5"):
        run_select(SelectConfig(input=[str(prepared[0])], output=out, method="quality-topk",
                                select_ratio=RATIO, block_size=-5))
    assert not out.exists()


@pytest.mark.parametrize("settings, message", [
    (dict(select_ratio=25), "--select_ratio must lie strictly between 0 and 1, got 25"),
    (dict(block_size=0.25), "--block_size must be a whole number, got 0.25"),
    (dict(block_size=-5), "--block_size must be at least 0, got -5"),
    (dict(partition="neighborhood"), "--partition must be one of neighbourhood, random"),
    (dict(merge_ratio=0.3, merge_partition="kmeans"), "--merge_partition must be one of"),
    (dict(seed=-1), "--seed must be a whole number from 0 to 2^63 - 1, got -1"),
    (dict(workers=0), "--workers must be at least 1, got 0"),
    (dict(executor="dask"), "--executor must be one of local, slurm, ray, got 'dask'"),
])
def test_a_select_setting_out_of_range_is_refused_naming_its_flag(tmp_path, settings, message):
    """The config refuses a bad setting when it is made, before the stage reads a file."""
    with pytest.raises(UserError, match=re.escape(message)):
        SelectConfig(input=[str(tmp_path)], output=tmp_path / "out", method="random", **settings)


def test_select_settings_are_given_by_name_only(tmp_path):
    """Two settings of one type swapped by position cannot pass unseen: there is no position."""
    with pytest.raises(TypeError):
        SelectConfig([str(tmp_path)], tmp_path / "out", "random", 0.1, 20)


def test_swapped_select_flags_are_one_line_naming_the_flag(tmp_path, prepared, capsys):
    """A ratio given to --block_size and a count to --select_ratio: refused, exit 2, naming the
    first flag, before any output."""
    out = tmp_path / "select"
    with pytest.raises(SystemExit) as refused:
        main(["select", "--input", str(prepared[0]), "--output", str(out), "--method", "random",
              "--block_size", "0.25", "--select_ratio", "20"])
    err = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and len(err.splitlines()) == 1
    assert "argument --block_size: invalid int value: '0.25'" in err and not out.exists()
    assert main(["select", "--input", str(prepared[0]), "--output", str(out), "--method",
                 "random", "--block_size", "20", "--select_ratio", "20"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--select_ratio must lie strictly between 0 and 1, got 20" in err
    assert not out.exists()


@pytest.mark.parametrize("command", ["reproduce", "datamask"])
def test_the_pipeline_has_one_name_in_its_help_and_errors(tmp_path, capsys, command):
    """`python -m reproduce` and `datamask pipeline` are one command: its errors begin with
    `datamask pipeline:` and its usage names it so, whichever way it was started."""
    from datamask.cli import main as datamask_main

    run = main if command == "reproduce" else lambda argv: datamask_main(["pipeline", *argv])
    assert run(["select", "--input", str(tmp_path / "missing"), "--output",
                str(tmp_path / "out"), "--method", "random"]) == 2
    assert capsys.readouterr().err.startswith("datamask pipeline: error: --input ")
    with pytest.raises(SystemExit):
        run(["select", "--help"])
    assert capsys.readouterr().out.startswith("usage: datamask pipeline select ")

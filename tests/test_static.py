"""prepare's static embedding model (model2vec, distilled from the shipped all-MiniLM-L6-v2).

The suite distils a small model (conftest's SMALL_STATIC: the words and word pieces of at most
three letters, PCA to 16 dimensions, about 3 s here); the full distillation (30k tokens) runs only
in `make bench-static`."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SMALL_STATIC, prepare_locally
from datamask.data import read_dataset
from reproduce.cli import main
from reproduce.pipeline.bbc import write_bbc_fineweb
from reproduce.pipeline.embedders import (RECORD, STATIC, Distillation, StaticEmbedder,
                                          default_embedding_model, distillation_key, make_embedder)
from reproduce.pipeline.prepare import HeuristicQuality, PrepareConfig, prepare

pytest.importorskip("model2vec.distill")

SMALL = Distillation(**SMALL_STATIC)
TEXTS = ["The cat sat on the mat.", "Markets fell sharply in London today.", ""]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("static-cache")


@pytest.fixture(scope="module")
def embedder(cache):
    return StaticEmbedder(STATIC, settings=SMALL, cache=cache).load()


@pytest.fixture(scope="module")
def fineweb(tmp_path_factory):
    root = tmp_path_factory.mktemp("static-fineweb")
    write_bbc_fineweb(root / "fineweb", root / "tasks", n_shards=2, limit=16, seed=3)
    return root / "fineweb"


def test_encodes_unit_vectors_of_the_distilled_width_the_same_every_time(embedder, cache):
    vectors = embedder(TEXTS)
    assert vectors.shape == (3, 16) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1, atol=1e-5)
    assert not vectors[2].any()  # no token at all: the zero vector
    assert not np.allclose(vectors[0], vectors[1])
    again = StaticEmbedder(STATIC, settings=SMALL, cache=cache)
    assert np.array_equal(again(TEXTS), vectors)  # loaded from the cache, not distilled again


def test_distils_once_into_the_cache_under_its_key(embedder, cache):
    folder = embedder.folder
    assert [p.name for p in cache.iterdir()] == [folder.name]  # whole: no temporary beside it
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    StaticEmbedder(STATIC, settings=SMALL, cache=cache).load()
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    record = json.loads((folder / RECORD).read_text())
    assert record["key"] == embedder.identity["model"] and record["dim"] == 16
    other = Distillation(pca_dims=4, token_remove_pattern=SMALL.token_remove_pattern)
    assert distillation_key(embedder.source, other) != record["key"]


def test_a_saved_folder_is_the_same_model_as_the_cached_distillation(embedder, small_static):
    from_folder = StaticEmbedder(f"{STATIC}:{small_static}")
    assert from_folder.identity == embedder.identity
    as_is = make_embedder(str(small_static))  # a model2vec folder given without static:
    assert isinstance(as_is, StaticEmbedder) and as_is.identity == embedder.identity
    assert np.allclose(from_folder(TEXTS), embedder(TEXTS), atol=1e-6)


def test_prepare_writes_static_vectors_and_reuses_them(tmp_path, fineweb, small_static):
    out = tmp_path / "prepared"
    spec = f"{STATIC}:{small_static}"
    assert main(["prepare", "--input", str(fineweb), "--output", str(out), "--embedding_model",
                 spec, "--quality", "heuristic", "--no_progress"]) == 0
    data = read_dataset(sorted(out.glob("*.parquet")))
    assert data.dim == 16 and np.allclose(np.linalg.norm(data.features, axis=1), 1, atol=1e-5)
    texts = [t for f in sorted(fineweb.glob("*.parquet"))
             for t in pq.read_table(f).column("text").to_pylist()]
    assert np.allclose(data.features, StaticEmbedder(spec)(texts), atol=1e-6)
    again = prepare(PrepareConfig(input=[fineweb], output=out, no_progress=True),
                    embedder=StaticEmbedder(spec), scorer=HeuristicQuality())
    assert again["embedded"] == 0 and again["embedder"]["model"].startswith("model2vec:")


def refused(capsys, argv: list[str], *words: str) -> str:
    capsys.readouterr()  # what the fixtures printed
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    return err


def test_a_missing_or_foreign_static_folder_is_refused_before_any_work(tmp_path, capsys,
                                                                       fineweb):
    out = tmp_path / "out"
    base = ["prepare", "--input", str(fineweb), "--output", str(out), "--quality", "heuristic"]
    refused(capsys, base + ["--embedding_model", f"{STATIC}:{tmp_path / 'none'}"],
            "--embedding_model", "no such folder")
    refused(capsys, base + ["--embedding_model", f"{STATIC}:{default_embedding_model()}"],
            "--embedding_model", "not a model2vec folder")
    assert not out.exists()


def test_a_distillation_without_its_transformer_is_refused(tmp_path, capsys, small_static):
    for source, words in [(tmp_path / "none", "no such folder"), (tmp_path, "not a transformer"),
                          (small_static, "already static")]:
        refused(capsys, ["distil", "--output", str(tmp_path / "model"), "--source", str(source)],
                "--source", words)
    assert not (tmp_path / "model").exists()
    refused(capsys, ["distil", "--output", str(small_static)], "--output", "already exists")


def test_static_into_an_output_of_another_model_is_refused(tmp_path, capsys, fineweb,
                                                            small_static):
    out = prepare_locally(fineweb, tmp_path / "prepared")  # the transformer's vectors
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    refused(capsys, ["prepare", "--input", str(fineweb), "--output", str(out), "--quality",
                     "heuristic", "--embedding_model", f"{STATIC}:{small_static}"],
            "--embedding_model", str(out), "another embedding model")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == stamps


def test_a_fit_on_target_vectors_is_the_same_for_a_seed_and_leaves_its_base_alone(embedder,
                                                                                  fineweb):
    """bench-static's static model fitted with tokenlearn (on a handful of documents here, with
    seeded targets): unit vectors of the base's width that moved, the same again for the same seed
    (up to the threads' summation order), and the base model untouched."""
    bench = pytest.importorskip("reproduce.bench.static")
    texts = [t for f in sorted(fineweb.glob("*.parquet"))
             for t in pq.read_table(f, columns=["text"]).column("text").to_pylist()]
    targets = np.random.default_rng(0).standard_normal((len(texts), 12)).astype(np.float32)
    before = embedder(texts)
    first, second = (bench.fitted(embedder, texts, targets, seed=0)(texts) for _ in range(2))
    assert first.shape == before.shape
    assert np.allclose(np.linalg.norm(first, axis=1), 1, atol=1e-5)
    assert not np.allclose(first, before, atol=1e-3)
    assert np.allclose(first, second, atol=1e-5)
    assert np.array_equal(embedder(texts), before)


def test_the_fit_sample_is_seeded_and_never_smaller_than_tokenlearns_held_out_tenth_needs():
    from reproduce.bench.static import sample
    assert len(sample(642, 0.05, 0)) == 32 and len(sample(642, 1.0, 0)) == 642
    assert len(sample(100, 0.01, 0)) == 10 and len(sample(6, 0.5, 0)) == 6
    assert np.array_equal(sample(642, 0.25, 0), sample(642, 0.25, 0))
    assert sorted(sample(642, 1.0, 3)) == list(range(642))


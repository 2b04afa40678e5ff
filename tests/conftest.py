"""Test data shared by the test files: import the helpers with `from conftest import ...` (pytest
puts this folder on the path)."""

import os

# One torch thread in the suite and in every process it starts, whatever the shell sets: its
# tensors are small, so a second thread only adds synchronisation, and tests that start two
# workers would put four threads on a 2-core machine. Set before anything imports torch. numba
# (imported by apricot) resets the process's OpenMP thread count to its own setting, one per core
# unless told otherwise.
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")

import fcntl
import gzip
import json
import shutil
import struct
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.data import Dataset, write_dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# `make test` runs each file whole on one of two workers (pytest-xdist, --dist loadfile), handing
# the files out in collection order. The slowest go first, so that the short files fill in
# around them and both workers end together; xdist's own order (most tests first) would leave
# the one-test Slurm file, among the slowest, for last.
SLOWEST_FIRST = ("test_ray.py", "test_downstream.py", "test_slurm.py", "test_downstream_alone.py",
                 "test_experiments.py", "test_bench_corpus.py", "test_bench_blocks.py",
                 "test_ddp.py", "test_orphans.py", "test_stage_worker.py", "test_merge_round.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order


def gaussian_data(n: int, dim: int, seed: int) -> Dataset:
    """Unclustered rows: standard normal features, quality uniform in [0, 5), ids from 100."""
    rng = np.random.default_rng(seed)
    return Dataset(ids=np.arange(n, dtype=np.int64) + 100,
                   quality=rng.uniform(0, 5, n).astype(np.float32),
                   features=rng.standard_normal((n, dim)).astype(np.float32))


def write_shard(path: Path, data: Dataset, **extra) -> Path:
    """`data` as a prepared Parquet shard at `path` (extra columns as pyarrow arrays)."""
    write_dataset(path, data, extra=extra or None)
    return path


# ---------------------------------------------------------------- the small web-like pool
# Built once in a run of the suite from a few hundred documents, by the first of pytest-xdist's
# workers to ask (`built_once`), and copied by each (tests/test_pool.py tests its parts; the
# calibration and downstream tests read it).

SEED = 3
HELDOUT = 4_000
TASKS = 10
TOPICS = sorted(topics)[:45]


def _r_chars(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">ii", 0x00040009, len(data)) + data


def _r_strings(values: list[str]) -> bytes:
    return struct.pack(">ii", 16, len(values)) + b"".join(_r_chars(v) for v in values)


def _r_named_list(items: dict[str, bytes]) -> bytes:
    names = struct.pack(">ii", 2 | 1 << 10, 1) + _r_chars("names") + _r_strings(list(items))
    return (struct.pack(">ii", 19 | 1 << 9, len(items)) + b"".join(items.values()) + names
            + struct.pack(">i", 254))


def _r_serialized(item: bytes) -> bytes:
    return b"X\n" + struct.pack(">iiii", 3, 0x040201, 0x030500, 5) + b"UTF-8" + item


def write_janeaustenr(root, novels: dict[str, list[str]]) -> None:
    """Rdata.rdb/.rdx as R's lazy-load database stores janeaustenr's character vectors."""
    data = root / "usr/lib/R/site-library/janeaustenr/data"
    data.mkdir(parents=True)
    blob, index = b"", {}
    for name, lines in novels.items():
        raw = _r_serialized(_r_strings(lines))
        record = struct.pack(">I", len(raw)) + zlib.compress(raw)
        index[name] = struct.pack(">ii", 13, 2) + struct.pack(">ii", len(blob), len(record))
        blob += record
    (data / "Rdata.rdb").write_bytes(blob)
    top = _r_named_list({"variables": _r_named_list(index),
                         "references": struct.pack(">ii", 19, 0),
                         "compressed": struct.pack(">iii", 10, 1, 1)})
    (data / "Rdata.rdx").write_bytes(gzip.compress(_r_serialized(top)))


def write_foldoc(root, entries: dict[str, str]) -> None:
    folder = root / "usr/share/dictd"
    folder.mkdir(parents=True)
    text = "\n00-database-info\n   This file was converted by dictfmt.\n\n"
    for head, body in entries.items():
        text += f"{head}\n\n" + textwrap.indent(body, "   ") + "\n\n   (2001-02-03)\n\n"
    (folder / "foldoc.dict.dz").write_bytes(gzip.compress(text.encode()))


def write_rst(root, files: dict[str, str]) -> None:
    folder = root / "usr/share/doc/python3.11/html/_sources/reference"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / f"{name}.rst.txt").write_text(text)


@pytest.fixture(scope="session")
def units(tmp_path_factory):
    """Small real-text units of the four domains, read by the real readers from files in their
    packages' formats (Python's pydoc topics as reST and dictionary entries, BBC text as a novel)."""
    from reproduce.pipeline.bbc import bbc_articles
    from reproduce.pool import sources

    root = tmp_path_factory.mktemp("sources")
    write_rst(root / "docs", {name: topics[name] for name in TOPICS[:20]})
    write_foldoc(root / "reference", {name: "<python> " + topics[name][:1500] + " See {glossary}."
                                      for name in TOPICS[20:]})
    articles = bbc_articles()[1000:1050]
    lines = [line for a in articles for p in a["paragraphs"] for line in textwrap.wrap(p, 70) + [""]]
    write_janeaustenr(root / "books", {"novelone": lines[:len(lines) // 2],
                                       "noveltwo": lines[len(lines) // 2:]})
    return {"news": sources.news_units(90),
            "docs": sources.docs_units(root / "docs"),
            "reference": sources.reference_units(root / "reference"),
            "books": sources.books_units(root / "books")}


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `build(folder)` writes, built once in a run of the suite: under pytest-xdist the
    first worker to ask builds it in the run's own temporary folder, above the workers' folders,
    while another that asks waits on a lock; later ones find it there. Built in the pipeline's
    `atomic_folder`, so a failed build leaves nothing to be taken for a finished one."""
    from reproduce.pipeline.common import atomic_folder

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / "built-once" / name
    folder.parent.mkdir(exist_ok=True)
    with (folder.parent / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.is_dir():
            with atomic_folder(folder) as tmp:
                build(tmp)
    return folder


def shared_pool(tmp_path_factory, request) -> Path:
    from reproduce.pool.build import PoolConfig, build_pool

    return built_once(tmp_path_factory, "pool", lambda folder: build_pool(
        folder, PoolConfig(seed=SEED, heldout_chars=HELDOUT, task_articles=TASKS, shards=2),
        units=request.getfixturevalue("units")))


@pytest.fixture(scope="session")
def pool(tmp_path_factory, request):
    """The pool's folder, pool.json's content and its FineWeb rows. The folder is this worker's
    copy (tests write beside its shards); copytree keeps the files' times, so prepare's record of
    its inputs holds for the copy."""
    out = tmp_path_factory.mktemp("pool") / "pool"
    shutil.copytree(shared_pool(tmp_path_factory, request), out)
    table = pa.concat_tables([pq.read_table(p) for p in sorted((out / "fineweb").glob("*.parquet"))])
    return out, json.loads((out / "pool.json").read_text()), table.to_pylist()


def prepare_locally(fineweb: Path, output: Path, max_seq_length: int = 32,
                    embedding_model: str | None = None) -> Path:
    """`fineweb`'s shards through the real prepare stage in one process (all-MiniLM-L6-v2, or
    prepare's `--embedding_model`, cut to `max_seq_length` tokens; heuristic quality) into
    `output`."""
    from reproduce.pipeline.prepare import PrepareConfig, prepare

    prepare(PrepareConfig(input=[fineweb], output=output, embedding_model=embedding_model,
                          max_seq_length=max_seq_length, quality="heuristic", no_progress=True))
    return output


# ---------------------------------------------------------------- a small static embedding model
# The suite's model2vec distillation of the shipped all-MiniLM-L6-v2: its vocabulary cut to [UNK],
# [PAD] and the words and word pieces of at most three letters (3,332 tokens), PCA to 16
# dimensions. It distils in about 3 s here (the full 30k tokens: about 30 s), and the chain's BBC
# articles still tell apart (no false near-copy). A stage run with it as `--embedding_model
# static:DIR` never imports sentence-transformers, about 9 CPU-seconds in every process that
# does: the Ray and Slurm prepare checks and the bench-corpus and bench-dedup checks use it.
SMALL_STATIC = {"pca_dims": 16, "token_remove_pattern": r"(?!\[UNK\]$|\[PAD\]$|(##)?[a-z]{1,3}$)"}


def distil_small_static(folder: Path) -> Path:
    from reproduce.pipeline.embedders import Distillation, default_embedding_model, distil

    distil(Path(default_embedding_model()), folder, Distillation(**SMALL_STATIC))
    return folder


@pytest.fixture(scope="session")
def small_static(tmp_path_factory) -> Path:
    """SMALL_STATIC distilled into a folder of its own (prepare's `static:DIR`), once in a run:
    the tests only read it."""
    def build(folder: Path) -> None:
        pytest.importorskip("model2vec.distill")
        distil_small_static(folder)

    return built_once(tmp_path_factory, "small-static", build)


@pytest.fixture(scope="session")
def prepared(pool, tmp_path_factory, request):
    """The pool's shards prepared beside them as the downstream run prepares them, which then
    finds them up to date instead of embedding them again. Embedded once in a run (about 18
    CPU-seconds with the transformer's import), then copied beside this worker's pool."""
    from reproduce.experiments.downstream import POOL_MAX_SEQ_LENGTH

    fineweb = shared_pool(tmp_path_factory, request) / "fineweb"
    shared = built_once(tmp_path_factory, "prepared", lambda folder: prepare_locally(
        fineweb, folder, POOL_MAX_SEQ_LENGTH))
    out, _, _ = pool
    return Path(shutil.copytree(shared, out / "prepared"))

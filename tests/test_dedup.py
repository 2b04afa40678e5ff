"""The dedup stage on a small corpus with planted copies: an exact copy and a copy with a few
words changed (MinHash, on the text), and a near-copy of an embedding with a new id and new text
(SemDeDup's rule inside neighbourhoods); the keep-list, its resumption, its refusals, and
select and tokenize honouring it."""

import dataclasses
import json
import shutil
import sys

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from test_adversarial import refused

from datamask.data import Dataset, budget, write_dataset
from datamask.errors import UserError
from datamask.stratify import largest_remainder
from reproduce.cli import main
from reproduce.pipeline.dedup import (BOUND_DIMS, EMBEDDING_SETTINGS, KEEP_FILE, MANIFEST,
                                      MINHASH_SETTINGS, REMOVALS_FILE, DedupConfig, FindPairs,
                                      PlanRegions, RouteRows, bound_vectors, keep_first,
                                      principal_basis, routed_rows, run_dedup, similar_pairs)
from reproduce.pipeline.minhash import (BACKENDS, DEFAULT_BACKEND, shingle_hashes, simplified,
                                       split_words)
from reproduce.pipeline.select import SelectConfig, run_select
from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer

DIM = 32
# task 0 reads shards 0 and 2, task 1 shard 1: both text copies' clusters span the two tasks, so
# that one task may keep a copy and remove none
TASKS = 2
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def words(rng, n: int, vocabulary: list[str]) -> str:
    return " ".join(rng.choice(vocabulary, n))


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def write_corpus(root, rng, shards: dict[int, list[tuple[str, str, float, np.ndarray]]]):
    """FineWeb shards under root/fineweb and their prepared rows under root/prepared, from
    {shard: [(id, text, quality, embedding)]}."""
    (root / "fineweb").mkdir(parents=True)
    (root / "prepared").mkdir()
    first = 0
    for shard, rows in shards.items():
        ids, texts, quality, features = map(list, zip(*rows))
        pq.write_table(pa.table({"id": ids, "text": texts}),
                       root / "fineweb" / f"{shard:05d}.parquet")
        write_dataset(root / "prepared" / f"{shard:05d}.parquet",
                      Dataset(np.arange(first, first + len(ids), dtype=np.int64),
                              np.array(quality, np.float32), np.array(features, np.float32)),
                      extra={"id": pa.array(ids)})
        first += len(ids)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three shards of 20 distinct documents each (200 random words; random unit embeddings),
    plus: in shard 0 an exact copy of s1-4; in shard 1 a copy of s0-6 with three words changed,
    a new document whose embedding is s2-9's plus noise 0.01 at unit length, of lower quality,
    an empty document and a three-word one (no MinHash shingle)."""
    root = tmp_path_factory.mktemp("dedup")
    rng = np.random.default_rng(0)
    vocabulary = ["".join(rng.choice(LETTERS, 6)) for _ in range(3000)]
    shards = {s: [(f"s{s}-{i}", words(rng, 200, vocabulary), float(rng.uniform(1, 4)),
                   unit(rng.standard_normal(DIM))) for i in range(20)] for s in range(3)}
    text = {row[0]: row[1] for rows in shards.values() for row in rows}
    edited = text["s0-6"].split()
    for at in (20, 90, 160):
        edited[at] = "changed"
    original = shards[2][9]
    shards[0].append(("exact-copy", text["s1-4"], 2.0, unit(rng.standard_normal(DIM))))
    shards[1] += [
        ("edited-copy", " ".join(edited), 2.0, unit(rng.standard_normal(DIM))),
        ("embedding-copy", words(rng, 200, vocabulary), original[2] - 0.5,
         unit(original[3] + rng.normal(0, 0.01, DIM))),
        ("empty", "", 1.0, unit(rng.standard_normal(DIM))),
        ("short", "three words only", 1.0, unit(rng.standard_normal(DIM)))]
    write_corpus(root, rng, shards)
    return root


def dedup(root, output, **flags) -> dict:
    return run_dedup(DedupConfig(input=root / "fineweb", prepared=root / "prepared",
                                 output=output, **{"tasks": TASKS, **flags}))


@pytest.fixture(scope="module")
def deduped(corpus):
    dedup(corpus, corpus / "out")
    return corpus / "out"


def removals(folder) -> dict[str, tuple[str, str]]:
    table = pq.read_table(folder / REMOVALS_FILE).to_pylist()
    return {row["id"]: (row["reason"], row["duplicates"]) for row in table}


def input_ids(root) -> list[str]:
    return [i for path in sorted((root / "fineweb").glob("*.parquet"))
            for i in pq.read_table(path).column("id").to_pylist()]


def quality_of(root) -> dict[str, float]:
    table = pa.concat_tables(pq.read_table(p, columns=["id", "quality_score"])
                             for p in sorted((root / "prepared").glob("*.parquet")))
    return dict(zip(table.column("id").to_pylist(), table.column("quality_score").to_pylist()))


def test_planted_copies_are_removed_with_their_reason_and_the_id_they_duplicate(deduped, corpus):
    removed = removals(deduped)
    assert len(removed) == 3, removed
    quality = quality_of(corpus)
    for copy, original in (("exact-copy", "s1-4"), ("edited-copy", "s0-6")):
        # of a MinHash cluster the copy of higher quality stays
        kept, gone = sorted((copy, original), key=quality.get, reverse=True)
        assert removed[gone] == ("minhash", kept)
    assert removed["embedding-copy"] == ("embedding", "s2-9")  # the copy of higher quality stays
    table = pq.read_table(deduped / REMOVALS_FILE)
    similarity = table.column("similarity").to_pylist()
    reasons = table.column("reason").to_pylist()
    assert similarity[reasons.index("embedding")] > 0.99
    assert similarity[reasons.index("minhash")] is None


def test_the_keep_list_holds_every_input_id_once_in_input_order(deduped, corpus):
    keep = pq.read_table(deduped / KEEP_FILE)
    assert keep.column("id").to_pylist() == input_ids(corpus)  # the empty document included
    gone = set(removals(deduped))
    assert [not k for k in keep.column("keep").to_pylist()] == [
        i in gone for i in keep.column("id").to_pylist()]
    manifest = json.loads((deduped / MANIFEST).read_text())
    assert manifest["input"]["rows"] == len(keep)
    assert manifest["removed"] == {"minhash": 2, "embedding": 1}
    assert manifest["minhash"]["num_buckets"] == 14 and manifest["embedding"]["threshold"] == 0.99
    # the bulky working copies are gone; what the keep-list was made of stays
    assert not (deduped / "minhash" / "signatures").exists()
    assert not (deduped / "regions").exists()


@pytest.mark.parametrize("minhash", BACKENDS)
def test_either_step_alone_finds_its_own_copies(corpus, tmp_path, minhash):
    text = run_dedup(DedupConfig(input=corpus / "fineweb", output=tmp_path / "text", tasks=TASKS,
                                 minhash=minhash))
    assert text["removed"] == {"minhash": 2, "embedding": 0}
    assert text["minhash"]["backend"] == minhash
    order = input_ids(corpus)  # without --prepared, the first in input order stays
    for copy, original in (("exact-copy", "s1-4"), ("edited-copy", "s0-6")):
        kept, gone = sorted((copy, original), key=order.index)
        assert removals(tmp_path / "text")[gone] == ("minhash", kept)
    embedding = run_dedup(DedupConfig(prepared=corpus / "prepared", output=tmp_path / "embedding",
                                      tasks=TASKS))
    assert embedding["removed"] == {"minhash": 0, "embedding": 1}
    assert removals(tmp_path / "embedding") == {"embedding-copy": ("embedding", "s2-9")}


@pytest.fixture(scope="module", params=BACKENDS)
def deduped_by(request, corpus, deduped):
    """The keep-list of each MinHash library: (its folder, the library)."""
    if request.param == DEFAULT_BACKEND:  # made once for the module
        return deduped, request.param
    dedup(corpus, corpus / f"out-{request.param}", minhash=request.param)
    return corpus / f"out-{request.param}", request.param


def test_a_killed_run_reruns_only_what_is_missing_and_writes_the_same_keep_list(deduped_by,
                                                                                 tmp_path):
    """As a kill -9 leaves it: the keep-list not written, one filter task and one pair task
    without their markers and outputs (a task's outputs are written before its marker), and
    what two killed writers left half-written beside their files."""
    deduped, minhash = deduped_by
    out = tmp_path / "out"
    shutil.copytree(deduped, out)
    for name in (KEEP_FILE, REMOVALS_FILE, MANIFEST):
        (out / name).unlink()
    (out / "logs" / "filters" / "completions" / "00001").unlink()
    for written in (out / "minhash").glob("*/*_00001.parquet"):
        written.unlink()
    (out / "logs" / "pairs" / "completions" / "00000").unlink()
    (out / "pairs" / "00000.parquet").unlink()
    half_written = [out / "pairs" / ".00000.parquet.0badc0de.tmp",
                    out / ".keep.parquet.0badc0de.tmp"]
    for path in half_written:
        path.write_bytes(b"PAR1")
    untouched = {p: p.stat().st_mtime_ns for p in (out / "minhash" / "buckets").iterdir()}
    dedup(deduped.parent, out, minhash=minhash)
    for name in (KEEP_FILE, REMOVALS_FILE):
        assert pq.read_table(out / name).equals(pq.read_table(deduped / name)), name
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched  # the buckets did not rerun
    assert not any(path.exists() for path in half_written)
    first = json.loads((out / MANIFEST).read_text())
    # a finished run returns its manifest at once
    assert dedup(deduped.parent, out, minhash=minhash) == first


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Five shards of 12 documents (200 random words, random embeddings), and copies spread
    over them: six MinHash clusters of three (an original, an exact copy, a copy with four words
    changed), whose qualities tie in the even ones, so the first in input order stays, and differ
    in the odd ones, so the highest stays; and four embedding originals with two copies each, at
    the same vector (their cosines tie) and at noise 0.01, new texts."""
    root = tmp_path_factory.mktemp("clusters")
    rng = np.random.default_rng(5)
    vocabulary = ["".join(rng.choice(LETTERS, 6)) for _ in range(3000)]
    shards = {s: [(f"s{s}-{i}", words(rng, 200, vocabulary), float(rng.uniform(1, 4)),
                   unit(rng.standard_normal(DIM))) for i in range(12)] for s in range(5)}
    for k in range(6):
        text = words(rng, 200, vocabulary)
        edited = text.split()
        for at in (30, 80, 130, 180):
            edited[at] = "changed"
        qualities = [2.0] * 3 if k % 2 == 0 else [1.0, 3.0, 2.0]
        members = zip(("original", "exact", "edited"), (text, text, " ".join(edited)), qualities)
        for j, (kind, member, quality) in enumerate(members):
            # each member in another shard, the copies in shards before the original's where k
            # is odd, after it where k is even
            shard = (k + (j if k % 2 == 0 else -j)) % 5
            shards[shard].append((f"c{k}-{kind}", member, quality, unit(rng.standard_normal(DIM))))
    for k in range(4):
        original = shards[k][k + 6]
        shards[(k + 1) % 5].append((f"e{k}-same", words(rng, 200, vocabulary), 1.0,
                                    original[3]))
        shards[(k + 2) % 5].append((f"e{k}-near", words(rng, 200, vocabulary), 1.0,
                                    unit(original[3] + rng.normal(0, 0.01, DIM))))
    write_corpus(root, rng, shards)
    return root


@pytest.mark.parametrize("minhash", BACKENDS)
@pytest.mark.parametrize("tasks", [3, 4])
def test_the_keep_list_does_not_depend_on_the_tasks(clusters, tasks, minhash):
    """The keep-list of 1, 3 and 4 tasks (signature and filter tasks over 5 shards, pair tasks
    over 5 regions) is the same, file for file, with either MinHash library; of each MinHash
    cluster the copy of highest quality stays, ties to the first in input order."""
    one = clusters / f"{minhash}-tasks-1"
    if not one.exists():
        run_dedup(DedupConfig(input=clusters / "fineweb", prepared=clusters / "prepared",
                              output=one, region_rows=20, tasks=1, minhash=minhash))
    out = clusters / f"{minhash}-tasks-{tasks}"
    manifest = run_dedup(DedupConfig(input=clusters / "fineweb", prepared=clusters / "prepared",
                                     output=out, region_rows=20, tasks=tasks, minhash=minhash))
    assert manifest["embedding"]["regions"] == 5 and manifest["minhash"]["tasks"] == tasks
    for name in (KEEP_FILE, REMOVALS_FILE):
        assert pq.read_table(out / name).equals(pq.read_table(one / name)), name
    removed, order = removals(out), input_ids(clusters)
    quality = quality_of(clusters)
    for k in range(6):
        members = [f"c{k}-{kind}" for kind in ("original", "exact", "edited")]
        stays = min(members, key=lambda i: (-quality[i], order.index(i)))
        assert stays not in removed
        assert {removed[m] for m in members if m != stays} == {("minhash", stays)}
    for k in range(4):
        assert {removed[f"e{k}-{kind}"][0] for kind in ("same", "near")} == {"embedding"}


def one_region(ids, quality, features, threshold):
    """SemDeDup's rule over every pair of the rows at once."""
    return keep_first(ids, quality, *similar_pairs(features, np.arange(len(features)),
                                                   threshold))


def test_the_bound_is_never_below_a_cosine():
    """bound_vectors on a few leading directions: for every pair of unit rows the bound's dot
    product is at least their cosine, and it is the cosine where the basis holds the rows."""
    rng = np.random.default_rng(4)
    rows = unit(rng.standard_normal((300, 40))).astype(np.float32)
    cosine = rows.astype(np.float64) @ rows.astype(np.float64).T
    for dims in (1, 5, 20):
        bound = bound_vectors(rows, principal_basis(rows, dims)).astype(np.float64)
        assert (bound @ bound.T >= cosine - 1e-6).all(), dims
    flat = unit(np.hstack([rng.standard_normal((50, 3)), np.zeros((50, 37))])).astype(np.float32)
    bound = bound_vectors(flat, principal_basis(flat, 3)).astype(np.float64)
    assert np.allclose(bound @ bound.T, flat.astype(np.float64) @ flat.T, atol=1e-5)


def test_the_bounded_pairs_are_those_of_comparing_every_pair(monkeypatch):
    """Rows of 64 dimensions in tight clusters, about half their pairs within a cluster above
    the threshold: with the bound on 2, 8 or BOUND_DIMS directions the pairs and cosines are
    those of comparing every pair in full (a row with itself no pair; a pair of two own rows in
    one order at least), for any split and order of the own rows; with small tiles most pairs of
    two own rows are bounded once."""
    rng = np.random.default_rng(5)
    centres = unit(rng.standard_normal((20, 64)))
    rows = unit(np.repeat(centres, 30, axis=0)
                + rng.normal(0, 0.012, (600, 64))).astype(np.float32)
    full = rows.astype(np.float64) @ rows.astype(np.float64).T
    threshold = 0.99 + 1e-9  # no pair within float64 rounding of it
    assert not (np.abs(full - threshold) < 1e-12).any()
    np.fill_diagonal(full, 0)  # a row is no pair of itself
    expected = set(zip(*np.nonzero(full[:250] >= threshold)))
    assert 300 < len(expected) < (full[:250] > 0.9).sum()  # pairs on both sides

    def unordered(pairs):
        return {frozenset(map(int, pair)) for pair in pairs}

    def check(found):
        found = list(found)
        assert set(found) <= expected and unordered(found) == unordered(expected)

    for dims in (2, 8, BOUND_DIMS):
        first, second, cosine = similar_pairs(rows, np.arange(250), threshold, bound_dims=dims)
        check(zip(first, second))
        assert np.allclose(cosine, full[first, second], atol=1e-6)
    import reproduce.pipeline.dedup as dedup  # small tiles: most hold no pair and are skipped
    monkeypatch.setattr(dedup, "TILE_ROWS", 16)
    monkeypatch.setattr(dedup, "TILE_AMONG", 16)
    small = list(zip(*similar_pairs(rows, np.arange(250), threshold)[:2]))
    check(small)
    both_own = [pair for pair in expected if pair[1] < 250]
    assert len(expected) - len(small) > 0.2 * len(both_own)  # bounded once, not twice
    order = np.random.default_rng(6).permutation(250)  # own rows in any order, any split
    halves = [(order[a:b], similar_pairs(rows, order[a:b], threshold))
              for a, b in ((0, 100), (100, 250))]
    check(zip(np.concatenate([own[first] for own, (first, _, _) in halves]),
              np.concatenate([second for _, (_, second, _) in halves])))


def test_the_copy_of_higher_quality_stays_and_ties_keep_the_smaller_id():
    base = unit(np.eye(4)[0] + 0.001 * np.arange(4))
    near = unit(base + np.array([0, 0.002, 0, 0]))
    features = np.stack([base, near, near, np.eye(4)[3]])
    ids = np.array(["b", "a", "c", "z"], dtype=object)
    gone, copied, similarity = one_region(ids, np.array([1.0, 3.0, 3.0, 3.0]), features, 0.99)
    # "a" and "c" tie on quality: "a" (the smaller id) stays, and is the most similar kept row
    assert sorted(zip(ids[gone], ids[copied])) == [("b", "a"), ("c", "a")]
    assert (similarity >= 0.99).all()


def test_a_tie_in_similarity_names_the_earlier_row_whatever_the_pairs_order():
    """c is as similar to a as to b, which both stay: it duplicates a (higher quality) however
    the pair tasks' pairs come, and a pair found in two regions counts once."""
    ids = np.array(["a", "b", "c"], dtype=object)
    quality = np.array([3.0, 2.0, 1.0])
    pairs = [(0, 2, 0.995), (1, 2, 0.995), (2, 0, 0.995), (2, 1, 0.995), (0, 2, 0.995)]
    for order in ([0, 1, 2, 3, 4], [3, 1, 4, 2, 0], [1, 0]):
        first, second, similarity = (np.array(v) for v in zip(*[pairs[i] for i in order]))
        gone, copied, _ = keep_first(ids, quality, first, second, similarity)
        assert ids[gone].tolist() == ["c"] and ids[copied].tolist() == ["a"], order


def test_a_row_near_only_a_removed_row_stays():
    """A is kept; B, at 0.995 of A, goes; C, at 0.995 of B but below the threshold to A, stays:
    every removal names a row the keep-list keeps."""
    angle = np.arccos(0.995)
    features = np.array([[np.cos(k * angle), np.sin(k * angle)] for k in range(3)])
    ids = np.array(["a", "b", "c"], dtype=object)
    gone, copied, _ = one_region(ids, np.array([3.0, 2.0, 1.0]), features, 0.993)
    assert ids[gone].tolist() == ["b"] and ids[copied].tolist() == ["a"]


def near_copies(root):
    """300 unit rows in 6 dimensions and 150 near-copies (of originals and of copies, cosine about
    0.995, random quality), as prepared rows in root/prepared: (ids, quality, rows)."""
    rng = np.random.default_rng(3)
    rows = unit(rng.standard_normal((300, 6)))
    for _ in range(150):
        rows = np.vstack([rows, unit(rows[rng.integers(len(rows))] + rng.normal(0, 0.04, 6))])
    ids = np.array([f"r{i:03d}" for i in range(len(rows))], dtype=object)
    quality = rng.uniform(0, 1, len(rows))
    (root / "prepared").mkdir()
    write_dataset(root / "prepared" / "00000.parquet",
                  Dataset(np.arange(len(rows)), quality, rows.astype(np.float32)),
                  extra={"id": pa.array(ids.tolist())})
    return ids, quality, rows


def test_regions_with_guests_remove_what_one_region_of_all_rows_removes(tmp_path):
    """The near copies in 15 regions: with guests across the cuts the keep-list and every
    removal's reasons are those of a single region; inside the regions only, the copies a cut
    separates from every row they copy stay; a quarter margin routes fewer guests."""
    ids, quality, rows = near_copies(tmp_path)
    prepared = tmp_path / "prepared"
    whole = run_dedup(DedupConfig(prepared=prepared, output=tmp_path / "whole",
                                  region_rows=len(rows)))
    found = {pairs: run_dedup(DedupConfig(prepared=prepared, output=tmp_path / pairs,
                                          region_rows=30, region_pairs=pairs, tasks=2))
             for pairs in ("all", "inside")}
    assert whole["embedding"]["regions"] == 1 and found["all"]["embedding"]["regions"] == 15
    assert found["all"]["routed"]["routed"] > found["inside"]["routed"]["routed"] == len(rows)
    for name in (KEEP_FILE, REMOVALS_FILE):
        assert pq.read_table(tmp_path / "all" / name).equals(pq.read_table(tmp_path / "whole" / name))
    assert found["inside"]["removed"]["embedding"] < whole["removed"]["embedding"]
    fewer = run_dedup(DedupConfig(prepared=prepared, output=tmp_path / "quarter", region_rows=30,
                                  guest_margin=0.25, tasks=2))
    assert len(rows) < fewer["routed"]["routed"] < found["all"]["routed"]["routed"]
    assert fewer["embedding"]["guest_margin"] == 0.25
    gone, copied, _ = one_region(ids, quality, rows.astype(np.float32), 0.99)
    assert sorted(removals(tmp_path / "whole").items()) == sorted(
        (i, ("embedding", c)) for i, c in zip(ids[gone], ids[copied]))


def test_a_pair_task_holds_one_region_at_a_time(tmp_path, monkeypatch):
    """The guests make the routed rows many times the input (26 per row at a million rows in 100
    regions), so the route tasks write a folder per region, every input row the own row of
    exactly one, the same files from two tasks as from one, and pair task r of N reads the
    folders r, r + N, ... one after the other, finding together the pairs one task finds."""
    ids, _, _ = near_copies(tmp_path)
    table = pq.read_table(tmp_path / "prepared" / "00000.parquet")
    shards = []
    for index, (start, stop) in enumerate(((0, 150), (150, 300), (300, len(table)))):
        shards.append(str(tmp_path / "shards" / f"{index:05d}.parquet"))
        Path(shards[-1]).parent.mkdir(exist_ok=True)
        pq.write_table(table.slice(start, stop - start), shards[-1])
    for out, tasks in ((tmp_path / "one", 1), (tmp_path / "out", 2)):
        config = DedupConfig(prepared=tmp_path / "shards", output=out)
        list(PlanRegions(config, shards, 15, len(ids)).run())
        for rank in range(tasks):
            list(RouteRows(config, shards).run(rank=rank, world_size=tasks))
    files = sorted(f.relative_to(out) for f in (out / "regions").rglob("*.parquet"))
    assert files == sorted(f.relative_to(tmp_path / "one")
                           for f in (tmp_path / "one" / "regions").rglob("*.parquet"))
    assert all(pq.read_table(out / f).equals(pq.read_table(tmp_path / "one" / f)) for f in files)
    folders = sorted(f for f in (out / "regions").iterdir() if f.is_dir())
    tables = [pq.read_table(f) for folder in folders for f in folder.glob("*.parquet")]
    own = pa.concat_tables(tables).filter(pc.field("home")).column("id").to_pylist()
    assert len(folders) == 15 and sorted(own) == sorted(ids)
    assert routed_rows(out) == {"rows": len(ids), "routed": sum(len(t) for t in tables)}
    assert routed_rows(out)["routed"] > len(ids)
    read = []
    spied = pq.read_table
    monkeypatch.setattr(pq, "read_table",
                        lambda path, *a, **k: read.append(path) or spied(path, *a, **k))

    def pairs(rank: int, world_size: int) -> set:
        read.clear()
        list(FindPairs(str(out), 0.99).run(rank=rank, world_size=world_size))
        regions = [int(path.parent.name) for path in read]
        assert regions == sorted(regions) and set(regions) == set(range(rank, 15, world_size))
        table = spied(out / "pairs" / f"{rank:05d}.parquet")
        return set(zip(table.column("id").to_pylist(), table.column("other").to_pylist()))

    assert pairs(0, 2) | pairs(1, 2) == pairs(0, 1)


def test_tokenize_leaves_out_what_the_keep_list_removes(deduped, corpus, tmp_path):
    train_tokenizer([str(corpus / "fineweb")], tmp_path / "tokenizer.json", vocab_size=300)
    ids = input_ids(corpus)
    pq.write_table(pa.table({"id": ids, "selected": [i != "empty" for i in ids]}),
                   tmp_path / "selection.parquet")
    summary = run_tokenize(TokenizeConfig(input=corpus / "fineweb",
                                          selection=tmp_path / "selection.parquet",
                                          tokenizer=tmp_path / "tokenizer.json",
                                          output=tmp_path / "tokens", keep=deduped))
    assert summary["documents"] == len(ids) - 1 - len(removals(deduped))


def prepared_ids(root) -> list[str]:
    return [i for path in sorted((root / "prepared").glob("*.parquet"))
            for i in pq.read_table(path, columns=["id"]).column("id").to_pylist()]


def rewritten_keep_list(keep_list, folder, keep: bool):
    """A copy of `keep_list` that keeps every row (`keep`) or none."""
    shutil.copytree(keep_list, folder)
    ids = pq.read_table(folder / KEEP_FILE).column("id")
    pq.write_table(pa.table({"id": ids, "keep": [keep] * len(ids)}), folder / KEEP_FILE)
    return folder


SELECT_KEEP = {
    "one block": {"method": "quality-topk"},
    # the term scale's sample, neighbourhood routing and the merge round over kept rows only
    "blocks, merge round": {"method": "joint-greedy", "block_size": 20, "merge_ratio": 0.9,
                            "merge_partition": "random", "partition": "neighbourhood"},
    "blocks, strata": {"method": "quality-topk", "block_size": 20, "merge_ratio": 0.9,
                       "stratify": "domain"},
}


@pytest.mark.parametrize("flags", SELECT_KEEP.values(), ids=SELECT_KEEP.keys())
def test_select_leaves_out_what_the_keep_list_removes(deduped, corpus, tmp_path, flags):
    """No removed row is selected or counted: the selection is budget(0.8) of the kept rows (per
    stratum, the kept rows' share), and selection.parquet still lists every prepared row once, in
    prepared order, the removed ones in no block."""
    ids, gone = prepared_ids(corpus), set(removals(deduped))
    kept = [i for i in ids if i not in gone]
    if "stratify" in flags:  # the shard a document came from, looked up by id
        domains = pa.table({"id": ids, "domain": [i.split("-")[0] for i in ids]})
        pq.write_table(domains, tmp_path / "domains.parquet")
        flags = {**flags, "strata_from": [str(tmp_path / "domains.parquet")]}
    summary = run_select(SelectConfig(input=[str(corpus / "prepared")], output=tmp_path / "out",
                                      select_ratio=0.8, keep=deduped, **flags))
    table = pq.read_table(tmp_path / "out" / "selection.parquet").to_pydict()
    assert table["id"] == ids
    chosen = [i for i, s in zip(ids, table["selected"]) if s]
    assert not set(chosen) & gone
    assert len(chosen) == summary["selected"] == budget(0.8, len(kept)) == 50
    assert summary["removed_by_keep"] == 3 and summary["keep"] == str(deduped.absolute())
    outside = [at for at, i in enumerate(ids) if i in gone]
    columns = ["block", "union"] if "merge_ratio" in flags else ["block"]
    assert {(table["score"][at], *(table[c][at] for c in columns)) for at in outside} == \
        {(0.0, *[-1] * len(columns))}
    assert all(table["block"][at] >= 0 for at, i in enumerate(ids) if i not in gone)
    if "term_scale" in summary:
        assert summary["term_scale"]["sample_rows"] == len(kept)
    if "stratify" in flags:
        domain = [i.split("-")[0] for i in kept]
        names = sorted(set(domain))
        sizes = [domain.count(d) for d in names]
        assert summary["strata"] == [
            {"value": d, "rows": n, "selected": int(k)} for d, n, k in
            zip(names, sizes, largest_remainder(budget(0.8, len(kept)), np.array(sizes)))]


def test_a_keep_list_that_removes_nothing_selects_as_none_and_another_one_starts_afresh(
        deduped, corpus, tmp_path):
    """A keep-list that removes nothing filters nothing, so the selection is the one without it,
    byte for byte; the keep-list's file is part of the configuration, so a rerun into the same
    folder with another redoes the blocks instead of merging ones planned for other rows."""
    everything = rewritten_keep_list(deduped, tmp_path / "everything", keep=True)
    args = dict(input=[str(corpus / "prepared")], output=tmp_path / "with",
                method="joint-greedy", select_ratio=0.5)
    run_select(SelectConfig(**args, keep=everything))
    run_select(SelectConfig(input=[str(corpus / "prepared")], output=tmp_path / "without",
                            method="joint-greedy", select_ratio=0.5))
    assert (tmp_path / "with" / "selection.parquet").read_bytes() == \
        (tmp_path / "without" / "selection.parquet").read_bytes()
    summary = run_select(SelectConfig(**args, keep=deduped))  # the same output, another list
    table = pq.read_table(tmp_path / "with" / "selection.parquet")
    chosen = set(table.filter(table.column("selected")).column("id").to_pylist())
    assert summary["removed_by_keep"] == 3 and not chosen & set(removals(deduped))


@pytest.fixture(scope="module")
def other_keep_list(corpus, tmp_path_factory):
    """A keep-list of another input: shards 1 and 2, which hold no copy of each other's text."""
    root = tmp_path_factory.mktemp("other")
    (root / "fineweb").mkdir()
    for path in sorted((corpus / "fineweb").glob("*.parquet"))[1:]:
        shutil.copy(path, root / "fineweb")
    run_dedup(DedupConfig(input=root / "fineweb", output=root / "keep"))
    return root / "keep"


def test_text_without_copies_keeps_every_row(other_keep_list):
    assert all(pq.read_table(other_keep_list / KEEP_FILE).column("keep").to_pylist())
    assert pq.read_table(other_keep_list / REMOVALS_FILE).num_rows == 0


@pytest.fixture
def files(corpus, deduped, other_keep_list, tmp_path):
    """The corpus, a selection of it, a tokenizer and a keep-list of another input, in one
    folder that the refused commands must leave as they found it."""
    for name in ("fineweb", "prepared"):
        shutil.copytree(corpus / name, tmp_path / name)
    shutil.copytree(other_keep_list, tmp_path / "other")
    shutil.copytree(deduped, tmp_path / "keep")
    ids = input_ids(corpus)
    pq.write_table(pa.table({"id": ids, "selected": [True] * len(ids)}),
                   tmp_path / "selection.parquet")
    pq.write_table(pa.table({"id": ids, "selected": [i in removals(deduped) for i in ids]}),
                   tmp_path / "removed.parquet")
    train_tokenizer([str(corpus / "fineweb")], tmp_path / "tokenizer.json", vocab_size=300)
    return tmp_path


DEDUP = [
    (["--threshold", "0"], ["--threshold"]),
    (["--threshold", "1.5"], ["--threshold"]),
    (["--num_buckets", "0"], ["--num_buckets"]),  # datatrove would divide by it
    (["--n_grams", "0"], ["--n_grams"]),  # datatrove would find no shingle
    (["--hash_precision", "16"], ["--hash_precision"]),  # datatrove's hashes are 32 or 64 bits
    (["--minhash", "simhash"], ["--minhash"]),
    (["--minhash", "rensa", "--hash_precision", "64"], ["--hash_precision 64", "rensa", "32"]),
    (["--region_pairs", "near"], ["--region_pairs"]),
    (["--guest_margin", "0"], ["--guest_margin"]),
    (["--guest_margin", "1.5"], ["--guest_margin"]),
    (["--region_pairs", "inside", "--guest_margin", "0.5"], ["--guest_margin 0.5", "inside"]),
    (["--sample", "0"], ["--sample"]),
    (["--sample", "1000"], ["--sample 1000", "more rows"]),
    (["--prepared", "{tmp}/other"], ["keep.parquet", "not a prepared shard"]),
    (["--input", "{tmp}/fineweb/00000.parquet"], ["--input", "not a folder"]),
    (["--output", "{tmp}/fineweb/out"], ["--output", "inside the input folder"]),
    (["--tasks", "0"], ["--tasks"]),
]


@pytest.mark.parametrize("flags,named", DEDUP, ids=[" ".join(f) for f, _ in DEDUP])
def test_dedup_refuses(files, capsys, flags, named):
    argv = ["dedup", "--input", "{tmp}/fineweb", "--prepared", "{tmp}/prepared", "--output",
            "{tmp}/out", *flags]
    refused(main, [a.format(tmp=files) for a in argv], capsys, files,
            *[n.format(tmp=files) for n in named])


def test_dedup_with_rensa_not_installed_is_refused_with_its_pip_line(files, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rensa", None)  # an import of it fails, as if absent
    refused(main, ["dedup", "--input", str(files / "fineweb"), "--output", str(files / "out"),
                   "--minhash", "rensa"], capsys, files, "--minhash rensa",
            'pip install "datamask[pipeline]" (or pip install "rensa==0.5.0")')


def test_rensa_shingles_the_words_of_datatrove_s_simplified_text(pool):
    """The simplification is datatrove's (its whitespace and diacritics steps done otherwise,
    the same result, on the pool's texts too), the words are split at its spaces, and each
    5-gram gets one hash: the same words the same hash wherever they stand, another order
    another hash, none under 5 words."""
    from datatrove.utils.text import simplify_text

    text = "Crème brûlée, 12.5 km\tde Málaga!\u00a0 Ça \n va \u0301 ok? naïve ٣٫٥"
    wide = "“Quoted” — it’s… ，１２ \x85 x \u0301 y \U0001171e z ệ ٣"  # the table's non-ASCII keys
    for each in [text, wide, "1,5 l. 2.x"] + [row["text"] for row in pool[2]]:
        assert simplified(each) == " ".join(simplify_text(each).split())
    assert split_words(text) == simplified(text).split(" ")

    def hashes(*texts):
        return [each.tolist() for each in shingle_hashes(list(texts), 5)]

    [six] = hashes("a b c d e f a b c d e")
    assert len(six) == 7 and six[0] == six[6] and len(set(six)) == 6
    assert hashes("b a c d e")[0] != hashes("a b c d e")[0]
    assert hashes("a b c d", "") == [[], []]
    assert hashes("a b c d e")[0][0] == hashes("x a b c d e")[0][1]
    # texts hashed together: each its own n-grams as alone, none across two
    together = ["a b c d e f", "", "g h", "a b c d e", "i j k l m n o"]
    assert hashes(*together) == [hashes(each)[0] for each in together]



def test_rensa_s_batched_simplification_finds_datatrove_s_words():
    """The ASCII texts' numbers and punctuation are done as arrays over a whole batch: in texts
    of digits, separators, spaces and marks, each word hash stands where datatrove's word
    stands, equal where the words are equal; numbers chain as datatrove's pattern scans them;
    a text's hashes do not depend on the texts hashed with it."""
    import random

    from datatrove.utils.text import simplify_text

    draw = random.Random(0)
    alphabet = list("0123456789.,.,ab  \t\n!?-\x0b") + ["٣", "é", "٫", "\u00a0", "Ⅷ", "\u0301"]
    texts = ["".join(draw.choice(alphabet) for _ in range(draw.randint(0, 40)))
             for _ in range(600)]
    batched = shingle_hashes(texts, 1)
    for text, hashes in zip(texts, batched):
        words = simplify_text(text).split()
        assert len(hashes) == len(words), repr(text)
        assert ((hashes[:, None] == hashes[None, :])
                == (np.array(words)[:, None] == np.array(words)[None, :])).all(), repr(text)
        assert hashes.tolist() == shingle_hashes([text], 1)[0].tolist()

    def same(a, b):
        return shingle_hashes([a], 5)[0].tolist() == shingle_hashes([b], 5)[0].tolist()

    assert same("1.2.3 a b c d", "5 7 a b c d")  # 1.2 is one number, .3 another
    assert same("1,2.3,4.5 a b c d", "0 0 0 a b c d") and not same("12 a b c d", "1 2 a b c d")
    assert same("4\u03015 a b c d", "7\u03013 a b c d")  # a dropped mark joins two zeros
    assert not same("4\u03015 a b c d", "45 a b c d")


def test_rensa_s_signature_files_are_datatrove_s_loop_s_to_the_byte(pool, tmp_path):
    """RensaSignature writes a batch at a time what datatrove's own loop writes one document at
    a time from the same shingles and each document's own rensa call: the same bucket files to
    the byte, over batches, documents too short for a shingle and an empty task."""
    from datatrove.data import Document
    from datatrove.pipeline.dedup.minhash import MinhashDedupSignature

    from reproduce.pipeline.dedup import minhash_config
    from reproduce.pipeline.minhash import RensaSignature, rensa_minhash

    config = minhash_config(precision=32)
    per = config.hashes_per_bucket

    class OneByOne(MinhashDedupSignature):
        def get_shingles(self, text):
            return shingle_hashes([text], config.n_grams)[0]

        def get_signature(self, shingles):
            [values] = rensa_minhash().digest_matrix_from_flat_token_hashes(
                shingles, np.array([0, len(shingles)], np.uint64), self.num_hashes,
                config.seed).to_rows()
            return [values[i:i + per] for i in range(0, self.num_hashes, per)]

    texts = [row["text"] for row in pool[2]][:300]
    texts[5:5] = ["", "too short", "a b c d e", texts[0]]
    for rank, batch in enumerate([texts, []]):
        folders = tmp_path / "batched", tmp_path / "one-by-one"
        for step, folder in zip((RensaSignature, OneByOne), folders):
            step(str(folder), config=config).run(
                (Document(text=text, id=str(i)) for i, text in enumerate(batch)), rank)
        for bucket in range(config.num_buckets):
            name = f"bucket_{bucket:03d}/{rank:05d}.minhash.sig"
            written = (folders[0] / name).read_bytes()
            assert written == (folders[1] / name).read_bytes(), name
            assert len(written) == (len(batch) - 2) * (per + 1) * 4 if batch else not written


CONFIG_REFUSALS = [
    ({"threshold": 1.5}, "--threshold must lie in (0, 1], got 1.5"),
    ({"guest_margin": 0.0}, "--guest_margin must lie in (0, 1], got 0"),
    ({"region_pairs": "near"}, "--region_pairs must be one of all, inside"),
    ({"minhash": "simhash"}, "--minhash must be one of datatrove, rensa"),
    ({"hash_precision": 16}, "--hash_precision must be one of 32, 64"),
    ({"n_grams": 0}, "--n_grams must be at least 1"),
    ({"tasks": 0}, "--tasks must be at least 1"),
    ({"minhash": "rensa", "hash_precision": 64}, "--hash_precision 64: rensa's hashes are 32"),
    ({"region_pairs": "inside", "guest_margin": 0.5}, "--guest_margin 0.5: sizes the guests"),
    ({"prepared": None}, "give --input"),
]


@pytest.mark.parametrize("change,message", CONFIG_REFUSALS, ids=[m for _, m in CONFIG_REFUSALS])
def test_a_dedup_config_refuses_a_bad_value_naming_its_flag_when_made(tmp_path, change, message):
    """From Python as from the command line: the value is refused before any file is read."""
    with pytest.raises(UserError) as refusal:
        DedupConfig(**{"prepared": tmp_path / "none", "output": tmp_path / "out", **change})
    assert message in str(refusal.value)
    assert not any(tmp_path.iterdir())


def test_dedup_help_lists_every_flag_in_its_step_s_group(capsys):
    with pytest.raises(SystemExit) as done:
        main(["dedup", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    minhash = text[text.index("\nminhash ("):text.index("\nembedding (")]
    embedding = text[text.index("\nembedding ("):text.index("\nslurm / ray")]
    assert all(f"--{name} " in minhash for name in MINHASH_SETTINGS)
    assert all(f"--{name} " in embedding for name in EMBEDDING_SETTINGS)
    flags = [f.name for f in dataclasses.fields(DedupConfig) if f.name != "cluster"]
    assert all(f"--{name} " in text for name in flags)
    assert "(default: 0.99)" in embedding and "(default: rensa)" in minhash


def test_dedup_refuses_prepared_rows_of_other_shards_and_no_input(files, capsys):
    (files / "fewer").mkdir()
    shutil.copy(files / "prepared" / "00000.parquet", files / "fewer")
    refused(main, ["dedup", "--input", str(files / "fineweb"), "--prepared", str(files / "fewer"),
                   "--output", str(files / "out")], capsys, files, "--prepared", "--input")
    refused(main, ["dedup", "--output", str(files / "out")], capsys, files, "--input",
            "--prepared")


@pytest.mark.parametrize("keep,selection,named", [
    ("other", "selection", ["--keep", "another input"]),
    ("prepared", "selection", ["--keep", "no finished keep-list"]),
    ("keep", "removed", ["--selection", "selects no row the keep-list (--keep) keeps"])])
def test_tokenize_refuses_a_keep_list_not_of_its_input_or_that_leaves_nothing(
        files, capsys, keep, selection, named):
    refused(main, ["tokenize", "--input", str(files / "fineweb"), "--selection",
                   str(files / f"{selection}.parquet"), "--tokenizer",
                   str(files / "tokenizer.json"), "--output", str(files / "tokens"), "--keep",
                   str(files / keep)], capsys, files, *named)


@pytest.mark.parametrize("keep,named", [
    ("other", ["--keep", "another input", "--input"]),
    ("prepared", ["--keep", "no finished keep-list"]),
    ("none_kept", ["--keep", "removes every row"])])
def test_select_refuses_a_keep_list_not_of_its_input_or_that_leaves_nothing(
        files, capsys, keep, named):
    if keep == "none_kept":
        rewritten_keep_list(files / "keep", files / keep, keep=False)
    refused(main, ["select", "--input", str(files / "prepared"), "--output",
                   str(files / "selected"), "--method", "quality-topk", "--keep",
                   str(files / keep)], capsys, files, *named)

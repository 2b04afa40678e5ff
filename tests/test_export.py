"""The export stage on the dedup tests' corpus (three shards with planted copies, an empty document),
its shards given metadata columns of several types: every kept document once with its columns as
they were, the same bytes whatever the tasks, the folder read by `datasets` and by datatrove's
ParquetReader offline, the card and its figures, a killed run's rerun, and every refusal."""

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from test_adversarial import refused, tree
from test_dedup import corpus, deduped, other_keep_list  # noqa: F401 (fixtures)

from datamask.data import QUALITY_COLUMN
from reproduce.cli import main
from reproduce.pipeline.dedup import REMOVALS_FILE
from reproduce.pipeline.export import CARD, DATA, SCORE_COLUMN, SUMMARY, Export, run_export

# a file closed at its first 3-row group past 4 KiB: every shard's kept rows take several files
SMALL_FILES = {"shard_mb": 4 / 1024, "row_group_rows": 3}


def with_metadata(table: pa.Table, shard: int) -> pa.Table:
    """A FineWeb shard's columns beside its text and id, of several Arrow types (one dump null)."""
    n = len(table)
    dumps = [f"CC-MAIN-{(shard + i) % 2}" for i in range(n)]
    dumps[0] = None
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    return table.append_column("dump", pa.array(dumps)) \
        .append_column("language_score", pa.array(np.linspace(0.5, 1, n), pa.float32())) \
        .append_column("token_count", pa.array(np.arange(n) * 7, pa.int32())) \
        .append_column("date", pa.array([start + datetime.timedelta(days=i) for i in range(n)],
                                        pa.timestamp("us", tz="UTC"))) \
        .append_column("tags", pa.array([[f"t{i % 3}"] * (i % 3) for i in range(n)],
                                        pa.list_(pa.string())))


@pytest.fixture(scope="module")
def root(corpus, tmp_path_factory):  # noqa: F811
    """The corpus's shards with metadata columns, its prepared rows, and a selection of them
    written by hand: every other row, the empty document and a planted copy among them."""
    root = tmp_path_factory.mktemp("export")
    (root / "fineweb").mkdir()
    for shard, path in enumerate(sorted((corpus / "fineweb").glob("*.parquet"))):
        pq.write_table(with_metadata(pq.read_table(path), shard), root / "fineweb" / path.name)
    shutil.copytree(corpus / "prepared", root / "prepared")
    ids = pa.concat_tables([pq.read_table(p, columns=["id"])
                            for p in sorted((root / "fineweb").glob("*.parquet"))]).column("id")
    ids = ids.to_pylist()
    chosen = [i % 2 == 0 or name in ("empty", "exact-copy", "edited-copy", "s1-4", "s0-6")
              for i, name in enumerate(ids)]
    (root / "select").mkdir()
    pq.write_table(pa.table({"id": ids, "selected": chosen,
                             "score": pa.array(np.linspace(0, 1, len(ids)), pa.float32())}),
                   root / "select" / "selection.parquet")
    (root / "fineweb.sha256.json").write_text(json.dumps(tree(root / "fineweb")))
    return root


def export(root, output, **flags) -> dict:
    return run_export(Export(input=root / "fineweb", selection=root / "select",
                             prepared=root / "prepared", output=output,
                             **{**SMALL_FILES, **flags}))


@pytest.fixture(scope="module")
def exported(root, deduped):  # noqa: F811
    """One task, the keep-list honoured, into one/export (three/export: three tasks, below)."""
    return export(root, root / "one" / "export", keep=deduped), root / "one" / "export"


def written(folder) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((folder / DATA).glob("*/*.parquet"))])


def input_rows(root) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((root / "fineweb").glob("*.parquet"))])


def test_every_kept_document_is_written_once_with_its_columns_as_they_were(exported, root,
                                                                          deduped):  # noqa: F811
    summary, out = exported
    selection = pq.read_table(root / "select" / "selection.parquet")
    chosen = selection.filter(selection.column("selected"))
    removed = set(pq.read_table(deduped / REMOVALS_FILE).column("id").to_pylist())
    kept = [i for i in chosen.column("id").to_pylist() if i not in removed]
    table = written(out)
    assert sorted(table.column("id").to_pylist()) == sorted(kept)  # each once, no other
    assert removed & set(chosen.column("id").to_pylist())  # the keep-list removed some selected
    assert summary["counts"] == {"input": len(selection), "selected": len(chosen),
                                 "removed_by_keep": len(chosen) - len(kept), "written": len(kept)}
    every = input_rows(root)
    assert table.schema.names == every.schema.names + [QUALITY_COLUMN, SCORE_COLUMN]
    assert table.schema.remove_metadata().field("date").type == pa.timestamp("us", tz="UTC")
    # the rows as they were, in input order, with the prepared quality and the selection's score
    at = pc.index_in(table.column("id"), value_set=every.column("id"))
    assert table.select(every.schema.names).equals(every.take(at))
    assert at.to_pylist() == sorted(at.to_pylist())
    prepared = pa.concat_tables([pq.read_table(p, columns=["id", QUALITY_COLUMN])
                                 for p in sorted((root / "prepared").glob("*.parquet"))])
    assert table.column(QUALITY_COLUMN).equals(prepared.column(QUALITY_COLUMN).take(at))
    assert table.column(SCORE_COLUMN).equals(selection.column("score").take(
        pc.index_in(table.column("id"), value_set=selection.column("id"))))
    assert "empty" in table.column("id").to_pylist()  # a document without text is kept too
    shards = {name: s["files"] for name, s in summary["shards"].items()}
    assert sorted(shards) == sorted(p.name for p in (root / "fineweb").glob("*.parquet"))
    assert all(len(files) > 1 for files in shards.values())  # the size splits every shard
    assert all(f.startswith(f"{DATA}/{name[:-8]}/") for name, files in shards.items()
               for f in files)


def test_the_files_and_the_card_do_not_depend_on_the_tasks_or_workers(exported, root,
                                                                      deduped):  # noqa: F811
    _, one = exported
    three = root / "three" / "export"
    summary = export(root, three, keep=deduped, tasks=3, workers=2)
    assert summary["tasks"] == 3
    names = sorted(str(p.relative_to(one)) for p in one.rglob("*")
                   if p.is_file() and p.parts[len(one.parts)] in (DATA, "figures", CARD))
    assert len(names) > 6
    assert {n: (three / n).read_bytes() for n in names} == {n: (one / n).read_bytes()
                                                            for n in names}
    assert sorted(str(p.relative_to(three)) for p in three.rglob("*") if p.is_file()
                  and p.parts[len(three.parts)] in (DATA, "figures", CARD)) == names


def test_datasets_and_datatrove_read_the_folder_offline(exported):
    import datasets
    from datatrove.pipeline.readers import ParquetReader

    summary, out = exported
    table = written(out)
    by_card = datasets.load_dataset(str(out), split="train")
    by_folder = datasets.load_dataset("parquet", data_dir=str(out), split="train")
    for loaded in (by_card, by_folder):
        assert sorted(loaded["id"]) == sorted(table.column("id").to_pylist())
        assert loaded.features.arrow_schema.names == table.schema.names
    assert by_card.features == datasets.Features.from_arrow_schema(table.schema)
    documents = list(ParquetReader(str(out / DATA))())
    # datatrove's readers skip a document without text; every other one is read, columns kept
    assert sorted(d.id for d in documents) == sorted(i for i, t in zip(
        table.column("id").to_pylist(), table.column("text").to_pylist()) if t)
    assert {QUALITY_COLUMN, SCORE_COLUMN, "dump", "tags"} <= set(documents[0].metadata)


def test_the_card_gives_the_counts_the_command_and_the_figures(exported, deduped):  # noqa: F811
    summary, out = exported
    card = (out / CARD).read_text()
    counts = summary["counts"]
    for line in (f"| input | {counts['input']} |", f"| selected | {counts['selected']} |",
                 f"| {counts['removed_by_keep']} |", f"| written | {counts['written']} ("):
        assert line in card
    assert f"--keep {deduped.absolute()}" in card and "--shard_mb 0.00390625" in card
    assert summary["figures"] == ["quality-length.png", "mix.png", "embedding-map.png"]
    for name in summary["figures"]:
        assert f"(figures/{name})" in card
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "the dump mix" in card  # --mix's default: the shards have dump, not domain


def test_without_a_mix_column_the_card_says_so(corpus, tmp_path):  # noqa: F811
    root = tmp_path
    shutil.copytree(corpus / "fineweb", root / "fineweb")
    shutil.copytree(corpus / "prepared", root / "prepared")
    ids = input_rows(root).column("id")
    (root / "select").mkdir()
    pq.write_table(pa.table({"id": ids, "selected": [True] * len(ids),
                             "score": pa.array(np.zeros(len(ids)), pa.float32())}),
                   root / "select" / "selection.parquet")
    summary = export(root, root / "out", shard_mb=1)
    assert summary["figures"] == ["quality-length.png", "embedding-map.png"]
    assert "No mix figure: the shards have none of the columns domain, dump" in \
        (root / "out" / CARD).read_text()
    assert summary["counts"]["written"] == len(ids) and summary["files"] == 3


def test_a_rerun_after_a_kill_writes_only_what_is_missing(exported, root, deduped,  # noqa: F811
                                                          tmp_path):
    """As a kill -9 leaves it: the card and summary not written, one shard's folder and its
    task's marker gone, and what a killed writer left half-written beside them."""
    _, whole = exported
    out = tmp_path / "export"
    shutil.copytree(whole, out)
    for name in (CARD, SUMMARY):
        (out / name).unlink()
    shutil.rmtree(out / DATA / "00001")
    (out / "logs" / "shards" / "completions" / "00000").unlink()
    half = [out / DATA / ".00001.0badc0de.tmp" / "000_00001.parquet", out / ".README.md.0badc0de.tmp"]
    for path in half:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"PAR1")
    untouched = {p: p.stat().st_mtime_ns for p in (out / DATA).glob("0000[02]/*.parquet")}
    summary = export(root, out, keep=deduped)
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    assert not any(p.exists() for p in half) and not half[0].parent.exists()
    names = [str(p.relative_to(whole)) for p in whole.rglob("*")
             if p.is_file() and p.parts[len(whole.parts)] in (DATA, "figures")]
    assert {n: (out / n).read_bytes() for n in names} == {n: (whole / n).read_bytes()
                                                          for n in names}
    assert (out / CARD).read_text() == (whole / CARD).read_text()
    before = (out / SUMMARY).read_bytes()
    assert export(root, out, keep=deduped) == summary  # a finished export returns at once
    assert (out / SUMMARY).read_bytes() == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_mid_run_then_the_rerun_writes_the_uninterrupted_output(exported, root,
                                                                       deduped):  # noqa: F811
    """The command killed once its second task has started (its first shard renamed into
    place); the rerun's files are the uninterrupted run's."""
    _, whole = exported
    out = root / "killed" / "export"
    command = [sys.executable, "-m", "reproduce", "export", "--input", str(root / "fineweb"),
               "--selection", str(root / "select"), "--prepared", str(root / "prepared"),
               "--keep", str(deduped), "--output", str(out), "--shard_mb", "0.00390625",
               "--row_group_rows", "3", "--tasks", "3", "--workers", "1"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "logs" / "shards" / "logs" / "task_00001.log").exists():
        assert process.poll() is None and time.monotonic() < deadline, "no second task started"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / SUMMARY).exists()
    assert (out / DATA / "00000").is_dir()  # the first task's shard, finished
    export(root, out, keep=deduped, tasks=3)
    names = [str(p.relative_to(whole)) for p in whole.rglob("*")
             if p.is_file() and p.parts[len(whole.parts)] in (DATA, "figures", CARD)]
    assert {n: (out / n).read_bytes() for n in names} == {n: (whole / n).read_bytes()
                                                          for n in names}
    assert sorted(p.name for p in (out / DATA).iterdir()) == ["00000", "00001", "00002"]


@pytest.fixture
def files(root, deduped, other_keep_list, tmp_path):  # noqa: F811
    """The shards, their prepared rows, the selection, the keep-list and another input's
    keep-list, and selections that are wrong, in one folder the refused commands must leave as
    they found it."""
    for name in ("fineweb", "prepared", "select"):
        shutil.copytree(root / name, tmp_path / name)
    shutil.copytree(deduped, tmp_path / "keep")
    shutil.copytree(other_keep_list, tmp_path / "other")
    selection = pq.read_table(root / "select" / "selection.parquet")
    first = pq.read_metadata(root / "fineweb" / "00000.parquet").num_rows
    pq.write_table(selection.slice(0, first), tmp_path / "of_shard_0.parquet")
    renamed = selection.column("id").to_pylist()
    renamed[0] = "not-in-any-shard"  # a selected row
    pq.write_table(selection.set_column(0, "id", pa.array(renamed)), tmp_path / "missing.parquet")
    pq.write_table(selection.drop_columns(["score"]), tmp_path / "no_score.parquet")
    pq.write_table(selection.set_column(1, "selected", pa.array([False] * len(selection))),
                   tmp_path / "none.parquet")
    (tmp_path / "fewer").mkdir()
    for path in sorted((root / "prepared").glob("*.parquet"))[:2]:
        shutil.copy(path, tmp_path / "fewer")
    return tmp_path


REFUSALS = [
    (["--selection", "{tmp}/of_shard_0.parquet"], ["--selection", "another input", "--input"]),
    (["--selection", "{tmp}/missing.parquet"],
     ["--selection", "1 of its", "in no shard of --input", "not-in-any-shard"]),
    (["--selection", "{tmp}/no_score.parquet"], ["--selection", "'score'"]),
    (["--selection", "{tmp}/none.parquet"], ["--selection", "selects no row"]),
    (["--keep", "{tmp}/other"], ["--keep", "another input", "--input"]),
    (["--keep", "{tmp}/prepared"], ["--keep", "no finished keep-list"]),
    (["--output", "{tmp}/fineweb/out"], ["--output", "inside the input folder"]),
    (["--output", "{tmp}/select"], ["--output", "holds the input --selection"]),
    (["--shard_mb", "0"], ["--shard_mb"]),
    (["--row_group_rows", "0"], ["--row_group_rows"]),
    (["--tasks", "0"], ["--tasks"]),
    (["--mix", "planted"], ["--mix planted", "not a metadata column"]),
    (["--prepared", "{tmp}/fewer"], ["--prepared", "no 00002.parquet"]),
    (["--input", "{tmp}/fineweb/00000.parquet"], ["--input", "not a folder"]),
]


@pytest.mark.parametrize("flags,named", REFUSALS, ids=[" ".join(f) for f, _ in REFUSALS])
def test_export_refuses(files, capsys, flags, named):
    argv = ["export", "--input", "{tmp}/fineweb", "--selection", "{tmp}/select", "--prepared",
            "{tmp}/prepared", "--keep", "{tmp}/keep", "--output", "{tmp}/out", *flags]
    refused(main, [a.format(tmp=files) for a in argv], capsys, files,
            *[n.format(tmp=files) for n in named])


def test_the_shards_read_are_left_as_they_were(exported, root):
    """Every export above read them; their bytes are those the fixture wrote before any."""
    assert tree(root / "fineweb") == json.loads((root / "fineweb.sha256.json").read_text())

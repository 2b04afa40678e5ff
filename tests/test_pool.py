"""The web-like pool (reproduce/pool) on small slices: the readers on files in their packages'
formats, a pool built from a few hundred documents, its labels, rates, held-out split, ids, the
positive control and the planted-kept report, and the pipeline stages reading its shards."""

import json
from dataclasses import asdict, replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.data import budget
from datamask.errors import UserError
from reproduce.pipeline.bbc import bbc_articles
from reproduce.cli import main
from reproduce.pool import dedup, noise, sources
from reproduce.pool.build import POOL_SCHEMA, PoolConfig, build_pool
from reproduce.pool.control import control_selection, kept_fractions

from conftest import HELDOUT, SEED, TASKS, TOPICS


# ---------------------------------------------------------------- readers and cutting


def test_readers_parse_the_package_formats(units):
    assert [u.key for u in units["books"]] == ["r-cran-janeaustenr/novelone",
                                               "r-cran-janeaustenr/noveltwo"]
    first = units["books"][0].paragraphs[0]
    assert "\n" not in first and first == " ".join(bbc_articles()[1000]["paragraphs"][0].split())
    heads = [p.split("\n", 1)[0] for u in units["reference"] for p in u.paragraphs]
    assert heads == sorted(TOPICS[20:], key=lambda h: (h[0].lower() if h[0].isalpha() else "#"))
    body = units["reference"][0].paragraphs[0]
    assert "See glossary." in body and "{" not in body and "00-database" not in body
    assert len(units["docs"]) == 20 and all(u.domain == "docs" for u in units["docs"])


def test_documents_are_cut_at_paragraph_boundaries_within_the_size_rule(units):
    for unit in units["docs"] + units["books"] + units["reference"]:
        docs = sources.cut_documents(unit)
        pieces = [piece for p in unit.paragraphs for piece in sources.split_long(p)]
        assert [d.text for d in docs] and "\n\n".join(d.text for d in docs) == "\n\n".join(pieces)
        assert all(len(d.text) <= sources.MAX_CHARS for d in docs)
        assert all(len(d.text) >= sources.MIN_CHARS for d in docs[:-1])
        assert [d.id for d in docs] == [d.id for d in sources.cut_documents(unit)]
    news = sources.cut_documents(units["news"][0])
    assert len(news) == 1 and news[0].text == bbc_articles()[0]["text"]


# ---------------------------------------------------------------- the pool


def test_pool_has_fineweb_columns_labels_and_unique_ids(pool):
    out, summary, rows = pool
    assert pq.read_schema(out / "fineweb" / "000_00000.parquet").names == POOL_SCHEMA.names
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids) == summary["documents"]["pool_rows"]
    assert all(i.startswith("<urn:uuid:") for i in ids)
    assert {r["planted"] for r in rows} == {"none", *noise.KINDS}
    assert {r["domain"] for r in rows} == {"news", "docs", "reference", "books"}


def test_planted_counts_follow_the_rates(pool):
    _, summary, rows = pool
    clean = sum(r["planted"] == "none" for r in rows)
    for kind, rate in noise.DEFAULT_RATES.items():
        got = sum(r["planted"] == kind for r in rows)
        assert got == round(rate * clean) == summary["counts"]["all"][kind]
    share = summary["noise"]["planted_share_of_rows"]
    assert share == pytest.approx(sum(noise.DEFAULT_RATES.values()) /
                                  (1 + sum(noise.DEFAULT_RATES.values())), abs=0.01)


def test_labels_match_what_was_planted(pool):
    _, _, rows = pool
    clean = [r["text"] for r in rows if r["planted"] == "none"]
    clean_set = set(clean)
    by_kind = {k: [r["text"] for r in rows if r["planted"] == k] for k in noise.KINDS}
    assert all(t in clean_set for t in by_kind["exact_dup"])
    assert not any(t in clean_set for t in by_kind["near_dup"])
    near = dedup.containment_in(by_kind["near_dup"], clean)
    assert near.min() > 0.4  # an edited copy keeps most of its 8-word runs
    junk = dedup.containment_in(by_kind["junk"], clean)
    assert junk.max() < 0.2
    marks = ("cookie", "Page not found", "Archive for", "Subscribe", "Printer-friendly")
    assert all(any(m in t for m in marks) for t in by_kind["boilerplate"])
    assert dedup.containment_in(clean[:50], clean[50:]).mean() < 0.2  # clean rows are distinct


def test_heldout_is_disjoint_from_the_pool_and_not_a_near_duplicate(pool):
    out, summary, rows = pool
    texts = [r["text"] for r in rows]
    ids = {r["id"] for r in rows}
    for domain in ("news", "docs", "reference", "books"):
        held = pq.read_table(out / "heldout" / f"{domain}.parquet").to_pylist()
        assert sum(len(h["text"]) for h in held) >= HELDOUT
        assert not ({h["id"] for h in held} & ids)
        assert not ({h["text"] for h in held} & set(texts))
        assert dedup.containment_in([h["text"] for h in held], texts).max() <= 0.2
    cloze = (out / "tasks" / "bbc_cloze.jsonl").read_text().splitlines()
    pages = [json.loads(line) for line in (out / "tasks" / "bbc_heldout.jsonl").read_text()
             .splitlines()]
    assert len(pages) == TASKS and 0 < len(cloze) <= TASKS
    assert not ({p["id"] for p in pages} & ids)
    assert summary["heldout"]["documents"]["news"] <= TASKS


def test_ids_are_stable_for_a_seed_and_a_rebuild_is_cached(tmp_path, pool, units):
    out, summary, rows = pool
    stamp = (out / "pool.json").stat().st_mtime_ns
    again = build_pool(out, PoolConfig(seed=SEED, heldout_chars=HELDOUT, task_articles=TASKS,
                                       shards=2), units=units)
    assert again["cached"] and (out / "pool.json").stat().st_mtime_ns == stamp
    other = build_pool(tmp_path / "same", PoolConfig(seed=SEED, heldout_chars=HELDOUT,
                                                     task_articles=TASKS, shards=3), units=units)
    same = pa.concat_tables([pq.read_table(p) for p in (tmp_path / "same" / "fineweb").glob("*")])
    assert dict(zip(same.column("id").to_pylist(), same.column("text").to_pylist())) == \
        {r["id"]: r["text"] for r in rows}
    assert other["counts"] == summary["counts"] and other["sources"] == summary["sources"]
    build_pool(tmp_path / "seed4", PoolConfig(seed=SEED + 1, heldout_chars=HELDOUT,
                                              task_articles=TASKS), units=units)
    moved = pa.concat_tables([pq.read_table(p) for p in (tmp_path / "seed4" / "fineweb").glob("*")])
    planted_ids = {r["id"] for r in rows if r["planted"] != "none"}
    assert not planted_ids & set(moved.column("id").to_pylist())


def test_pool_json_tells_the_sources_apart_by_their_texts(tmp_path, pool, units):
    """One paragraph changed in one source moves that source's two digests and no other's."""
    _, summary, _ = pool
    domain = sorted(units)[0]
    first = units[domain][0]
    edited = replace(first, paragraphs=[first.paragraphs[0] + " (edited)", *first.paragraphs[1:]])
    changed = {**units, domain: [edited, *units[domain][1:]]}
    other = build_pool(tmp_path / "edited", PoolConfig(seed=SEED, heldout_chars=HELDOUT,
                                                       task_articles=TASKS), units=changed)
    for name, source in summary["sources"].items():
        for key in ("paragraphs_sha256", "documents_sha256"):
            assert source[key].startswith("sha256:") and len(source[key]) == 71
            assert (other["sources"][name][key] != source[key]) == (name == domain), (name, key)


def test_more_shards_than_rows_is_refused_before_writing(tmp_path, pool, units):
    rows = len(pool[2])
    with pytest.raises(UserError, match=f"--shards {rows + 1}: more than the pool's {rows} rows"):
        build_pool(tmp_path / "many", PoolConfig(seed=SEED, heldout_chars=HELDOUT,
                                                 task_articles=TASKS, shards=rows + 1), units=units)
    assert not (tmp_path / "many").exists()


# ---------------------------------------------------------------- control and report


def test_pipeline_stages_accept_the_pool_shards(pool, prepared, tmp_path):
    from reproduce.pipeline.select import SelectConfig, run_select
    from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer

    out, _, rows = pool
    table = pa.concat_tables([pq.read_table(p) for p in sorted(prepared.glob("*.parquet"))])
    assert sorted(table.column("id").to_pylist()) == sorted(r["id"] for r in rows)
    summary = run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "select",
                                      method="quality-topk", select_ratio=0.25))
    assert summary["selected"] == budget(0.25, len(rows))
    train_tokenizer([str(out / "fineweb")], tmp_path / "tok.json", vocab_size=300)
    tokens = run_tokenize(TokenizeConfig(input=out / "fineweb",
                                         selection=tmp_path / "select" / "selection.parquet",
                                         tokenizer=tmp_path / "tok.json",
                                         output=tmp_path / "tokens"))
    assert tokens["documents"] == summary["selected"]


def test_control_keeps_every_planted_row_when_the_budget_allows(pool, prepared, tmp_path):
    out, _, rows = pool
    planted = {r["id"] for r in rows if r["planted"] != "none"}
    summary = control_selection(out, [str(prepared)], 0.3, tmp_path / "control", seed=1)
    sel = pq.read_table(tmp_path / "control" / "selection.parquet")
    chosen = {i for i, s in zip(sel.column("id").to_pylist(), sel.column("selected").to_pylist())
              if s}
    assert len(chosen) == budget(0.3, len(rows)) == summary["selected"]
    assert planted <= chosen
    report = kept_fractions(out, tmp_path / "control")
    assert all(report["all"][k]["fraction"] == 1.0 for k in noise.KINDS)
    small = control_selection(out, [str(prepared)], 0.05, tmp_path / "small", seed=1)
    sel = pq.read_table(tmp_path / "small" / "selection.parquet")
    kept = {i for i, s in zip(sel.column("id").to_pylist(), sel.column("selected").to_pylist())
            if s}
    assert kept <= planted and len(kept) == small["selected"]


def test_kept_fractions_on_a_hand_made_selection(pool, tmp_path):
    out, _, rows = pool
    exact = [r["id"] for r in rows if r["planted"] == "exact_dup"]
    junk = [r["id"] for r in rows if r["planted"] == "junk"]
    keep = set(exact) | set(junk[: len(junk) // 2])
    ids = [r["id"] for r in rows]
    pq.write_table(pa.table({"id": ids, "selected": [i in keep for i in ids]}),
                   tmp_path / "selection.parquet")
    report = kept_fractions(out, tmp_path / "selection.parquet")
    assert report["all"]["exact_dup"] == {"rows": len(exact), "kept": len(exact), "fraction": 1.0}
    assert report["all"]["junk"]["kept"] == len(junk) // 2
    assert report["all"]["none"]["kept"] == report["all"]["near_dup"]["kept"] == 0
    books_junk = sum(r["planted"] == "junk" and r["domain"] == "books" and r["id"] in keep
                     for r in rows)
    assert report["by_domain"]["books"].get("junk", {"kept": 0})["kept"] == books_junk
    assert report["selected"] == len(keep)


@pytest.mark.parametrize("flag, value", [("--junk", "1.5"), ("--near_dup", "-0.1"),
                                          ("--heldout_chars", "10"), ("--shards", "0"),
                                          ("--max_mb_per_domain", "0")])
def test_bad_pool_flags_name_the_flag_and_write_nothing(tmp_path, capsys, flag, value):
    code = main(["pool", "--output", str(tmp_path / "p"), flag, value])
    assert code == 2 and flag in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_pool_config_is_checked_when_made_and_records_as_pool_json_has_it():
    """PoolConfig refuses a bad value naming its flag before any work; rates given in part keep
    the other kinds' defaults, and pool.json's `config` keeps its keys in their order."""
    with pytest.raises(UserError, match="--task_articles must be at least 8, got 3"):
        PoolConfig(task_articles=3)
    with pytest.raises(UserError, match="--domains must name some of"):
        PoolConfig(domains=["books"])
    config = PoolConfig(rates={"junk": 0.1})
    assert config.rates == {**noise.DEFAULT_RATES, "junk": 0.1}
    assert list(asdict(config)) == ["seed", "rates", "heldout_chars", "task_articles", "shards",
                                    "max_mb_per_domain", "domains"]


def test_an_output_that_is_a_file_is_refused_in_one_line_and_kept(tmp_path, capsys):
    target = tmp_path / "pool"
    target.write_text("a file")
    assert main(["pool", "--output", str(target), "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--output" in err[0], err
    assert target.read_text() == "a file" and list(tmp_path.iterdir()) == [target]


def test_bad_control_and_report_inputs_name_the_flag(tmp_path, capsys, pool, prepared):
    out, _, _ = pool
    code = main(["control", "--pool", str(out), "--prepared", str(prepared), "--output",
                 str(tmp_path / "c"), "--select_ratio", "1.5"])
    assert code == 2 and "--select_ratio" in capsys.readouterr().err
    selection = tmp_path / "selection.parquet"
    pq.write_table(pa.table({"id": ["x"], "selected": [True]}), selection)
    code = main(["planted", "--pool", str(tmp_path), "--selection", str(selection)])
    assert code == 2 and "--pool" in capsys.readouterr().err
    code = main(["planted", "--pool", str(out), "--selection", str(tmp_path / "none.parquet")])
    assert code == 2 and "--selection" in capsys.readouterr().err

"""Calibration selections (reproduce/pool/calibration.py) on the small pool of test_pool.py: the
null (a second random seed through the select stage), the junk and dup series (domain mix, lengths,
copies, ids, nested doses), the tokenize stage reading their side shard, and the refusals."""

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamask.data import budget, read_dataset
from datamask.errors import UserError
from datamask.selectors import make_selector
from reproduce.cli import main
from reproduce.pool import dedup
from reproduce.pool.calibration import calibration_selection
from reproduce.pool.control import kept_fractions

RATIO = 0.3


def chosen(folder) -> set[str]:
    table = pq.read_table(folder / "selection.parquet", columns=["id", "selected"])
    return {i for i, s in zip(table.column("id").to_pylist(), table.column("selected").to_pylist())
            if s}


def random_ids(prepared, seed: int) -> set[str]:
    """The random selector's draw over the prepared rows, by FineWeb id."""
    files = sorted(prepared.glob("*.parquet"))
    drawn = make_selector("random", seed=seed).select(read_dataset(files), RATIO)
    ids = pa.concat_tables([pq.read_table(f, columns=["id"]) for f in files]).column("id")
    return set(np.array(ids.to_pylist(), dtype=object)[drawn.selected])


@pytest.fixture(scope="module")
def series(pool, prepared, tmp_path_factory):
    """junk and dup at dose 0.25 and junk at 0.1, seed 2, with their files read back."""
    out, _, rows = pool
    root = tmp_path_factory.mktemp("calibration")
    made = {}
    for name, dose in (("junk", 0.25), ("dup", 0.25), ("junk", 0.1)):
        folder = root / f"{name}-{dose}"
        summary = calibration_selection(out, [str(prepared)], RATIO, name, dose, folder, seed=2)
        made[f"{name}-{dose}"] = {"folder": folder, "summary": summary,
                                  "selection": pq.read_table(folder / "selection.parquet"),
                                  "side": pq.read_table(folder / "side.parquet").to_pylist()}
    return made, {r["id"]: r for r in rows}, random_ids(prepared, 2)


def replaced_of(made: dict, base: set[str], by_id: dict) -> set[str]:
    return base - (chosen(made["folder"]) & set(by_id))


def domain_counts(ids, by_id, side=()) -> Counter:
    return Counter([by_id[i]["domain"] for i in ids] + [r["domain"] for r in side])


@pytest.mark.parametrize("name", ["junk-0.25", "dup-0.25", "junk-0.1"])
def test_replaced_count_domains_and_ids(series, prepared, name):
    made, by_id, base = series
    made = made[name]
    k = budget(RATIO, len(by_id))
    assert len(base) == k
    kept_pool = chosen(made["folder"]) & set(by_id)
    replaced = base - kept_pool
    dose = float(name.split("-")[1])
    assert kept_pool <= base and len(replaced) == int(np.floor(dose * k + 0.5))
    side = made["side"]
    assert len(side) == len(replaced) == made["summary"]["replaced"]
    assert domain_counts(base, by_id) == domain_counts(kept_pool, by_id, side)
    summary = made["summary"]
    assert summary["before"]["domains"].keys() == summary["after"]["domains"].keys()
    assert all(summary["before"]["domains"][d]["documents"] ==
               summary["after"]["domains"][d]["documents"] for d in summary["before"]["domains"])
    # every prepared row once, in order, then the side rows, all selected; side ids are new
    table = made["selection"]
    ids = table.column("id").to_pylist()
    prepared_ids = pa.concat_tables([pq.read_table(f, columns=["id"])
                                     for f in sorted(prepared.glob("*.parquet"))]).column("id")
    side_ids = [r["id"] for r in side]
    assert ids == prepared_ids.to_pylist() + side_ids
    assert len(set(ids)) == len(ids) and not set(side_ids) & set(by_id)
    assert all(i.startswith("<urn:uuid:") for i in side_ids)
    assert chosen(made["folder"]) == kept_pool | set(side_ids)
    assert len(set(table.column("chunk_id").to_pylist())) == len(ids)


def test_junk_matches_each_replaced_length_and_is_not_real_text(series):
    made, by_id, base = series
    junk = made["junk-0.25"]
    replaced = replaced_of(junk, base, by_id)
    for domain in {by_id[i]["domain"] for i in replaced}:
        want = sorted(len(by_id[i]["text"]) for i in replaced if by_id[i]["domain"] == domain)
        got = sorted(len(r["text"]) for r in junk["side"] if r["domain"] == domain)
        assert got == want
    assert {r["planted"] for r in junk["side"]} == {"junk"}
    clean = [r["text"] for r in by_id.values() if r["planted"] == "none"]
    assert dedup.containment_in([r["text"] for r in junk["side"]], clean).max() < 0.2
    assert junk["summary"]["after"]["chars"] == junk["summary"]["before"]["chars"]


def test_doses_are_nested_and_both_series_replace_the_same_rows(series):
    made, by_id, base = series
    small, large = (replaced_of(made[n], base, by_id) for n in ("junk-0.1", "junk-0.25"))
    assert small < large
    assert replaced_of(made["dup-0.25"], base, by_id) == large
    texts = {r["text"] for r in made["junk-0.1"]["side"]}
    assert texts <= {r["text"] for r in made["junk-0.25"]["side"]}


def test_dup_copies_other_selected_documents_of_their_domain(series):
    made, by_id, base = series
    dup = made["dup-0.25"]
    kept = chosen(dup["folder"]) & set(by_id)
    kept_text = {}
    for i in kept:
        kept_text.setdefault(by_id[i]["text"], set()).add(by_id[i]["domain"])
    replaced = replaced_of(dup, base, by_id)
    assert all(r["domain"] in kept_text.get(r["text"], ()) for r in dup["side"])
    assert {r["planted"] for r in dup["side"]} == {"exact_dup"}
    before = len({by_id[i]["text"] for i in base})
    after = len({by_id[i]["text"] for i in kept} | {r["text"] for r in dup["side"]})
    assert before - after == len(replaced)
    assert dup["summary"]["before"]["distinct_texts"] - dup["summary"]["after"]["distinct_texts"] \
        == len(replaced)


def test_null_second_random_seed_through_select_and_a_calibration_base(pool, prepared, series,
                                                                       tmp_path):
    from reproduce.pipeline.select import SelectConfig, run_select

    made, by_id, base = series
    first = run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "random",
                                    method="random", select_ratio=RATIO))
    second = run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "random-1",
                                     method="random:seed=1", select_ratio=RATIO))
    assert first["selected"] == second["selected"] == budget(RATIO, len(by_id))
    zero, one = chosen(tmp_path / "random"), chosen(tmp_path / "random-1")
    assert zero != one and zero == random_ids(prepared, 0) and one == random_ids(prepared, 1)
    # the same folder given the other seed selects afresh (no block of the old spec reused)
    run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "random",
                            method="random:seed=1", select_ratio=RATIO))
    assert chosen(tmp_path / "random") == one
    # a calibration built on that selection file (--base) replaces rows of it
    out, _, _ = pool
    on_base = calibration_selection(out, [str(prepared)], RATIO, "junk", 0.25, tmp_path / "j",
                                    seed=2, base=tmp_path / "random-1" / "selection.parquet")
    assert on_base["k"] == len(one) and (chosen(tmp_path / "j") & set(by_id)) < one
    assert len(replaced_of({"folder": tmp_path / "j"}, one, by_id)) == on_base["replaced"]
    # a selection in blocks selects the whole input's count, split over its 7-row blocks
    blocked = run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "blocked",
                                      method="random", select_ratio=RATIO, block_size=7))
    assert blocked["selected"] == budget(RATIO, len(by_id))
    on_blocks = calibration_selection(out, [str(prepared)], RATIO, "dup", 0.25,
                                      tmp_path / "d", seed=2,
                                      base=tmp_path / "blocked" / "selection.parquet")
    assert on_blocks["k"] == blocked["selected"]
    # but a selection of another ratio is not a base for this one
    run_select(SelectConfig(input=[str(prepared)], output=tmp_path / "half", method="random",
                            select_ratio=0.6))
    with pytest.raises(UserError, match="--base .* selects"):
        calibration_selection(out, [str(prepared)], RATIO, "junk", 0.25, tmp_path / "x", seed=2,
                              base=tmp_path / "half" / "selection.parquet")


def test_tokenize_reads_the_side_shard_once(pool, series, tmp_path):
    from reproduce.pipeline.tokenize import TokenizeConfig, run_tokenize, train_tokenizer

    out, _, _ = pool
    made, by_id, _ = series
    dup = made["dup-0.25"]["folder"]
    train_tokenizer([str(out / "fineweb")], tmp_path / "tok.json", vocab_size=300)
    tokens = run_tokenize(TokenizeConfig(input=out / "fineweb", selection=dup / "selection.parquet",
                                         tokenizer=tmp_path / "tok.json",
                                         output=tmp_path / "tokens", tasks=2, workers=1))
    assert tokens["documents"] == budget(RATIO, len(by_id)) and tokens["side"]
    report = kept_fractions(out, dup)
    assert report["side"] == {"exact_dup": made["dup-0.25"]["summary"]["replaced"]}
    # a side row that repeats a pool id, or a selected id found nowhere, is refused
    side = pq.read_table(dup / "side.parquet")
    bad = tmp_path / "bad"
    bad.mkdir()
    pq.write_table(pq.read_table(dup / "selection.parquet"), bad / "selection.parquet")
    unselected = next(i for i in by_id if i not in chosen(dup))
    twice = side.set_column(side.schema.get_field_index("id"), "id",
                            pa.array([unselected] + side.column("id").to_pylist()[1:]))
    pq.write_table(twice, bad / "side.parquet")
    with pytest.raises(UserError, match="neither the shards nor a side shard"):
        run_tokenize(TokenizeConfig(input=out / "fineweb", selection=bad / "selection.parquet",
                                    tokenizer=tmp_path / "tok.json", output=tmp_path / "t2"))
    selection = pq.read_table(dup / "selection.parquet")
    keep_all = selection.set_column(selection.schema.get_field_index("selected"), "selected",
                                    pa.array(np.ones(len(selection), bool)))
    pq.write_table(keep_all, bad / "selection.parquet")
    with pytest.raises(UserError, match="is in 2 rows"):
        run_tokenize(TokenizeConfig(input=out / "fineweb", selection=bad / "selection.parquet",
                                    tokenizer=tmp_path / "tok.json", output=tmp_path / "t2"))
    assert not (tmp_path / "t2").exists()


@pytest.mark.parametrize("flags, named", [(["--dose", "0"], "--dose"),
                                          (["--dose", "1.5"], "--dose"),
                                          (["--dose", "0.001"], "--dose"),
                                          (["--dose", "0.99"], "--dose"),
                                          (["--select_ratio", "1.2"], "--select_ratio")])
def test_bad_flags_name_the_flag_and_write_nothing(pool, prepared, tmp_path, capsys, flags,
                                                   named):
    out, _, _ = pool
    base = ["calibrate", "--pool", str(out), "--prepared", str(prepared), "--series", "dup",
            "--dose", "0.25", "--output", str(tmp_path / "c")]
    code = main(base + flags)
    assert code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_an_output_on_an_input_and_a_pool_without_columns_are_refused(pool, prepared, tmp_path,
                                                                      capsys):
    out, _, _ = pool
    flags = ["calibrate", "--pool", str(out), "--prepared", str(prepared), "--series", "junk",
             "--dose", "0.25", "--output"]
    stamp = sorted(p.stat().st_mtime_ns for p in prepared.iterdir())
    assert main(flags + [str(prepared)]) == 2
    assert "--output" in capsys.readouterr().err
    assert sorted(p.stat().st_mtime_ns for p in prepared.iterdir()) == stamp
    assert main(flags + [str(out)]) == 2 and "--output" in capsys.readouterr().err
    bare = tmp_path / "pool" / "fineweb"
    bare.mkdir(parents=True)
    shard = pq.read_table(next((out / "fineweb").glob("*.parquet")))
    pq.write_table(shard.drop_columns(["domain"]), bare / "000_00000.parquet")
    code = main(["calibrate", "--pool", str(tmp_path / "pool"), "--prepared", str(prepared),
                 "--series", "junk", "--dose", "0.25", "--output", str(tmp_path / "c")])
    assert code == 2 and "--pool" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("make_base, message", [
    (lambda folder: folder / "missing.parquet", "missing.parquet: no such file"),
    (lambda folder: folder / "base.json", "base.json: not a readable Parquet file"),
    (lambda folder: folder / "ids.parquet", "ids.parquet: needs the columns id and selected")])
def test_a_base_that_is_missing_or_not_a_selection_is_one_line_naming_base(
        pool, prepared, tmp_path, capsys, make_base, message):
    """Refused by --base (no traceback, not another command's flag), exit 2, nothing written."""
    (tmp_path / "base.json").write_text('{"selected": [true]}')
    pq.write_table(pa.table({"id": ["a"]}), tmp_path / "ids.parquet")
    out, _, _ = pool
    code = main(["calibrate", "--pool", str(out), "--prepared", str(prepared), "--series", "junk",
                 "--dose", "0.25", "--base", str(make_base(tmp_path)), "--output",
                 str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--base" in err and message in err and "--selection" not in err
    assert "Traceback" not in err and not (tmp_path / "c").exists()

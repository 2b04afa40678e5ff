"""bench-static's fidelity yardstick: the frontier read, the shares, linear CKA, the origin-free
candidates, the validity rule and the choice among plan 2's candidates, on synthetic vectors
small enough to select from in seconds."""

import json

import numpy as np
import pytest

from datamask.examples.synthetic import synthetic_dataset
from reproduce.bench import static as bench
from reproduce.bench.blocks import unit_rows

FEW_STEPS = {"n_epochs": 40, "stop_every": 0}


@pytest.fixture(scope="module")
def judged():
    """Five routes on 240 clustered rows: the reference, its centred copy, a lamb variant, the
    reference with a little noise (other vectors, nearly the same) and random unit vectors."""
    data = synthetic_dataset(240, dim=16, n_clusters=8, seed=3)
    reference = unit_rows(data.features)
    noise = np.random.default_rng(0).standard_normal(reference.shape).astype(np.float32)
    vectors = {"transformer": reference, "random": unit_rows(noise),
               "transformer, noisy": unit_rows(reference + 0.01 * noise[::-1])}
    routes = [bench.REFERENCE, bench.Route("centred", "harmless", "transformer", centred=True),
              bench.Route("lamb 0.45", "harmless", "transformer", lamb=0.45),
              bench.Route("noisy", "harmless", "transformer, noisy"),
              bench.Route("random unit vectors", "known-bad", "random")]
    rows = bench.judge("synthetic", data.ids, data.quality, vectors, {"transformer": 10.0},
                       routes=routes, grid=(0.3, 0.5, 0.7), options=FEW_STEPS)
    return {r["route"]: r for r in rows}


def test_the_reference_scores_one_on_every_yardstick(judged):
    for name, (value, outside) in judged["transformer (reference)"]["yardsticks"].items():
        assert value == pytest.approx(1.0), name
        assert not outside


def test_a_lamb_variant_reads_the_reference_frontier_by_construction(judged):
    row = judged["lamb 0.45"]
    assert set(row["by_construction"]) == {
        "neighbour recall", "Pair_simi at matched quality", "Pair_simi frontier",
        "DiSF at matched quality", "origin-free neighbour recall", "linear CKA"}
    assert row["yardsticks"]["Pair_simi frontier"][0] == pytest.approx(1.0)
    assert list(row["points"]) == ["0.45"]  # one selection, not a grid


def test_random_vectors_lose_the_neighbours_the_centred_copy_keeps(judged):
    centred, random = judged["centred"]["yardsticks"], judged["random unit vectors"]["yardsticks"]
    assert centred["neighbour recall"][0] > 0.8
    assert random["neighbour recall"][0] < 0.2
    assert random["Pair_simi at matched quality"][0] < centred["Pair_simi at matched quality"][0]


def test_judge_gives_every_route_every_candidate_of_both_plans(judged):
    for row in judged.values():
        assert set(row["yardsticks"]) == set(bench.YARDSTICKS), row["route"]
        assert set(row["origin_free"]) >= {"joint_Pair_simi", "joint_DiSF"}


def test_the_centred_route_is_the_reference_on_the_origin_free_candidates(judged):
    row = judged["centred"]
    free = ["origin-free Pair_simi at lamb 0.5", "origin-free DiSF at lamb 0.5",
            "origin-free neighbour recall"]
    assert set(free) <= set(row["by_construction"])
    for name in free:
        assert row["yardsticks"][name][0] == pytest.approx(1.0), name
    # CKA tests centring: the rows made unit length again after the mean is taken off
    assert "linear CKA" not in row["by_construction"]
    assert 0.5 < row["yardsticks"]["linear CKA"][0] <= 1.0


def test_the_vectors_own_candidates_tell_a_near_copy_from_random_vectors(judged):
    """(On these rows the quality term dominates the joint, so the origin-free selections of
    random vectors score near the reference's too: what separates them is left to the run.)"""
    noisy, random = judged["noisy"]["yardsticks"], judged["random unit vectors"]["yardsticks"]
    assert judged["noisy"]["by_construction"] == []
    assert noisy["origin-free Pair_simi at lamb 0.5"][0] == pytest.approx(1.0, abs=0.05)
    assert noisy["origin-free neighbour recall"][0] > 0.7 > 0.1 > random[
        "origin-free neighbour recall"][0]
    assert noisy["linear CKA"][0] > 0.99 and random["linear CKA"][0] < 0.2


def test_linear_cka_is_one_for_the_same_vectors_whatever_their_origin_and_rotation():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 24)) @ rng.standard_normal((24, 24))  # correlated columns
    rotation, _ = np.linalg.qr(rng.standard_normal((24, 24)))
    assert bench.linear_cka(x, x) == pytest.approx(1.0)
    assert bench.linear_cka(x, x - x.mean(axis=0)) == pytest.approx(1.0)
    assert bench.linear_cka(x, x + 5.0) == pytest.approx(1.0)
    assert bench.linear_cka(x, x @ rotation) == pytest.approx(1.0)
    assert bench.linear_cka(x, 3.0 * x[:, :12]) < 1.0  # half the columns: less than the same


def test_linear_cka_of_independent_random_vectors_is_low():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((500, 32)), rng.standard_normal((500, 32))
    assert bench.linear_cka(x, y) < 0.2


def test_one_thread_embeds_on_one_torch_thread_and_restores_the_count():
    import torch
    before, seen = torch.get_num_threads(), []

    def embed(texts):
        seen.append(torch.get_num_threads())
        if not texts:
            raise ValueError("nothing to embed")
        return np.zeros((len(texts), 2), dtype=np.float32)

    assert bench.OneThread(embed)(["a", "b"]).shape == (2, 2)
    with pytest.raises(ValueError):
        bench.OneThread(embed)([])
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_the_tables_mark_by_construction_and_plan_1s_candidates(judged):
    rows = list(judged.values())
    assert "linear CKA" in bench.table(rows).splitlines()[0]
    assert "| centred | harmless | 10.0 | 1.0 | 1.000* | 1.000* | 1.000* |" in bench.table(rows)
    validity = bench.validity_table(rows)
    assert validity.count("(comparison)") == len(bench.YARDSTICKS) - len(bench.CANDIDATES)


def test_read_off_interpolates_and_flags_a_quality_outside_the_frontier():
    frontier = [{"quality": 1.0, "div_Pair_simi": 3.0}, {"quality": 3.0, "div_Pair_simi": 1.0}]
    assert bench.read_off(frontier, 2.0, "Pair_simi") == (2.0, False)
    assert bench.read_off(frontier, 4.0, "Pair_simi") == (1.0, True)


def rows_with(harmless: float, bad: float) -> list[dict]:
    """Rows whose every yardstick reads `harmless` for a harmless route and `bad` for a known-bad
    one, except neighbour recall, which reads 0.9 for the harmless routes."""
    def shares(value, recall):
        return {n: ((recall if n == "neighbour recall" else value), False)
                for n in bench.YARDSTICKS}
    return [{"route": "v", "kind": "harmless", "by_construction": [],
             "yardsticks": shares(harmless, 0.9)},
            {"route": "b", "kind": "known-bad", "by_construction": [],
             "yardsticks": shares(bad, bad)}]


def test_a_yardstick_is_valid_only_with_its_variants_in_the_band_and_the_bad_far_below():
    valid = bench.validity(rows_with(0.97, 0.4))
    assert valid["Pair_simi at lamb 0.5"]["valid"] and valid["linear CKA"]["valid"]
    assert not valid["neighbour recall"]["valid"]  # 0.9: a harmless variant below the band
    assert valid["neighbour recall"]["broken_by"] == ["v"]
    too_high = bench.validity(rows_with(0.97, 0.6))["origin-free DiSF at lamb 0.5"]
    assert not too_high["valid"] and too_high["broken_by"] == ["b"]
    assert not bench.validity(rows_with(1.2, 0.1))["DiSF at lamb 0.5"]["valid"]  # above the band


def test_the_choice_is_only_among_plan_2s_candidates_in_their_order():
    assert bench.CANDIDATES == ["origin-free Pair_simi at lamb 0.5",
                                "origin-free DiSF at lamb 0.5", "origin-free neighbour recall",
                                "linear CKA"]
    valid = bench.validity(rows_with(0.97, 0.3))
    assert bench.chosen(valid) == "origin-free Pair_simi at lamb 0.5"
    valid["origin-free Pair_simi at lamb 0.5"]["valid"] = False
    assert bench.chosen(valid) == "origin-free DiSF at lamb 0.5"
    valid["linear CKA"]["gap"] = 0.9  # a gap wider by more than 0.05 wins over the order
    assert bench.chosen(valid) == "linear CKA"
    # plan 1's candidates, valid with the widest gap, are shown but never chosen
    for name in bench.CANDIDATES:
        valid[name]["valid"] = False
    valid["Pair_simi at lamb 0.5"]["gap"] = 0.9
    assert valid["Pair_simi at lamb 0.5"]["valid"] and bench.chosen(valid) is None


def test_with_no_valid_candidate_the_verdict_names_what_broke_each():
    text, yardstick = bench.verdict(rows_with(0.5, 0.3))
    assert yardstick is None and text.startswith("no valid yardstick")
    assert text.count("broken by v") == len(bench.CANDIDATES)
    assert "Facility" not in text  # plan 1's candidates are not the verdict's


def test_the_findings_claim_reads_what_the_bench_writes_of_each_yardsticks_validity(tmp_path):
    from reproduce.experiments.claims import recorded
    folder = tmp_path / "static-embedding" / "yardstick"
    folder.mkdir(parents=True)
    (folder / "validity.json").write_text(json.dumps(bench.findings(rows_with(0.97, 0.3))))
    found = recorded(str(tmp_path), "static-embedding/yardstick", "validity.json")
    assert found["valid"] == 4 and found["candidates"] == 4  # plan 2's, plan 1's left out
    assert found["yardstick"] == "origin-free Pair_simi at lamb 0.5"
    assert bench.findings(rows_with(0.5, 0.3))["yardstick"] == "none"


def test_a_rival_meets_the_corpus_scale_goal_only_faithful_on_every_family_and_30x_fast():
    def rival(route, share, speedup):
        return {"route": route, "kind": "rival", "by_construction": [], "speedup": speedup,
                "yardsticks": {n: (share, False) for n in bench.YARDSTICKS}}

    rows = rows_with(0.97, 0.3) + [
        rival("static (distilled)", 0.96, 40.0), rival("static (distilled)", 0.97, 20.0),
        rival("static (distilled)", 0.99, 35.0),  # median 35x, faithful everywhere
        rival("transformer, int8", 0.99, 50.0), rival("transformer, int8", 0.94, 50.0),
        rival("transformer, 64 tokens", 0.99, 3.0)]
    found = bench.findings(rows)
    routes = {r["route"]: r for r in found["routes"]}
    assert set(routes) == {"static (distilled)", "transformer, int8", "transformer, 64 tokens"}
    assert routes["static (distilled)"]["goal"] and routes["static (distilled)"]["speedup"] == 35
    assert not routes["transformer, int8"]["faithful"]  # 0.94 on one family
    short = routes["transformer, 64 tokens"]
    assert short["faithful"] and not short["goal"]
    assert found["routes_meeting_goal"] == 1 and found["routes_judged"] == 3


def test_the_harmless_variants_give_the_transformer_its_whole_input():
    """Plan 3: a variant that cuts the input short is a rival, not a harmless variant."""
    harmless = [r for r in bench.ROUTES if r.kind == "harmless"]
    assert {r.vectors for r in harmless} <= {"transformer", "transformer, batch 1",
                                             "transformer, 1 thread"}
    rivals = {r.vectors for r in bench.ROUTES if r.kind == "rival"}
    assert {"transformer, 128 tokens", "transformer, 64 tokens", "static"} <= rivals


def test_the_family_seeds_draw_other_families(tmp_path):
    def bbc_ids(seed: int) -> set:
        found = bench.families(tmp_path / f"seed{seed}", ["BBC"], None, 60, (0, seed, 1))
        return set(bench.shard_table(found["BBC"]).column("id").to_pylist())

    first, again, other = bbc_ids(0), bbc_ids(0), bbc_ids(1)
    assert first == again and first != other and len(other) == len(first)


def test_a_bench_refuses_a_work_folder_that_is_not_empty_and_removes_its_own(tmp_path):
    from datamask.errors import UserError
    from reproduce.bench import work_folder

    (tmp_path / "left.parquet").write_text("an earlier run's file")
    with pytest.raises(UserError, match=r"--work .*: not empty; give an empty or new folder"):
        with work_folder(tmp_path):
            pass
    with work_folder(tmp_path / "new") as made:
        assert made.is_dir()
    with work_folder(None) as scratch:
        (scratch / "file").write_text("x")
    assert not scratch.exists()

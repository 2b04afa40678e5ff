"""bench-static's fidelity yardstick: the frontier read, the shares, the validity rule and the
choice, on synthetic vectors small enough to select from in seconds."""

import json

import numpy as np
import pytest

from datamask.examples.synthetic import synthetic_dataset
from reproduce.bench import static as bench
from reproduce.bench.blocks import unit_rows

FEW_STEPS = {"n_epochs": 40, "stop_every": 0}


@pytest.fixture(scope="module")
def judged():
    """Four routes on 240 clustered rows: the reference, its centred copy, a lamb variant and
    random unit vectors."""
    data = synthetic_dataset(240, dim=16, n_clusters=8, seed=3)
    reference = unit_rows(data.features)
    noise = np.random.default_rng(0).standard_normal(reference.shape).astype(np.float32)
    vectors = {"transformer": reference, "random": unit_rows(noise)}
    routes = [bench.REFERENCE, bench.Route("centred", "harmless", "transformer", centred=True),
              bench.Route("lamb 0.45", "harmless", "transformer", lamb=0.45),
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
    assert set(row["by_construction"]) == {"neighbour recall", "Pair_simi at matched quality",
                                           "Pair_simi frontier", "DiSF at matched quality"}
    assert row["yardsticks"]["Pair_simi frontier"][0] == pytest.approx(1.0)
    assert list(row["points"]) == ["0.45"]  # one selection, not a grid


def test_random_vectors_lose_the_neighbours_the_centred_copy_keeps(judged):
    centred, random = judged["centred"]["yardsticks"], judged["random unit vectors"]["yardsticks"]
    assert centred["neighbour recall"][0] > 0.8
    assert random["neighbour recall"][0] < 0.2
    assert random["Pair_simi at matched quality"][0] < centred["Pair_simi at matched quality"][0]


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
    assert valid["Pair_simi at lamb 0.5"]["valid"]
    assert not valid["neighbour recall"]["valid"]  # 0.9: a harmless variant below the band
    assert not bench.validity(rows_with(0.97, 0.6))["DiSF at lamb 0.5"]["valid"]  # bad too high
    assert not bench.validity(rows_with(1.2, 0.1))["DiSF at lamb 0.5"]["valid"]  # above the band


def test_the_choice_prefers_one_selection_per_route_within_a_near_gap():
    valid = bench.validity(rows_with(0.97, 0.3))
    assert bench.chosen(valid) == "Pair_simi at lamb 0.5"
    valid["Pair_simi at lamb 0.5"]["valid"] = False
    valid["DiSF at lamb 0.5"]["valid"] = False
    valid["Facility at lamb 0.5"]["valid"] = False
    assert bench.chosen(valid) == "Pair_simi at matched quality"
    assert bench.chosen({n: {**v, "valid": False} for n, v in valid.items()}) is None


def test_the_findings_claim_reads_what_the_bench_writes_of_each_yardsticks_validity(tmp_path):
    from reproduce.experiments.claims import fidelity_yardstick
    folder = tmp_path / "static-embedding" / "yardstick"
    folder.mkdir(parents=True)
    (folder / "validity.json").write_text(json.dumps(bench.findings(rows_with(0.97, 0.3))))
    found = fidelity_yardstick(str(tmp_path), "static-embedding/yardstick")
    assert found["valid"] == 6 and found["yardstick"] == "Pair_simi at lamb 0.5"
    assert bench.findings(rows_with(0.5, 0.3))["yardstick"] == "none"

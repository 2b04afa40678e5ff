"""eval/draws.py: selection noise in every interval (several draws per method and per reference)."""

import numpy as np
import pytest

from eval.draws import (draw_groups, draw_variance, drawn_from, minimum_detectable,
                        null_false_positives, selection_difference)
from eval.stats import paired_difference
from eval.tables import selection_noise_markdown, summarize
from eval.verdict import verdict

SEEDS = (0, 1, 2)


def draw(offset: float, noise=(0.0, 0.01, -0.02)) -> dict:
    """One selection's value on each training seed: its own offset plus the seed's effect."""
    return {s: 1.0 + offset + n for s, n in zip(SEEDS, noise)}


def test_without_selection_noise_it_is_the_paired_difference_over_seeds():
    method, reference = draw(0.05, (0.0, 0.02, -0.01)), draw(0.0)
    ours = selection_difference([method], [reference], variance=0.0, variance_draws=5)
    theirs = paired_difference(method, reference)
    assert ours["df"] == pytest.approx(2)
    for key in ("mean", "low", "high", "resolved"):
        assert ours[key] == pytest.approx(theirs[key])


def test_the_spread_between_random_draws_widens_the_interval():
    """A shift that the seeds alone resolve is unresolved once random's own draws are seen to
    differ by as much: it is what another selection would have given."""
    method, reference = draw(0.05, (0.0, 0.02, -0.01)), draw(0.0)
    assert paired_difference(method, reference)["resolved"]
    randoms = [draw(offset) for offset in (-0.04, 0.0, 0.03, 0.05, -0.02)]
    variance = draw_variance(randoms)
    assert variance == pytest.approx(np.var([-0.04, 0.0, 0.03, 0.05, -0.02], ddof=1))
    wide = selection_difference([method], [reference], variance, len(randoms))
    assert not wide["resolved"] and wide["low"] < 0 < wide["high"]
    averaged = selection_difference([method], randoms, variance, len(randoms))
    assert averaged["draws"] == [1, 5] and averaged["se"] < wide["se"]


def test_a_large_effect_is_still_resolved_against_several_draws():
    randoms = [draw(offset) for offset in (-0.01, 0.0, 0.01, 0.005, -0.005)]
    worse = [draw(0.5, (0.0, 0.02, -0.01))]
    result = selection_difference(worse, randoms, draw_variance(randoms), len(randoms))
    assert result["resolved"] and result["low"] > 0


def test_draws_that_differ_only_by_their_selection_are_not_false_positives():
    """Five random draws, each shifted by its own constant: every pair differs on every seed by
    the same amount, which a test over seeds alone calls resolved every time; with the draws'
    spread in the interval none of the 10 pairs is."""
    randoms = [draw(offset) for offset in (0.0, 0.01, 0.02, 0.03, 0.04)]
    assert all(paired_difference(randoms[0], b)["resolved"] for b in randoms[1:])
    assert null_false_positives(randoms) == {"pairs": 10, "resolved": 0, "rate": 0.0}
    assert null_false_positives(randoms[:1])["rate"] is None


def test_too_few_shared_seeds_resolve_nothing():
    one_seed = [{0: 1.0}, {0: 2.0}]
    assert not selection_difference(one_seed[:1], one_seed[1:], 0.0, 2)["resolved"]


def test_the_minimum_detectable_difference_shrinks_with_the_error_and_the_degrees_of_freedom():
    assert minimum_detectable(0.01, 1e6) == pytest.approx(0.01 * (1.95996 + 0.84162), rel=1e-4)
    assert minimum_detectable(0.01, 2) > minimum_detectable(0.01, 10) > minimum_detectable(
        0.005, 10)


def test_draw_labels_name_their_method_in_either_arm():
    assert drawn_from("random~2") == "random" and drawn_from("random~2@strat") == "random@strat"
    assert drawn_from("junk-0.25") == "junk-0.25" and drawn_from("random") == "random"
    assert draw_groups(["random~1", "a", "random", "random~1@strat", "random@strat"]) == {
        "random": ["random", "random~1"], "a": ["a"],
        "random@strat": ["random@strat", "random~1@strat"]}


def test_tables_with_random_draws_give_the_selection_noise_and_keep_draws_out_of_the_verdict():
    """Five draws of random that differ by constant offsets, a method no better than them and a
    harm far outside them: the null resolves no pair, the method is unresolved over the draws
    (though resolved against draw 0 alone), the harm is resolved, and random's draws are not
    judged as methods."""
    offsets = {"random": 0.0, "random~1": 0.01, "random~2": 0.02, "random~3": -0.01,
               "random~4": 0.03, "method": 0.035, "harm": 0.5}
    values = {label: {s: {"bpb macro": 2.0 + off + n} for s, n in zip(SEEDS, (0.0, 0.01, -0.02))}
              for label, off in offsets.items()}
    table = summarize({"bpb macro": False}, values, "random")
    noise = table["selection_noise"]["bpb macro"]
    assert noise["draws"] == 5 and noise["null"] == {"pairs": 10, "resolved": 0, "rate": 0.0}
    assert set(noise["vs_reference"]) == {"method", "harm"}
    assert table["vs_reference"]["method"]["bpb macro"]["resolved"]  # by the seeds alone
    assert not noise["vs_reference"]["method"]["resolved"]
    assert noise["vs_reference"]["harm"]["resolved"] and noise["minimum_detectable"] > 0
    table["verdict"] = verdict(table, "random", primary="bpb macro")
    assert set(table["verdict"]["vs_random"]) == {"method", "harm"}
    text = selection_noise_markdown(table)
    assert "| bpb macro | " in text and "0 of 10" in text and "| harm | 1 | " in text
    one_draw = summarize({"bpb macro": False}, {k: values[k] for k in ("random", "harm")},
                         "random")
    assert "selection_noise" not in one_draw and selection_noise_markdown(one_draw) == ""

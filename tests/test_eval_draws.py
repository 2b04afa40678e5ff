"""eval/draws.py: selection noise in every interval (several draws per method and per reference)."""

import numpy as np
import pytest

from eval.draws import (draw_groups, draw_variance, drawn_from, minimum_detectable,
                        null_false_positives, selection_difference)
from eval.stats import paired_difference
from eval.tables import selection_noise_markdown, summarize
from eval.calibration import parse_dose
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
    assert null_false_positives(randoms) == {"pairs": 10, "resolved": 0, "rate": 0.0,
                                             "resolved_by_seeds": 10}
    assert null_false_positives(randoms[:3])["rate"] is None  # V needs two draws besides a pair


def test_the_null_can_fail_a_pair_is_judged_against_the_other_draws_spread():
    """With V from all five draws, itself included, no pair could ever be resolved; held out, a
    draw far from four close ones is resolved against each of them."""
    randoms = [draw(offset) for offset in (0.0, 0.0001, -0.0001, 0.0, 0.05)]
    assert null_false_positives(randoms)["resolved"] == 4


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
    assert noise["draws"] == 5 and noise["null"] == {"pairs": 10, "resolved": 0, "rate": 0.0,
                                                     "resolved_by_seeds": 10}
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


def drawn_table(reference: str = "random", doses: bool = True) -> dict:
    """An arm with five draws of random that differ by small offsets, on two primaries: junk
    doses that harm in proportion, datamask-paper drawn 3 times and no better than random,
    datamask-Pair_simi clearly better, and greedy-start (3 draws) as good as random."""
    suffix = reference.removeprefix("random")
    offsets = {"random": 0.0, "random~1": 0.004, "random~2": -0.003, "random~3": 0.002,
               "random~4": -0.001, "datamask-paper": 0.001, "datamask-paper~1": -0.002,
               "datamask-paper~2": 0.003, "datamask-Pair_simi": -0.2, "greedy-start": 0.0,
               "greedy-start~1": 0.002, "greedy-start~2": -0.001}
    if doses:
        offsets |= {"junk-0.1": 0.02, "junk-0.5": 0.1}
    values = {}
    for label, off in offsets.items():
        values[label if parse_dose(label) else label + suffix] = {s: {"P": 1.0 + off + n, "Q": 2.0 + 2 * off + n}
                        for s, n in zip(SEEDS, (0.0, 0.003, -0.002))}
    table = summarize({"P": False, "Q": False}, values, reference)
    table["snr"] = {}
    return table


def test_the_methods_against_randoms_draws_are_tabled_on_every_primary():
    """Two primaries: the table of each method against random's draws has a column per primary,
    in the verdict's order, and each cell is that primary's difference."""
    table = drawn_table(doses=False)
    table["verdict"] = verdict(table, "random", primary=["Q", "P"])
    text = selection_noise_markdown(table)
    assert "draws on Q, P (the mean" in text
    lines = text.splitlines()
    assert "| method | draws | Q | P |" in lines
    row = next(line for line in lines if line.startswith("| datamask-Pair_simi |")).split(" | ")
    assert row[1] == "1"
    q, p = (table["selection_noise"][m]["vs_reference"]["datamask-Pair_simi"]["mean"]
            for m in ("Q", "P"))
    assert float(row[2].split()[0]) == pytest.approx(q, abs=0.005) and q < -0.3
    assert float(row[3].split()[0]) == pytest.approx(p, abs=0.005) and p > -0.3


def test_the_drawn_verdict_bounds_the_claim_and_says_what_the_policy_gradient_adds():
    free = drawn_table()
    assert set(free["methods"]) >= {"random~4", "datamask-paper~2", "junk-0.5"}
    free["verdict"] = verdict(free, "random", primary=["P", "Q"])
    v = free["verdict"]
    assert v["primaries"] == ["P", "Q"] and v["primary"] == "P"
    for primary in ("P", "Q"):
        calibration = v["by_primary"][primary]["calibration"]
        assert calibration["eligible"] and calibration["false_positives"]["pairs"] == 10
        assert calibration["smallest_resolved"]["junk"] == 0.1
        outcomes = v["by_primary"][primary]["vs_random"]
        assert outcomes == {"datamask-paper": "unresolved", "datamask-Pair_simi": "beats random",
                            "greedy-start": "unresolved"}  # random's draws and doses are not
        paper = v["by_primary"][primary]["bounds"]["datamask-paper"]
        assert not paper["resolved_better"] and 0 < paper["most"]
        # the bound sits between no harm and junk-0.1's, interpolated linearly from dose 0
        harm = dict(calibration["junk_harm"])
        assert paper["junk_dose"] == pytest.approx(0.1 * paper["most"] / harm[0.1])
        assert v["by_primary"][primary]["bounds"]["datamask-Pair_simi"]["resolved_better"]
        gradient = v["by_primary"][primary]["policy_gradient"]
        assert gradient["datamask-Pair_simi"]["outcome"] == "below 0"
        assert gradient["datamask-paper"]["outcome"] == "unresolved"
        assert gradient["datamask-paper"]["difference"]["draws"] == [3, 3]
    text = "\n".join(v["lines"])
    assert "The paper's claim, datamask-paper, on P: at this scale, its gain over random, if " \
           "any, is below" in text and "about the harm of junk at dose 0.0" in text
    assert "What the policy gradient adds, datamask-Pair_simi - greedy-start on Q: better " \
           "than its start" in text
    # the stratified arm reads its eligibility and doses off the free arm, and bounds nothing
    stratified = drawn_table("random@strat", doses=False)
    assert "datamask-paper~1@strat" in stratified["methods"]
    stratified["verdict"] = verdict(stratified, "random@strat", primary=["P", "Q"],
                                    calibrated_by=("the free arm", free))
    sv = stratified["verdict"]["by_primary"]["P"]
    assert sv["calibration"]["from"] == "random" and sv["calibration"]["eligible"]
    assert sv["calibration"]["own_false_positives"]["pairs"] == 10
    assert sv["bounds"] == {} and set(sv["policy_gradient"]) == {"datamask-paper",
                                                                  "datamask-Pair_simi"}
    assert set(sv["vs_random"]) == {"datamask-paper@strat", "datamask-Pair_simi@strat",
                                    "greedy-start@strat"}


def test_a_primary_whose_null_resolves_too_many_pairs_is_not_eligible():
    """Random's draws that differ by more than their spread predicts on every seed (one draw far
    off): pairs with it resolve, the primary is not eligible and decides nothing."""
    values = {label: {s: {"P": 1.0 + off + n} for s, n in zip(SEEDS, (0.0, 0.0001, -0.0001))}
              for label, off in {"random": 0.0, "random~1": 0.0001, "random~2": -0.0001,
                                 "random~3": 0.0, "random~4": 0.05, "method": 0.01}.items()}
    table = summarize({"P": False}, values, "random")
    table["verdict"] = verdict(table, "random", primary=["P"])
    calibration = table["verdict"]["by_primary"]["P"]["calibration"]
    assert calibration["false_positives"]["resolved"] > 1 and not calibration["eligible"]
    assert "NOT eligible" in table["verdict"]["lines"][0]
    assert any("decides nothing" in line for line in table["verdict"]["lines"][1:])
    assert table["verdict"]["by_primary"]["P"]["bounds"] == {}


def test_the_run_summary_and_the_forest_read_the_drawn_verdict_on_every_primary(tmp_path):
    """verdict.md and arms.md of a run whose random was drawn several times: one row per method
    (random's draws are not rows), each arm on each primary, the claim's bound and what the
    policy gradient adds; the forest plot's rows are the same methods."""
    import json

    from figures.downstream import forest_rows
    from reproduce.experiments.downstream_report import arms_markdown, verdict_summary

    free = drawn_table()
    free["verdict"] = verdict(free, "random", primary=["P", "Q"])
    stratified = drawn_table("random@strat", doses=False)
    stratified["verdict"] = verdict(stratified, "random@strat", primary=["P", "Q"],
                                    calibrated_by=("the free arm", free))
    for folder, table in (("tables", free), ("tables-stratified", stratified)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "table2.json").write_text(json.dumps(table))
    arms_markdown(tmp_path)
    arms = (tmp_path / "arms.md").read_text()
    assert "On `P`:" in arms and "On `Q`:" in arms and "random~" not in arms
    assert "| datamask-Pair_simi | beats random | beats random | choice within domains |" in arms
    text = verdict_summary(tmp_path)
    lines = text.splitlines()
    assert lines[0].startswith("# Verdict on P and Q:") and "P1: P; P2: Q" in lines
    assert "| method | free arm P1 | stratified arm P1 | free arm P2 | stratified arm P2 | " \
           "the difference is |" in lines
    start = lines.index(next(line for line in lines if line.startswith("| method |")))
    rows = lines[start + 2:lines.index("", start)]
    assert [r.split(" | ")[0][2:] for r in rows] == ["datamask-paper", "datamask-Pair_simi",
                                                   "greedy-start"]
    assert rows[1].count("**better**") == 4 and rows[1].endswith(
        "| P1 choice within domains; P2 choice within domains |")
    # the calibration and the claim as tables, one row per primary (and arm): one screen
    assert len(lines) <= 40
    assert "| P1 | 0 of 10 / 0 of 10 | yes | junk 0.1 |" in text
    assert "| primary | what | datamask-paper | datamask-Pair_simi |" in lines
    claim = next(line for line in lines if line.startswith("| P2 | the paper's claim"))
    paper, pair_simi = claim.strip("| ").split(" | ")[2:]
    assert paper.startswith("below ") and ", junk at dose 0.0" in paper
    assert pair_simi.endswith("**better**")
    gradient = [line for line in lines if "what the policy gradient adds" in line]
    assert [line.split(" | ")[1].rsplit(", ", 1)[1] for line in gradient] == [
        "free arm", "stratified arm"] * 2
    assert all(line.endswith("**better** |") for line in gradient)
    assert [row["method"] for row in forest_rows({"free": free, "stratified": stratified})] == [
        "datamask-paper", "datamask-Pair_simi", "greedy-start"]

"""`make findings` decides each claim from its results folder by the rule it states: crafted
results flip the verdicts they should, a missing folder names the target that writes it, and a
results file of another shape is refused by name."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_adversarial import refused
from datamask.errors import UserError
from reproduce.experiments import claims, findings
from reproduce.experiments.common import lr_setting
from reproduce.experiments.length_bias import against_chance, role
from reproduce.experiments.records import (CurvePoint, GreedyLevel, LengthBiasResult,
                                           LengthCorpus, LengthSummary, Machine, SweepResult,
                                           SweepRun, SweepSummary)

RESULTS = Path(__file__).resolve().parents[1] / "reproduce" / "results"


def row(metric, value, mean, std=0.1, start=1.0, wall=1.0, stable=True) -> SweepSummary:
    return SweepSummary(metric=metric, objective_mean=mean, objective_std=std, wall_s_mean=wall,
                        means={}, value=value, start_mean=start, stable=stable)


def write_sweep(root: Path, knob: str, summary: list[SweepSummary], **extra) -> None:
    """A sweep's results file with what findings reads, in its question's folder."""
    metrics = list(dict.fromkeys(s.metric for s in summary))
    result = SweepResult(**{**dict(
        experiment=f"ablation-{knob}", knob=knob, paper="", runs=[], summary=summary, greedy=[],
        best={}, smallest_stable={}, config={"metrics": metrics, "n": 100, "steps": 10,
                                             "seeds": [0]},
        machine=Machine("cpu", 2, 1, "torch", "cpu", None, "3")), **extra})
    (root / f"ablation-{knob}").mkdir(parents=True, exist_ok=True)
    (root / f"ablation-{knob}" / f"ablation-{knob}.json").write_text(json.dumps(result.to_json()))


def report(root: Path) -> str:
    return findings.report(findings.decided(str(root)), str(root))


def section(text: str, question: str) -> str:
    return text.split(f"## {question}\n", 1)[1].split("\n## ", 1)[0]


def test_verdicts_follow_the_numbers(tmp_path):
    default = lr_setting()
    write_sweep(tmp_path, "lr", [row("DiSF", "linear:0.01:0.001", 1.05), row("DiSF", default, 3.0),
                                 row("DiSF", "linear:1000:100", 1.5)],
                greedy=[GreedyLevel(metric="DiSF", lamb=0.5, wall_s=1.0, objective=9.0)])
    write_sweep(tmp_path, "logprob", [row("DiSF", "simple", 2.0, wall=1.0),
                                      row("DiSF", "exact", 2.5, wall=3.0)])
    write_sweep(tmp_path, "G", [row("DiSF", 32.0, 1.0, stable=False),
                                row("DiSF", 128.0, 1.0, stable=False)],
                smallest_stable={"DiSF": None})
    text = findings.write_findings(str(tmp_path))
    assert (tmp_path / "findings.md").read_text() == text
    rate = section(text, "The learning rate")
    assert ("- DiSF: best " + default + " (3.000 +- 0.100); too high a rate ends more than one std "
            "below it (linear:1000:100: 1.500): **holds**; too low a rate gains under 10% of the "
            "best's gain (linear:0.01:0.001: 0.050 against 2.000): **holds**.") in rate
    logprob = section(text, "The simplified log-probability costs nothing")
    assert "difference +0.500" in logprob and "time exact / simple 3.00" in logprob
    assert "**does not hold**" in logprob
    # unstable at every G, 128 included: not the paper's "below 128 diverges"
    assert "unstable at 32, 128" in section(text, "G below 128 diverges")
    assert "| **does not hold** | [ablation-G/](ablation-G/)" in text
    write_sweep(tmp_path, "G", [row("DiSF", 32.0, 1.0, stable=False), row("DiSF", 128.0, 1.0)],
                smallest_stable={"DiSF": 128.0})
    assert "| **holds** | [ablation-G/](ablation-G/)" in findings.write_findings(str(tmp_path))


def test_a_claim_without_its_folder_names_the_target_that_writes_it(tmp_path):
    text = report(tmp_path)
    for claim in claims.load_claims():
        assert f"Not measured: run {claim.regenerate}." in section(text, claim.question)
    one_selection = next(c for c in claims.load_claims() if c.commit)  # a target run since
    assert f"| `make {one_selection.target}` at commit {one_selection.commit} |" in text
    assert text.count("| not measured | not measured |") == len(claims.load_claims())


def test_a_results_file_of_another_shape_is_refused_by_name(tmp_path, capsys):
    """In one line, exit 2, nothing written: the command's refusals are the stages'."""
    (tmp_path / "ablation-G").mkdir()
    (tmp_path / "ablation-G" / "ablation-G.json").write_text(json.dumps({"knob": "G"}))
    refused(findings.main, ["--results", tmp_path], capsys, tmp_path, "ablation-G.json")


def copy_results(tmp_path: Path, *folders: str) -> Path:
    for folder in folders:
        shutil.copytree(RESULTS / folder, tmp_path / folder)
    return tmp_path


def learner_objective(path: Path, n: int, objective: float) -> None:
    """Set the learner's objective at `n` rows in a committed timing run's copy."""
    data = json.loads(path.read_text())
    for run in data["runs"]:
        if run["label"] == "datamask" and run["n"] == n:
            run["objective"] = objective
    path.write_text(json.dumps(data))


def test_a_target_missed_by_one_run_turns_its_metrics_verdict(tmp_path):
    root = copy_results(tmp_path, "scale/pair-init-greedy", "scale/disf-stall-checks",
                        "scale/disf-stall-checks-40c", "facility-start")
    targets = next(c for c in claims.load_claims() if c.decide == "objective_targets")
    assert targets.finding(str(root)).verdict == "holds"
    timing = root / "scale" / "pair-init-greedy" / "timing.json"
    random = next(r["random_objective"] for r in json.loads(timing.read_text())["runs"]
                  if r["n"] == 20_000)
    learner_objective(timing, 20_000, random)  # no gain over random at 20,000 rows
    finding = targets.finding(str(root))
    assert finding.verdict == "holds for DiSF, Facility only"
    assert finding.here == "5 of 6 targets met, 6 of them by the greedy start the learner wrote " \
        "unchanged"
    assert "| Pair_simi at 20,000 rows: at least 0.99 of `pair-greedy`'s gain | gain 0.000" in \
        "\n".join(finding.lines)


def test_the_headline_says_whether_the_start_or_a_later_step_wrote_the_selection(tmp_path):
    root = copy_results(tmp_path, "scale/pair-init-greedy", "scale/disf-stall-checks",
                        "scale/disf-stall-checks-40c", "facility-start", "scale/disf-rule-100k")
    by = {c.decide: c for c in claims.load_claims()}
    time, targets = by["selection_time"].finding(str(root)), by["objective_targets"]
    assert "its stochastic greedy start wrote the selection" in time.here
    assert "the policy gradient from equal logits 2.57x the fast greedy's time" in time.here
    timing = root / "scale" / "pair-init-greedy" / "timing.json"
    data = json.loads(timing.read_text())
    next(r for r in data["runs"] if r["label"] == "datamask" and r["n"] == 5_000)["best_step"] = 40
    timing.write_text(json.dumps(data))
    assert targets.finding(str(root)).here.endswith("5 of them by the greedy start the learner "
                                                    "wrote unchanged")
    stall = root / "scale" / "disf-stall-checks" / "timing.json"
    data = json.loads(stall.read_text())
    next(r for r in data["runs"] if r["label"] == "datamask" and r["n"] == 100_000)["best_step"] = 200
    stall.write_text(json.dumps(data))
    assert "a later step wrote the selection" in by["selection_time"].finding(str(root)).here


def test_facility_at_1m_reads_the_adopted_plan_and_lists_the_others(tmp_path):
    claim = next(c for c in claims.load_claims() if c.question == "Facility at 1,000,000 rows")
    evidence = claim.evidence
    root = copy_results(tmp_path, *evidence)
    finding = claim.finding(str(root))
    assert (finding.verdict, finding.here) == ("met", "gain 1.041, time 0.51x")
    assert [line.split(": gain")[0] for line in finding.lines] == [
        f"- {plan}" for plan in claim.parameters["labels"]]
    # the adopted run holds its own greedy, timed beside it; the older runs take the last folder's
    assert "against 714.5 s" in finding.lines[0] and "against 530.1 s" in finding.lines[1]
    adopted = root / evidence[0] / "timing.json"
    record = json.loads(adopted.read_text())
    at_1m = {r["label"]: r for r in record["runs"] if r["n"] == 1_000_000}
    greedy, learner = at_1m["facility-knn-greedy stochastic"], at_1m["datamask"]
    in_time = learner["wall_s"]
    learner["wall_s"] = 2.01 * greedy["wall_s"]  # past twice the greedy's time
    adopted.write_text(json.dumps(record))
    assert claim.finding(str(root)).verdict == "not met"
    learner["wall_s"], learner["objective"] = in_time, greedy["objective"] - 1e-4  # short of it
    adopted.write_text(json.dumps(record))
    assert claim.finding(str(root)).verdict == "not met"
    shutil.rmtree(root / evidence[0])
    assert claim.finding(str(root)) is None


def test_what_the_policy_gradient_adds_counts_later_steps_per_metric_and_lamb(tmp_path):
    claim = next(c for c in claims.load_claims() if c.decide == "gradient_adds")
    finding = claim.finding(str(copy_results(tmp_path, "ablation-stop")))
    table = "\n".join(finding.lines)
    assert "| Facility | 0.5 | 1,000, 3,000 | 0 of 6 | 1.0000 |" in table
    assert "| Pair_simi | 0.5 | 1,000, 3,000 | 6 of 6 |" in table
    assert finding.verdict == "adds for Pair_simi at lamb 0.5, DiSF at lamb 0.5 only"


def test_downstream_claims_read_both_arms_and_the_instruments_goals(tmp_path):
    def write(path: Path, record: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))

    null = {"resolved": False, "difference": {"mean": 0.001, "low": -0.01, "high": 0.012}}
    verdict = {"primary": "bpb macro (EMA)", "lines": ["Calibration: fine"],
               "calibration": {"null": null, "smallest_resolved": {"junk": 0.1}},
               "vs_random": {"datamask-Pair_simi": "better than random", "random-null": "x"},
               "ordering": {"datamask-Pair_simi": {"outcome": "holds"}}}
    write(tmp_path / "downstream" / "tables" / "table2.json",
          {"power": {"bpb macro": {"paired_sd": 0.036}}, "verdict": {"lines": ["first proxy"]}})
    write(tmp_path / "downstream" / "V512-d64" / "tables" / "table2.json",
          {"verdict": verdict, "snr": {"bpb macro (EMA)": {"noise": 0.011}}})
    text = report(tmp_path)
    assert "| free: Pair_simi better than random | **holds** |" in text
    table2 = section(text, "Table 2: DATAMASK's selection trains a better model (one selection "
                              "per method)")
    assert "- Calibration: fine" in table2 and "- first proxy" in table2
    instrument = section(text, "The downstream instrument resolves a known harm")
    assert "third of the first proxy's (0.0120): 0.0110: **met**" in instrument
    assert "junk dose at most 0.25: 0.1: **met**" in instrument
    null["resolved"] = True
    write(tmp_path / "downstream" / "V512-d64" / "tables" / "table2.json",
          {"verdict": verdict, "snr": {"bpb macro (EMA)": {"noise": 0.013}}})
    instrument = section(report(tmp_path),
                         "The downstream instrument resolves a known harm")
    assert instrument.count("**not met**") == 2


def test_table2_with_random_drawn_five_times_reads_the_paper_row_on_each_eligible_primary(
        tmp_path):
    """The drawn design's claim: datamask-paper unresolved on both primaries is stated as a
    bound; resolved worse on one eligible primary contradicts the claim there; a primary that is
    not eligible decides nothing."""
    from eval.verdict import verdict
    from reproduce.experiments.downstream_report import arms_markdown
    from test_eval_draws import drawn_table

    run = tmp_path / "downstream" / "third"
    free = drawn_table()
    free["verdict"] = verdict(free, "random", primary=["P", "Q"])
    stratified = drawn_table("random@strat", doses=False)
    stratified["verdict"] = verdict(stratified, "random@strat", primary=["P", "Q"],
                                    calibrated_by=("the free arm", free))

    claim = next(c for c in claims.load_claims() if c.decide == "table2_bound")
    question = claim.question
    assert claim.evidence[:2] == ["downstream/third", "downstream/V512-d64"]

    def write(free: dict) -> str:
        for folder, table in (("tables", free), ("tables-stratified", stratified)):
            (run / folder).mkdir(parents=True, exist_ok=True)
            (run / folder / "table2.json").write_text(json.dumps(table))
        arms_markdown(run)
        return findings.report([(claim, claim.finding(str(tmp_path)))], str(tmp_path))

    text = write(free)
    most = free["verdict"]["by_primary"]["P"]["bounds"]["datamask-paper"]["most"]
    assert (f"| `P`: datamask-paper unresolved (gain below {most:.4f}), datamask-Pair_simi beats "
            f"random; `Q`: ") in text
    assert "| **not reproduced at this scale (unresolved on `P`; unresolved on `Q`)** |" in text
    body = section(text, question)
    assert "- The paper's claim, datamask-paper, on P: at this scale" in body
    assert "On `Q`:" in body and body.count("its own null resolves 0 of 10 pairs") == 2
    free["verdict"]["by_primary"]["Q"]["vs_random"]["datamask-paper"] = "worse than random"
    assert "(unresolved on `P`; contradicted on `Q`)" in write(free)
    for primary in ("P", "Q"):
        free["verdict"]["by_primary"][primary]["calibration"]["eligible"] = False
    text = write(free)
    assert "| **not judged: no primary eligible** |" in text and "`P` (not eligible)" in text


def timed(metric, value, points, seeds=(0, 1, 2)) -> list[SweepRun]:
    """An equal-time sweep's runs of one value: the same curve, (seconds, objective) per point,
    for each seed."""
    curve = [CurvePoint(step, t, objective) for step, (t, objective) in enumerate(points)]
    return [SweepRun(metric=metric, value=value, seed=seed, params={"n_epochs": len(points)},
                     wall_s=points[-1][0], objective=points[-1][1], final={}, curve=curve)
            for seed in seeds]


FULL = [(1, 2.0), (2, 5.0), (4, 8.0), (8, 10.0)]  # partial 1.0: 50% of 10 at 2 s, 90% at 8 s
SHARES = {"fast to both levels": [(0.5, 6.0), (1, 9.5), (2, 10.0), (10, 10.2)],
          "fast to half, never to 90%": [(0.5, 6.0), (1, 7.0), (10, 11.0)],
          "slow to both": [(3, 2.0), (6, 3.0), (9, 4.0)]}


def partial_by_time(root: Path, curves: dict[str, list]) -> None:
    """partial-by-time/'s results file: per metric, 100% on FULL, 10% and 5% on its curve (5% a
    second later), 1% flat."""
    runs = [run for metric, share in curves.items() for run in (
        *timed(metric, 1.0, FULL), *timed(metric, 0.1, share),
        *timed(metric, 0.05, [(t + 1, o) for t, o in share]),
        *timed(metric, 0.01, [(1, 0.0), (20, 0.0)]))]
    write_sweep(root, "partial", [], runs=runs, config={
        "metrics": list(curves), "values": [1.0, 0.1, 0.05, 0.01], "steps": 4, "seeds": [0, 1, 2],
        "equal_time": True})
    (root / "ablation-partial").rename(root / "partial-by-time")


@pytest.mark.parametrize("curve, verdict", [("fast to both levels", "holds"),
                                            ("fast to half, never to 90%", "holds in part"),
                                            ("slow to both", "does not hold")])
def test_partial_by_time_is_judged_by_the_time_to_each_level(tmp_path, curve, verdict):
    partial_by_time(tmp_path, {"Pair_simi": SHARES[curve]})
    claim = next(c for c in claims.load_claims() if c.question.startswith("partial"))
    finding = claim.finding(str(tmp_path))
    assert finding.verdict == verdict
    text = "\n".join(finding.lines)
    assert "| Pair_simi | 0.01 | 2 | 0.000 [0.000, 0.000] | - [-, -] | - [-, -] |" in text
    assert "| Pair_simi | 1.0 | 4 | 10.000 [10.000, 10.000] | 2 [2, 2] | 8 [8, 8] |" in text
    if curve == "fast to both levels":  # 10% gets to 5 at 0.5 s and to 9 at 1 s
        assert finding.here == "time to 90%, 0.1/0.05 against 1.0: Pair_simi 0.12x"
        assert "to 50%, 0.1 against 1.0: 0.25x (0.5 s against 2 s) (a cut)" in text
    if curve == "fast to half, never to 90%":
        assert "to 90%, 0.1 against 1.0: 0.1 not reached (not reached against 8 s) (no cut)" in text


def test_time_claims_name_each_metrics_word_and_read_the_fixed_steps_beside(tmp_path):
    partial_by_time(tmp_path, {"Pair_simi": SHARES["fast to both levels"],
                               "Facility": SHARES["slow to both"],
                               "DiSF": SHARES["fast to both levels"]})
    write_sweep(tmp_path, "partial", [row("Pair_simi", 1.0, 3.0), row("Pair_simi", 0.1, 4.0)],
                best={"Pair_simi": 0.1})
    text = report(tmp_path)
    assert ("| **holds for Pair_simi, DiSF; does not hold for Facility** | "
            "[partial-by-time/](partial-by-time/) |") in text
    assert "reported, no rule" not in section(text, "partial: each step on a share of the rows")
    assert "At fixed steps (`ablation-partial/`):" in text
    assert "- Pair_simi: best partial = 0.1; final objective from 3.000 to 4.000" in text


def test_pruning_then_the_quality_start_must_each_cut_the_time(tmp_path):
    # every start runs as long as `same` (8 s), as the sweep's equal time has them
    slow, faster, fastest = FULL, [(t / 2, o) for t, o in FULL] + [(8, 10.0)], [
        (t / 4, o) for t, o in FULL] + [(8, 10.0)]
    claim = next(c for c in claims.load_claims() if c.target == "init-by-time")

    def verdict(prune, quality_prune):
        runs = [*timed("DiSF", "same", slow), *timed("DiSF", "quality", slow),
                *timed("DiSF", "same+prune", prune), *timed("DiSF", "quality+prune", quality_prune)]
        write_sweep(tmp_path, "init", [], runs=runs, config={
            "metrics": ["DiSF"], "values": ["same", "quality", "same+prune", "quality+prune"],
            "steps": 4, "seeds": [0, 1, 2], "equal_time": True})
        shutil.rmtree(tmp_path / "init-by-time", ignore_errors=True)
        (tmp_path / "ablation-init").rename(tmp_path / "init-by-time")
        return claim.finding(str(tmp_path)).verdict

    assert verdict(faster, fastest) == "holds"  # each halves the time at both levels
    assert verdict(faster, faster) == "holds in part"  # the quality start cuts nothing
    assert verdict(slow, faster) == "holds in part"  # pruning alone cuts nothing
    assert verdict(slow, slow) == "does not hold"


def test_the_best_mean_rank_breaks_a_tie_to_the_value_listed_first():
    @dataclass
    class Row:
        metric: str
        value: str
        objective_mean: float

    def result(objectives):
        rows = [Row(m, v, o) for m, by_value in objectives.items() for v, o in by_value.items()]
        return SimpleNamespace(summary=rows, metrics=list(objectives))

    tie = {"Pair_simi": {"same": 1.0, "quality": 2.0}, "DiSF": {"same": 2.0, "quality": 1.0}}
    assert claims.mean_rank_best(result(tie)) == "same"
    tie_other_order = {"Pair_simi": {"quality": 2.0, "same": 1.0},
                       "DiSF": {"quality": 1.0, "same": 2.0}}
    assert claims.mean_rank_best(result(tie_other_order)) == "quality"
    clear = {"Pair_simi": {"same": 1.0, "quality": 2.0}, "DiSF": {"same": 1.0, "quality": 3.0}}
    assert claims.mean_rank_best(result(clear)) == "quality"


def test_the_front_page_block_is_refused_where_the_page_has_none(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(f"# Title\n\n{findings.README_BEGIN}\nold\n{findings.README_END}\n\nrest\n")
    rows = findings.decided(str(tmp_path))
    findings.fill_readme(str(page), rows, "results")
    text = page.read_text()
    assert text.startswith(f"# Title\n\n{findings.README_BEGIN}\n| claim | paper |")
    assert text.endswith(f"{findings.README_END}\n\nrest\n") and "old" not in text
    assert text.count("| not measured | not measured |") == sum(
        c.paper != "-" for c in claims.load_claims())
    page.write_text("# no block\n")
    with pytest.raises(UserError, match="no generated block"):
        findings.fill_readme(str(page), rows, "results")
    assert page.read_text() == "# no block\n"


def write_length_bias(root: Path, ratios: dict) -> None:
    """A length-bias results file: per corpus, each selection's per-seed ratios; the chance band
    +- 0.05 on both corpora."""
    result = LengthBiasResult(
        experiment="length-bias", machine=Machine("cpu", 2, 1, "torch", "cpu", None, "3"),
        config={"ratio": 0.1, "seeds": [0, 1]},
        corpora=[LengthCorpus(name, "f", 1000, 100, 2000.0, 0.8, 0.05) for name in ratios],
        runs=[], summary=[LengthSummary(corpus, name, role(name), len(r), len(set(r)), min(r),
                                        sum(r) / len(r), max(r), against_chance(r, 0.05))
                          for corpus, by in ratios.items() for name, r in by.items()])
    (root / "length-bias").mkdir(exist_ok=True)
    (root / "length-bias" / "length-bias.json").write_text(json.dumps(result.to_json()))


def test_length_bias_holds_in_all_four_parts_or_names_those_that_hold(tmp_path):
    claim = next(c for c in claims.load_claims() if c.decide == "length_bias")
    greedies = {"pair-greedy": [0.8, 0.9], "facility-greedy": [0.7], "disf-greedy-fast": [0.9]}
    both = {"quality-topk": [1.3], **greedies, "random": [0.99, 1.02]}
    write_length_bias(tmp_path, {"pool": both, "bbc": both})
    finding = claim.finding(str(tmp_path))
    assert finding.verdict == "holds"
    assert finding.here == "pool: quality-topk 130%, greedies 85%, 70%, 90%; bbc: " \
        "quality-topk 130%, greedies 85%, 70%, 90%"
    # long, but under the paper's 114%; one seed of one greedy within chance
    write_length_bias(tmp_path, {"pool": {**both, "quality-topk": [1.1]},
                                 "bbc": {**both, "pair-greedy": [0.8, 0.97]}})
    finding = claim.finding(str(tmp_path))
    assert finding.verdict == "holds in part: quality long on bbc; diversity short on pool"
    assert "pair-greedy not short, facility-greedy short, disf-greedy-fast short: **does not " \
        "hold**." in "\n".join(finding.lines)
    # a judged greedy that did not run is not short; quality short is not long
    write_length_bias(tmp_path, {"pool": {"quality-topk": [0.9], "pair-greedy": [0.8]}})
    assert claim.finding(str(tmp_path)).verdict == "does not hold"


def test_defaults_table_takes_adopted_cells_over_older_ones_and_shows_each_side_table(tmp_path):
    """The defaults claim: an adopted round's cells replace the same cells run before (only the
    metric and lamb it names), and each side table reads its folder, a run held directly there
    or one folder per family; a cell shows its select ratio, the bench's 0.1 where its run
    recorded none."""
    def cell(family, metric, lamb, passes, time_ratio=1.0):
        return {"family": family, "rows": 3000, "metric": metric, "lamb": lamb,
                "greedy": "g", "gain_ratio": 1.0, "time_ratio": time_ratio, "written_step": 0,
                "passes": passes, "share_above_random_start": None,
                "share_above_random_written": None, "no_bound_reason": "no bound"}

    def write(folder, *rows):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "defaults.json").write_text(json.dumps({"rows": list(rows)}))

    write("today/a", cell("a", "DiSF", 0.0, False), cell("a", "DiSF", 0.5, False))
    write("round/screen/g", cell("a", "DiSF", 0.0, True, 0.5), cell("a", "DiSF", 0.5, True))
    write("round/screen/s", {**cell("a", "Facility", 0.0, False, 9.0), "ratio": 0.3})
    declared = next(c for c in claims.load_claims() if c.decide == "defaults_against_greedies")
    found = replace(declared, evidence=["today", "round"], parameters=dict(
        keep_of_greedy=0.99, adopted={"round/screen": ["DiSF lamb 0"]},
        beside=[{"title": "Not adopted:", "folder": "round", "parts": ["screen/s"]}])).finding(
            str(tmp_path))
    assert found.here.startswith("1 of 2 cells pass")
    text = "\n".join(found.lines)
    assert "| a | 3,000 | 0.1 | DiSF | 0 | g | 1.000 | 0.50 |" in text  # the adopted cell
    assert "Not adopted:" in text and "| a | 3,000 | 0.3 | Facility | 0 | g | 1.000 | 9.00 |" in text


NEW_CLAIM = """
- question: The exact update costs no more time than the simplified one
  paper: "-"
  evidence: [ablation-logprob]
  target: ablation-logprob
  rule: the exact update's mean time at most 1.5 times the simplified one's, on every metric
  decide: logprob_cost
  holds: {measure: time, op: '<=', value: 1.5}
  words: [in time, too slow]
  here: "exact / simple time at most 1.5 for {holding}"
  lines:
    - each: items
      lines:
        - "- {name}: exact {exact.wall_s_mean:.1f} s, simple {simple.wall_s_mean:.1f} s: **{word}**"
"""


def test_a_claim_declared_only_in_yaml_is_decided_and_written(tmp_path):
    """A new claim of an existing kind: its rule, words and sentences from the YAML alone."""
    declared = tmp_path / "claims.yaml"
    declared.write_text(NEW_CLAIM)
    write_sweep(tmp_path, "logprob", [row("DiSF", "simple", 2.0, wall=1.0),
                                      row("DiSF", "exact", 2.5, wall=3.0),
                                      row("Facility", "simple", 2.0, wall=2.0),
                                      row("Facility", "exact", 2.0, wall=2.5)])
    (claim,) = claims.load_claims(str(declared))
    text = findings.report([(claim, claim.finding(str(tmp_path)))], str(tmp_path))
    assert ("| [The exact update costs no more time than the simplified one]"
            "(#the-exact-update-costs-no-more-time-than-the-simplified-one) | - | exact / simple "
            "time at most 1.5 for Facility | **in time for Facility only** |") in text
    body = section(text, claim.question)
    assert "- DiSF: exact 3.0 s, simple 1.0 s: **too slow**" in body
    assert "- Facility: exact 2.5 s, simple 2.0 s: **in time**" in body
    declared.write_text(NEW_CLAIM.replace("value: 1.5", "value: 5"))
    (claim,) = claims.load_claims(str(declared))
    assert claim.finding(str(tmp_path)).verdict == "in time"


@pytest.mark.parametrize("change, named", [
    (("op: '<='", "opp: '<='"), "unknown key 'opp' in holds"),
    (("  evidence: [ablation-logprob]\n", ""), "missing key 'evidence'"),
    (("decide: logprob_cost", "decide: no_such_measure"), "no measure 'no_such_measure'"),
    (("- each: items", "- for: items"), "unknown key 'for' in lines"),
])
def test_a_malformed_claim_is_refused_in_one_line_naming_the_claim_and_key(tmp_path, change,
                                                                            named):
    declared = tmp_path / "claims.yaml"
    declared.write_text(NEW_CLAIM.replace(*change))
    with pytest.raises(UserError) as refused:
        claims.load_claims(str(declared))
    message = str(refused.value)
    assert "\n" not in message and named in message
    assert message.startswith(f"{declared}: claim 'The exact update costs no more time")


def test_a_template_naming_a_value_its_measure_does_not_give_is_refused_by_claim(tmp_path):
    declared = tmp_path / "claims.yaml"
    declared.write_text(NEW_CLAIM.replace("for {holding}", "for {no_such_value}"))
    write_sweep(tmp_path, "logprob", [row("DiSF", "simple", 2.0), row("DiSF", "exact", 2.5)])
    (claim,) = claims.load_claims(str(declared))
    with pytest.raises(UserError, match="claim 'The exact update costs no more time than the "
                                        "simplified one': its measure gives no 'no_such_value'"):
        claim.finding(str(tmp_path))


def test_a_second_measure_of_a_name_is_refused_when_it_is_registered():
    """A claim's `decide` names one measure: registering another under a name taken is an error
    at import, and the first stays the one claims are decided by."""
    first = claims.MEASURES["recorded"]
    with pytest.raises(ValueError, match="measure 'recorded' is registered twice"):
        claims.measure("recorded")(lambda root, folder: {})
    assert claims.MEASURES["recorded"] is first


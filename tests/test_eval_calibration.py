"""eval/calibration.py: the null, the dose-response series and SNR read from a summarised table."""

import json
import math

import numpy as np
import pytest

from eval.calibration import (dose_label, dose_response, mix_or_choice, parse_dose,
                              signal_noise)
from eval.tables import summarize

SEEDS = (0, 1, 2)


def table(shifts: dict[str, list[float]], base=(2.40, 2.50, 2.45)) -> dict:
    """A summarised table of 'bpb macro' (lower is better): random at `base`, every other label
    at base + its per-seed shift, so its paired differences with random are exactly the shifts."""
    values = {"random": {s: {"bpb macro": b} for s, b in zip(SEEDS, base)}}
    for label, shift in shifts.items():
        values[label] = {s: {"bpb macro": b + d} for s, b, d in zip(SEEDS, base, shift)}
    return summarize({"bpb macro": False}, values, "random")


def test_labels_round_trip_and_other_labels_are_not_doses():
    assert dose_label("junk", 0.25) == "junk-0.25"
    assert dose_label("dup", 0.5) == "dup-0.5"
    assert parse_dose("junk-0.05") == ("junk", 0.05)
    assert parse_dose("dup-0.1") == ("dup", 0.1)
    for label in ("random", "random-null", "junk", "junk-x", "datamask-DiSF", "junk-0.25@strat"):
        assert parse_dose(label) is None


def test_signal_noise_follow_the_plan_definition():
    shifts = {"random-null": [0.01, -0.01, 0.0], "junk-0.25": [0.10, 0.12, 0.11],
              "dup-0.25": [0.02, 0.05, 0.02], "junk-0.05": [0.5, 0.5, 0.9]}
    out = signal_noise(table(shifts))["bpb macro"]
    means = [np.mean(shifts[c]) for c in ("junk-0.25", "dup-0.25")]
    sds = [np.std(shifts[c], ddof=1) for c in ("random-null", "junk-0.25", "dup-0.25")]
    assert out["signal"] == pytest.approx(math.sqrt(np.mean(np.square(means))))
    assert out["noise"] == pytest.approx(math.sqrt(np.mean(np.square(sds))))
    assert out["snr"] == pytest.approx(out["signal"] / out["noise"])
    assert out["signal_from"] == ["junk-0.25", "dup-0.25"]  # other doses are not the signal
    assert out["noise_from"] == ["random-null", "junk-0.25", "dup-0.25"]


def test_signal_noise_without_calibration_rows_is_empty():
    assert signal_noise(table({"quality-topk": [0.1, 0.2, 0.1]})) == {}
    only_null = signal_noise(table({"random-null": [0.01, -0.02, 0.0]}))["bpb macro"]
    assert only_null["signal"] is None and only_null["snr"] is None and only_null["noise"] > 0


def test_dose_response_orders_doses_and_finds_the_smallest_harmful_one():
    shifts = {"junk-0.5": [0.30, 0.31, 0.29], "junk-0.05": [0.05, -0.04, 0.0],
              "junk-0.25": [0.10, 0.12, 0.11], "junk-0.1": [-0.20, -0.21, -0.19],
              "dup-0.25": [0.05, -0.05, 0.01], "random-null": [0.0, 0.01, -0.01]}
    out = dose_response(table(shifts), "bpb macro")
    assert [d["dose"] for d in out["junk"]["doses"]] == [0.05, 0.1, 0.25, 0.5]
    # 0.1 is resolved but better than random, so it is not a harm; 0.25 is the smallest harm
    assert out["junk"]["smallest_resolved"] == 0.25
    assert out["dup"]["smallest_resolved"] is None
    assert "random-null" not in str(out)
    # where higher is better the harmful side is below 0
    flipped = dose_response(table(shifts), "bpb macro", higher_is_better=True)
    assert flipped["junk"]["smallest_resolved"] == 0.1


def test_mix_or_choice():
    assert mix_or_choice("worse than random", "worse than random") == "choice within domains"
    assert mix_or_choice("worse than random", "unresolved") == "mix"
    assert mix_or_choice("beats random", "worse than random") == "mix"
    assert mix_or_choice("unresolved", "beats random") == ""
    assert mix_or_choice("beats random", None) == "no stratified run"


def result_file(folder, method, seed, shift, averaged=True):
    """An evaluate result file: four domains' bits per byte at `shift` above a seed's base."""
    base = {"books": 2.0, "docs": 2.2, "news": 2.4, "reference": 2.6}
    noise = (0.0, 0.05, -0.03)[seed]
    domains = {d: {"bits_per_byte": v + shift + noise} for d, v in base.items()}
    bpb = {"macro": float(np.mean([v["bits_per_byte"] for v in domains.values()])),
           "domains": domains}
    record = {"method": method, "seed": seed, "tasks": [], "results": {}, "bpb": bpb}
    if averaged:  # the averaged variants sit a little lower and move with the same shift
        record["bpb_last_mean"] = {**bpb, "macro": bpb["macro"] - 0.01}
        record["bpb_averaged"] = {**bpb, "macro": bpb["macro"] - 0.02}
        record["bpb_ema"] = {**bpb, "macro": bpb["macro"] - 0.03}
    path = folder / f"{method}.seed{seed}.json"
    path.write_text(json.dumps(record))
    return path


def test_tables_with_calibration_rows_give_snr_dose_response_and_the_calibration_verdict(
        tmp_path):
    from eval.tables import write_tables

    shifts = {"random": [0, 0, 0], "random-null": [0.004, -0.003, 0.001],
              "junk-0.1": [0.003, 0.006, -0.002], "junk-0.25": [0.05, 0.06, 0.055],
              "dup-0.25": [0.01, -0.01, 0.012], "quality-topk": [-0.1, -0.09, -0.11]}
    files = [result_file(tmp_path, m, s, shift[s]) for m, shift in shifts.items()
             for s in SEEDS]
    text = write_tables(files, tmp_path / "tables", primary="bpb macro (last mean)")
    table = json.loads((tmp_path / "tables" / "table2.json").read_text())
    names = [c["name"] for c in table["columns"]]
    for column in ("bpb macro (last mean)", "bpb macro (weight avg)", "bpb macro (EMA)",
                   "bpb prose", "bpb prose (EMA)"):
        assert column in names
    prose = table["methods"]["random"]["cells"]["bpb prose"]["values"][0]
    assert prose == pytest.approx((2.0 + 2.4) / 2)
    assert table["snr"]["bpb macro"]["snr"] > 1
    assert table["dose_response"]["junk"]["smallest_resolved"] == 0.25
    assert table["dose_response"]["dup"]["smallest_resolved"] is None
    result = table["verdict"]
    assert result["primary"] == "bpb macro (last mean)"
    assert result["calibration"]["null"]["resolved"] is False
    assert result["calibration"]["smallest_resolved"] == {"junk": 0.25, "dup": None}
    assert set(result["vs_random"]) == {"quality-topk"}  # calibration rows are not methods
    assert result["vs_random"]["quality-topk"] == "beats random"
    assert "1b. Calibration" in text and "Primary metric of this run" in text
    assert "smallest resolved junk dose is 0.25" in text and "Signal, noise and SNR" in text


def test_a_resolved_null_is_called_miscalibrated_and_a_bad_primary_is_refused(tmp_path):
    from datamask.errors import UserError
    from eval.tables import write_tables

    shifts = {"random": [0, 0, 0], "random-null": [0.05, 0.051, 0.049]}
    files = [result_file(tmp_path, m, s, shift[s], averaged=False) for m, shift in shifts.items()
             for s in SEEDS]
    text = write_tables(files, tmp_path / "tables")
    assert "is RESOLVED: the instrument is miscalibrated" in text
    for primary in ("bpb macro (EMA)", "Avg", "no such column"):
        with pytest.raises(UserError, match="--primary"):
            write_tables(files, tmp_path / "other", primary=primary)


def test_the_stratified_arm_is_calibrated_by_the_free_arms_rows(tmp_path):
    """A table without calibration rows or a control states the free arm's null and smallest
    resolved doses in place of 'no control run', and says whose they are."""
    from eval.tables import write_tables

    free_shifts = {"random": [0, 0, 0], "random-null": [0.004, -0.003, 0.001],
                   "junk-0.25": [0.05, 0.06, 0.055], "dup-0.25": [0.01, -0.01, 0.012]}
    strat_shifts = {"random@strat": [0, 0, 0], "quality-topk@strat": [-0.1, -0.09, -0.11]}
    for folder, shifts in (("free", free_shifts), ("strat", strat_shifts)):
        (tmp_path / folder).mkdir()
        for method, shift in shifts.items():
            for s in SEEDS:
                result_file(tmp_path / folder, method, s, shift[s])
    write_tables(sorted((tmp_path / "free").glob("*.json")), tmp_path / "tables")
    free = json.loads((tmp_path / "tables" / "table2.json").read_text())
    files = sorted((tmp_path / "strat").glob("*.json"))
    text = write_tables(files, tmp_path / "tables-stratified", reference="random@strat",
                        calibrated_by=("the free arm", free))
    result = json.loads((tmp_path / "tables-stratified" / "table2.json").read_text())["verdict"]
    assert result["lines"][0] == (
        "Calibration: this arm has no calibration rows of its own; its calibration is the free "
        "arm's rows (against random; same proxy, same seeds).")
    assert result["lines"][1:4] == free["verdict"]["lines"][:3]  # the null, then each series
    assert result["lines"][1].startswith("Calibration: the null (random-null - random = ")
    assert "smallest resolved junk dose is 0.25" in " ".join(result["lines"][2:4])
    assert result["calibration"]["from"] == "random" and result["calibration"]["seeds"] == [0, 1, 2]
    assert result["calibration"]["smallest_resolved"] == {"junk": 0.25, "dup": None}
    assert result["vs_random"] == {"quality-topk@strat": "beats random"}
    assert "Power:" not in text and "1b. Calibration" in text
    alone = write_tables(files, tmp_path / "alone", reference="random@strat")
    assert "Power: no 'control' run" in alone

"""The proxy sweep's report and pick (reproduce/experiments/proxy.py) on calibration runs laid out
as the downstream run writes them, with the SNR the tables compute."""

import json

import pytest

from eval.calibration import signal_noise
from eval.tables import summarize
from reproduce.experiments import proxy

SEEDS = (0, 1, 2)


def calibrated(folder, shift_junk, noise, seconds):
    """A candidate's calibration folder: table2.json with its SNR, downstream.json, summaries."""
    values = {}
    for label, shift in (("random", 0.0), ("random-null", 0.0), ("junk-0.25", shift_junk),
                         ("dup-0.25", shift_junk / 2)):
        values[label] = {s: {"bpb macro": 2.0 + shift + noise * (s - 1) * (label != "random"),
                             "bpb macro (EMA)": 1.9 + shift} for s in SEEDS}
    table = summarize({"bpb macro": False, "bpb macro (EMA)": False}, values)
    table["snr"] = signal_noise(table)
    run = folder / "calibration"
    (run / "tables").mkdir(parents=True)
    (run / "tables" / "table2.json").write_text(json.dumps(table))
    (run / "downstream.json").write_text(json.dumps({"trained": [
        {"method": m, "seed": s, "train_wall_s": seconds, "eval_wall_s": 10.0}
        for m in values for s in SEEDS]}))
    for label in values:
        for s in SEEDS:
            path = run / "train" / label / f"seed{s}"
            path.mkdir(parents=True)
            (path / "summary.json").write_text(json.dumps({"final_loss": 4.0, "epochs": 4.0}))


def probed(seconds):
    return {"predicted_s": seconds, "eligible": True, "tokens_per_run": 2_000_000,
            "non_embedding": 100_000}


def test_report_picks_the_highest_snr_and_the_cheaper_of_a_near_tie(tmp_path):
    calibrated(tmp_path / "strong", 0.10, 0.01, 200.0)
    calibrated(tmp_path / "close-cheaper", 0.10, 0.0105, 100.0)  # within 10% of the best
    calibrated(tmp_path / "weak", 0.02, 0.05, 50.0)
    probes = {"strong": probed(210), "close-cheaper": probed(110), "weak": probed(60),
              "unrun": {**probed(900), "eligible": False}}
    text = proxy.report(tmp_path, probes)
    result = json.loads((tmp_path / "proxy.json").read_text())
    assert result["pick"]["candidate"] == "close-cheaper"
    # the EMA column has no seed noise here, so its SNR is undefined; the final one is chosen
    assert result["pick"]["primary"] == "bpb macro" and not result["pick"]["weak"]
    assert set(result["calibrated"]) == {"strong", "close-cheaper", "weak"}
    assert result["calibrated"]["weak"]["tokens_per_parameter"] == pytest.approx(20.0)
    assert "| unrun | 900 | no | 20.0 | not run |" in text
    assert "Pick: **close-cheaper**" in (tmp_path / "proxy.md").read_text()


def test_pick_calls_the_instrument_weak_and_handles_no_calibration():
    assert proxy.pick({}) == {"candidate": None, "primary": None, "snr": None, "weak": None}
    row = {"median_run_s": 10.0, "snr": {"bpb macro": {"snr": 1.5},
                                         "bpb macro (EMA)": {"snr": 1.8}}}
    assert proxy.pick({"a": row}) == {"candidate": "a", "primary": "bpb macro (EMA)",
                                      "snr": 1.8, "weak": True}


def test_budget_flags_keep_the_averaged_checkpoints_five_percent_of_the_steps_apart():
    assert proxy.budget_flags({"epochs": 4.0}) == ["--epochs", "4.0"]
    assert proxy.budget_flags(proxy.CANDIDATES["C"]) == ["--set", "max_steps=300", "--set",
                                                         "average_every=15"]
    argv = proxy.downstream_argv("POOL", "OUT", proxy.CANDIDATES["V512-d64"], [0, 1, 2], ["-x"])
    assert argv[:6] == ["--pool", "POOL", "--output", "OUT", "--vocab_size", "512"]
    assert "hidden_size=64" in argv and "ema_decay=0.98" in argv and argv[-1] == "-x"


def test_run_probes_every_candidate_then_calibrates_the_eligible_cheapest_first(tmp_path,
                                                                              monkeypatch):
    seconds = {"C": 150.0, "V4096-d128": 400.0, "V512-d64": 90.0}
    calls = []
    monkeypatch.setattr(proxy.downstream, "prepare_pool", lambda pool, logs: calls.append("prep"))
    monkeypatch.setattr(proxy, "probe", lambda pool, out, name, c: {
        **probed(seconds[name]), "eligible": seconds[name] <= proxy.MAX_RUN_S})
    monkeypatch.setattr(proxy, "calibrate", lambda pool, out, name, c: calls.append(name))
    proxy.run(tmp_path, tmp_path / "sweep", list(seconds), probe_only=True)
    assert calls == ["prep"]
    assert set(json.loads((tmp_path / "sweep" / "probes.json").read_text())) == set(seconds)
    assert "none yet: no candidate's calibration has run" in (
        tmp_path / "sweep" / "proxy.md").read_text()
    proxy.run(tmp_path, tmp_path / "sweep", ["C"], probe_only=True)  # the others' probes stay
    assert set(json.loads((tmp_path / "sweep" / "probes.json").read_text())) == set(seconds)
    report = (tmp_path / "sweep" / "proxy.md").read_text()
    assert "Pick so far (eligible, not calibrated yet: C, V512-d64)" in report
    proxy.run(tmp_path, tmp_path / "sweep", list(seconds))
    assert calls == ["prep", "prep", "prep", "V512-d64", "C"]  # V4096-d128: over 240 s
    with pytest.raises(proxy.UserError, match="--candidates bogus"):
        proxy.run(tmp_path, tmp_path / "sweep", ["bogus"])

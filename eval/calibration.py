"""How well the downstream instrument sees a change of data, from the tables' JSON (eval/tables.py's
table2.json): the null, the dose-response series, and each metric's signal, noise and SNR
(reproduce/results/downstream/proxy-plan.md, sections 1 and 3).

Calibration selections are named by what they are (reproduce/pool/calibration.py):
`random-null` is a second random selection; `junk-<d>` is random's selection with a fraction d of
its documents replaced by junk of the same domain and length; `dup-<d>` the same with copies of
other selected documents. Each is compared with random seed by seed like any method, so what the
training seed changes in both cancels.

SNR (Heineman et al. 2025, "Signal and Noise", arXiv 2508.13144, adapted to paired runs): for a
metric, Δ_c = metric(c) - metric(random) on each shared seed;
  signal = root mean square over the SNR_DOSE selections (junk-0.25, dup-0.25) of mean Δ_c,
  noise  = root mean square over the null and those selections of sd Δ_c (ddof 1),
  SNR    = signal / noise.
The noise is the paired seed-to-seed spread that decides what a run resolves; the signal is how far
a known harm moves the metric.
"""

from __future__ import annotations

import math
import re

NULL = "random-null"
SERIES = ("junk", "dup")
SNR_DOSE = 0.25
DOSE_LABEL = re.compile(r"^(junk|dup)-(\d+(?:\.\d+)?)$")


def dose_label(series: str, dose: float) -> str:
    """`junk-0.25`: the label a calibration selection is trained and tabled under."""
    return f"{series}-{dose:g}"


def parse_dose(label: str) -> tuple[str, float] | None:
    """('junk', 0.25) for `junk-0.25`; None for any other label."""
    match = DOSE_LABEL.match(label)
    return (match.group(1), float(match.group(2))) if match else None


def _rms(values: list[float]) -> float | None:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else None


def signal_noise(table: dict) -> dict:
    """{column: {signal, noise, snr, signal_from, noise_from}} over the calibration selections the
    table holds (an empty dict when it holds none of them)."""
    diffs = table["vs_reference"]
    signal_from = [dose_label(s, SNR_DOSE) for s in SERIES if dose_label(s, SNR_DOSE) in diffs]
    noise_from = [c for c in [NULL, *signal_from] if c in diffs]
    if not noise_from:
        return {}
    out = {}
    for column in (c["name"] for c in table["columns"]):
        signal = _rms([diffs[c][column]["mean"] for c in signal_from
                       if diffs[c][column]["mean"] is not None])
        noise = _rms([diffs[c][column]["sd"] for c in noise_from
                      if diffs[c][column]["sd"] is not None])
        snr = signal / noise if signal is not None and noise else None
        out[column] = {"signal": signal, "noise": noise, "snr": snr,
                       "signal_from": signal_from, "noise_from": noise_from}
    return out


def dose_response(table: dict, column: str, higher_is_better: bool = False) -> dict:
    """{series: {doses: [{dose, label, difference}], smallest_resolved}} for `column`: each dose's
    paired difference with the reference, in dose order; the smallest resolved dose is the
    smallest d whose interval lies wholly on the harmful side (above 0 where lower is better)."""
    out = {}
    for label, diff in table["vs_reference"].items():
        parsed = parse_dose(label)
        if parsed:
            out.setdefault(parsed[0], {"doses": []})["doses"].append(
                {"dose": parsed[1], "label": label, "difference": diff[column]})
    for entry in out.values():
        entry["doses"].sort(key=lambda d: d["dose"])
        harmful = [d["dose"] for d in entry["doses"] if harms(d["difference"], higher_is_better)]
        entry["smallest_resolved"] = min(harmful) if harmful else None
    return out


def harms(diff: dict, higher_is_better: bool) -> bool:
    """The paired interval lies wholly on the worse side of 0."""
    if not diff["resolved"]:
        return False
    return diff["high"] < 0 if higher_is_better else diff["low"] > 0


def mix_or_choice(free: str, stratified: str | None) -> str:
    """A method's outcome against random in the free arm read beside the stratified arm's
    (outcomes as eval/verdict.py words them): 'choice within domains' when the stratified arm
    agrees, 'mix' when it does not, '' when the free arm resolved nothing."""
    if free == "unresolved":
        return ""
    if stratified is None:
        return "no stratified run"
    return "choice within domains" if stratified == free else "mix"

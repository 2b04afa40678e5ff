"""`make bench-chunks` measures each cap in a fresh process and prints one row a shape."""

import re

from reproduce.bench.chunks import main


def test_bench_chunks_prints_a_row_per_metric_shape_and_score(capsys):
    main(["--metrics", "DiSF", "Facility", "--rows", "400", "--probes", "0",
          "4", "--caps_mib", "1", "256", "--rounds", "1", "--evaluations", "1"])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()
            if re.match(r"\| \w+ \| 400 \| 40 \|", line)]
    assert [(row[0].strip(), row[3].strip()) for row in rows] == [
        ("DiSF", "exact"), ("DiSF", "4"), ("Facility", "-")]
    for row in rows:
        assert all(re.fullmatch(r" \d+ \([\d,]+\) ", cell) for cell in row[4:6])
        assert re.fullmatch(r" \d+\.\d\dx ", row[6])

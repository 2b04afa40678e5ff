"""`make bench-chunks` measures each budget in a fresh process and prints one row a shape."""

import re

from datamask.bench_chunks import main


def test_bench_chunks_prints_a_row_per_shape_and_score(capsys):
    main(["--device", "cpu", "--rows", "400", "--probes", "0", "4", "--budgets_mib", "1", "256",
          "--rounds", "1", "--evaluations", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if re.match(r"\| 400 \| 40 \|", line)]
    assert [row.split("|")[3].strip() for row in rows] == ["exact", "4"]
    for row in rows:
        cells = row.split("|")[4:7]
        assert all(re.fullmatch(r" \d+ \([\d,]+\) ", cell) for cell in cells[:2])
        assert re.fullmatch(r" \d+\.\d\dx ", cells[2])

"""The summary that docs/benchmarks.md's engine tables come from: ranges over runs, goal tallies, NaN-free."""

import json
import math
from pathlib import Path

from benchmarks.client_overhead_summary import closed_table, open_table, span, speedup_table

RESULT = Path(__file__).parents[1] / "benchmarks" / "results" / "client_overhead_tiny_closed_open.json"


def test_span_skips_what_was_not_measured():
    assert span([1.0, None, math.nan, 1.5]) == "1.00–1.50"
    assert span([2.0, 2.0]) == "2.00"
    assert span([None, math.nan]) == ""


def _row(run: int, throughput: float, p50: float, **extra: object) -> dict:
    return {"run": run, "section": "closed", "server": "pytorch", "protocol": "http", "load": "c4",
            "throughput_ratio": throughput, "p50_ratio": p50, "client_cpu_us_per_request": 200.0,
            "pa_cpu_us": 500.0, "cpu_ratio": 0.4, "pa_infer_s": 100.0 + run * 10, "server_count_ratio": math.nan,
            "wrk_ratio": 1.0, "meets_goal": throughput >= 0.95 and p50 <= 1.1, **extra}


def test_closed_table_ranges_and_tallies():
    lines = closed_table([_row(1, 0.9, 1.0), _row(2, 1.05, 0.97), _row(3, 1.0, 1.2)])
    assert lines[2] == ("| pytorch | http | c4 | 0.90–1.05 | 0.97–1.20 | 200 | 500 | 0.40 | wrk 1.00 | 1.18× "
                        "| 1 of 3 |")
    assert "- throughput ≥ 0.95× and p50 ≤ 1.1×: 1 of 3" in lines
    assert "- Triton's own count 0.97–1.03: 0 of 0" in lines  # Serve counts nothing: NaN is not a miss


def test_committed_result_has_every_table():
    rows = json.loads(RESULT.read_text())["rows"]
    assert len(closed_table(rows)) > 2 + 16  # 2 servers x 2 protocols x 4 concurrencies, then the tallies
    assert len(open_table(rows)) == 2 + 6  # 3 runs x 2 protocols
    assert len(speedup_table(rows)) == 2 + 8

"""The queue-limits benchmark's stall finder: answered requests that waited long, grouped by when they finished."""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.queue_limits import stalls

FIELDS = ["intended_epoch_s", "send_epoch_s", "latency_ms", "send_latency_ms", "server_ms", "server_batch",
          "client_actor"]


def _latencies(path: Path, rows: list[tuple[float, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for send_s, latency_ms in rows:
            writer.writerow([send_s, send_s, latency_ms, latency_ms, "", "", 0])
    return path


def test_stalled_requests_that_finish_together_are_one_stall(tmp_path):
    rows = [(0.000, "4.0"), (0.010, "502.0"), (0.013, "499.5"),  # one stall: both finish at 0.512
            (1.000, "3.0"), (1.020, "510.0"),                    # a second, alone
            (1.100, ""),                                         # refused: no latency, not a stall
            (2.000, "120.0")]                                    # late, but under the threshold
    found = stalls(_latencies(tmp_path / "latencies.csv", rows), stall_ms=400.0)
    assert found == [{"requests": 2, "min_ms": 499.5, "max_ms": 502.0},
                     {"requests": 1, "min_ms": 510.0, "max_ms": 510.0}]


def test_a_run_without_long_waits_has_no_stall(tmp_path):
    rows = [(0.001 * i, "5.0") for i in range(50)]
    assert stalls(_latencies(tmp_path / "latencies.csv", rows), stall_ms=400.0) == []

"""The server's counters are read at the window boundaries, also while a window is collected late (an
overloaded server returns a window's requests seconds after it ended), so its count covers the clients'
windows. Ray's wait/get are stood in for by refs that become ready at a set time."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import pytest

from experiments.measure.windows import BoundaryCounters


def test_counters_are_read_at_each_boundary_while_a_window_comes_back_late(monkeypatch: pytest.MonkeyPatch) -> None:
    served = iter(range(0, 10_000, 10))
    counters = BoundaryCounters(lambda: {"nv_inference_count": float(next(served))}, time.time() + 0.02, 0.05)
    first = counters.first
    ready_at = first + 0.05 + 0.5  # the first window ends at first + 0.05 and comes back 0.5 s later

    def wait(refs: list, num_returns: int, timeout: float) -> tuple[list, list]:
        time.sleep(max(0.0, min(timeout, ready_at - time.time())))
        return (refs, []) if time.time() >= ready_at else ([], refs)

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(wait=wait, get=lambda refs: ["window 0"]))
    assert counters.gather(["ref"], remaining=lambda: 60.0) == ["window 0"]
    times = [reading[0] for reading in counters.readings]
    assert len(times) >= 10  # every boundary that passed meanwhile was read ...
    assert all(t >= first + k * 0.05 for k, t in enumerate(times))  # ... never before it
    assert times[1] < ready_at  # the first window's end was read when it ended, not when it came back
    before, after, span_s, read_s = counters.around(1, 3)
    assert after["nv_inference_count"] - before["nv_inference_count"] == 20
    assert span_s == pytest.approx(times[3] - times[1])
    assert read_s == pytest.approx(counters.readings[1][1] + counters.readings[3][1]) and read_s >= 0


def test_without_server_counters_there_is_nothing_to_compare() -> None:
    counters = BoundaryCounters(None, time.time(), 0.01)
    assert counters.around(0, 2) == (None, None, 0.0, 0.0)


def test_a_counter_read_that_fails_is_tried_again_and_a_boundary_that_fails_twice_has_none() -> None:
    """A metrics endpoint that refuses a read (Triton's, under starved cores) must not fail the trial the clients
    measured: one refusal is read again; a boundary refused twice gives the windows around it no server figures."""
    reads = iter([ConnectionRefusedError(111, "Connection refused"), {"nv_inference_count": 0.0},
                  ConnectionRefusedError(111, "Connection refused"), ConnectionRefusedError(111, "Connection refused"),
                  {"nv_inference_count": 20.0}])

    def probe() -> dict[str, float]:
        read = next(reads)
        if isinstance(read, Exception):
            raise read
        return read

    counters = BoundaryCounters(probe, time.time(), 0.01)
    counters.read_through(2)
    assert counters.readings[0][2] == {"nv_inference_count": 0.0}  # the second try
    assert counters.readings[1] is None  # refused twice
    assert counters.readings[2][2] == {"nv_inference_count": 20.0}
    assert counters.around(0, 1) == (None, None, 0.0, 0.0)
    before, after, _, _ = counters.around(0, 2)
    assert after["nv_inference_count"] - before["nv_inference_count"] == 20

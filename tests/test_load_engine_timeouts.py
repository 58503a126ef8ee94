"""The compiled load engine with requests that are not answered: held past the timeout, each fails as a timeout
while the load goes on (HTTP/1.1 gives up its connection, h2 resets just the stream); never answered at all, a
stopped engine waits for them no longer than its drain limit. Loopback stand-ins in tests/error_stands.py."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine import records
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LoadPoint
from tests.error_stands import STANDS, RecordReader, assert_consistent, engine, every, http_stand, http_wire, measure

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_past_the_timeout_fail_as_timeouts_and_the_load_goes_on(protocol: str) -> None:
    """Every 10th request is held 3 s, past the 0.4 s timeout: each is a TIMEOUT ended 0.4 s (+ the heartbeat's
    5 ms) after it was sent, the others are answered meanwhile. HTTP/1.1 closed each such connection and opened
    another; h2 reset just that stream (the server saw the call cancelled) on the one connection."""
    stand, wire, _, _ = STANDS[protocol]
    with stand(every(10, ("sleep", 3.0))) as srv:
        load = CompiledLoad(wire(srv.port), LoadPoint(LoadMode.CLOSED, 4), 0.4, 1)
        part = asyncio.run(measure(load, 150, window_s=0.5, max_windows=6))
        time.sleep(0.2)  # the server's side of the last resets
        cancelled, connections = srv.cancelled, srv.connections
    f = part.failures
    print(f"{protocol}: {f.count} timeouts, {part.requests} answered")
    assert f.count >= 3 and f.by_class() == {"timeout": f.count}
    waited = f.done_s - f.send_s
    assert np.all((waited >= 0.4) & (waited < 0.6)), waited
    assert part.requests >= 6 * f.count  # nine answered per one held, less the loops held at the window's end
    assert "no answer within 0.4 s (experiment.request_timeout_s)" in part.error_messages["timeout"]
    assert_consistent(part)
    if protocol == "http":
        assert connections >= 4 + f.count  # a new connection for each one given up
    else:
        assert cancelled >= f.count  # its stream reset: the server's call cancelled


@pytest.mark.slow
def test_a_stopped_open_loop_whose_requests_are_never_answered_ends_at_its_drain_limit(tmp_path: Path) -> None:
    """SIGTERM with requests in flight that a silent server never answers: the open loop ends after --drain (0.5 s),
    not never (its timer was left on the schedule's last arrival, spent, with no socket to wake it)."""
    np.full(20000, 0.01).astype("<f8").tofile(tmp_path / "gaps.f64")
    with http_stand(lambda n: ("sleep", 60.0)) as srv, engine(http_wire(srv.port), tmp_path, "--drain", "0.5",
                                                                  "--open", str(tmp_path / "gaps.f64")) as proc:
        reader = RecordReader(proc)
        reader.wait_for(lambda b: np.any(b["kind"] == records.Kind.HEARTBEAT) and srv.requests >= 3)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0, proc.stderr.read().decode()
        took = time.monotonic() - stopped
        reader.join()
    assert took >= 0.5, took  # it waited its drain (and ended: the wait above bounds a hang)
    last = reader.all()[-1]
    assert last["kind"] == records.Kind.HEARTBEAT and last["bytes"] >= 3  # still in flight when it gave up

"""The compiled load engine when connections end: a gRPC server's GOAWAY, a response cut off mid-way, the server
gone altogether. Ended connections are replaced, a cut response is a reset, a server gone is refused at a paced rate
(not in a spin) until the load stops: through `CompiledLoad`, or directly where the engine's raw records are the
point (pacing). Loopback stand-ins in tests/error_stands.py."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine import records
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import GONE_AFTER, LoadError, LoadPoint
from serving.clients.outcomes import Outcome
from tests.error_stands import (
    STANDS,
    RecordReader,
    Stand,
    assert_consistent,
    engine,
    every,
    failed_as,
    failure_share,
    grpc_stand,
    h2_wire,
    http_stand,
    http_wire,
    measure,
)

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_connections_the_server_ends_with_a_goaway_are_replaced_without_failures(mode: str) -> None:
    """gRPC servers end old connections (grpc.max_connection_age_ms: GOAWAY, the calls in flight finish): the engine
    sends no new call on such a connection, opens another, and nothing fails."""
    point = LoadPoint(LoadMode.CLOSED, 4) if mode == "closed" else LoadPoint(LoadMode.CONSTANT, 1000)
    options = (("grpc.max_connection_age_ms", 150), ("grpc.max_connection_age_grace_ms", 2000))
    with grpc_stand(lambda n: "ok", options) as srv:
        load = CompiledLoad(h2_wire(srv.port), point, 5, 1, horizon_s=10)
        part = asyncio.run(measure(load, 1000, window_s=0.3, max_windows=8, min_windows=3))
        connections = srv.connections
    print(f"{mode}: {part.requests} answered over {connections} connections")
    assert part.failures.count == 0 and part.requests >= 1000
    assert connections >= 4  # 0.9 s and more of windows, a connection ending every 0.15 s


@pytest.mark.slow
def test_a_connection_closed_mid_response_is_a_reset_and_the_load_goes_on_on_another() -> None:
    """Every 10th response stops half-way and its connection closes: RESET, the next request on a new connection."""
    with http_stand(every(10, "cut")) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 2), 5, 1)
        part = asyncio.run(measure(load, 600))
        cuts, connections = srv.answered.get("cut", 0), srv.connections
    f = part.failures
    print(f"{f.count} resets of {part.requests + f.count} ({failure_share(part):.2%})")
    assert f.by_class() == {"reset": f.count} and abs(failure_share(part) - 0.10) <= 0.01
    assert "closed the connection before the response ended" in part.error_messages["reset"]
    # every cut connection was replaced (but one cut as the load stopped), no other one opened
    assert 1 + cuts <= connections <= 2 + cuts, (connections, cuts)
    assert_consistent(part)


@pytest.mark.parametrize(("protocol", "load", "slots"), [("http", "closed", 3), ("http", "open", 4),
                                                         ("grpc", "closed", 1), ("grpc", "open", 1)])
@pytest.mark.slow
def test_a_server_gone_is_refused_at_a_paced_rate_until_the_engine_is_stopped(protocol: str, load: str, slots: int,
                                                                             tmp_path: Path) -> None:
    """The server answers, then goes away: the requests in flight (if any) are RESET, and the engine goes on
    trying, each request that would go on a new connection REFUSED, at most one attempt per connection per 10 ms
    (3 HTTP/1.1 loops: 3; HTTP/1.1's open loop keeps 4; gRPC: its one), not in a spin (on loopback a refusal takes
    microseconds: tens of thousands in 0.5 s); heartbeats go on; a SIGTERM ends it cleanly."""
    stand, wire, _, _ = STANDS[protocol]
    np.full(20000, 0.001).astype("<f8").tofile(tmp_path / "gaps.f64")  # open: 1,000/s
    args = ["--closed", "3"] if load == "closed" else ["--open", str(tmp_path / "gaps.f64")]
    with stand(lambda n: "ok") as srv, engine(wire(srv.port), tmp_path, *args) as proc:
        reader = RecordReader(proc)
        reader.wait_for(lambda b: np.sum(b["kind"] == records.Kind.DONE) >= 50)
        gone_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC, the engine's clock
        srv.gone()
        reader.wait_for(lambda b: failed_as(b, Outcome.REFUSED).size >= 1)
        time.sleep(0.7)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, proc.stderr.read().decode()
        reader.join()
    batch = reader.all()
    refused = failed_as(batch, Outcome.REFUSED)
    first = refused["done_ns"].min()
    late = refused["done_ns"] - first
    in_half_second = int(np.sum((late >= 100_000_000) & (late < 600_000_000)))  # from 0.1 s after the first
    print(f"{protocol} {load}: {in_half_second} refused in 0.5 s ({slots} per 10 ms allowed)")
    assert slots * 50 / 4 <= in_half_second <= slots * 50 + slots, in_half_second  # paced, and going on
    assert np.all(refused["done_ns"] > gone_ns) and np.all(refused["code"] == Outcome.REFUSED)
    failed = batch[batch["kind"] == records.Kind.FAILED]
    # the calls in flight: reset, or (a gRPC server shutting down) answered UNAVAILABLE or CANCELLED
    print({(int(c) & 0xFF, int(c) >> 8) for c in failed["code"]})
    ended = {Outcome.RESET, Outcome.REFUSED, *([] if protocol == "http" else [Outcome.GRPC_STATUS])}
    assert set((failed["code"] & 0xFF).tolist()) <= ended
    assert not np.any(batch["kind"] == records.Kind.ERROR)
    beats = batch[(batch["kind"] == records.Kind.HEARTBEAT) & (batch["sent_ns"] > first)]
    assert beats.size >= 50 and np.all(np.diff(beats["intended_ns"]) >= 0)  # the watermark goes on
    if load == "closed":
        assert beats["bytes"].max() <= 3


@pytest.mark.slow
def test_the_load_stops_once_the_server_is_gone() -> None:
    """Through CompiledLoad: the last GONE_AFTER requests all refused or reset fail the load (its window raises),
    and the engine is stopped right then, not left trying until the trial's stop."""

    async def scenario(srv: Stand) -> tuple[int | None, str]:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 2), 5, 1)
        await load.open()
        load.start()
        try:
            await load.wait_warm(5, 0.1, 10)
            srv.gone()
            start = load.now()
            with pytest.raises(LoadError) as raised:
                for i in itertools.count():
                    await load.collect(start + i * 0.2, start + (i + 1) * 0.2)
            for _ in range(200):  # the engine was told to stop with the failure
                if load._proc.returncode is not None:
                    break
                await asyncio.sleep(0.01)
            return load._proc.returncode, str(raised.value)
        finally:
            await load.stop()

    with http_stand(lambda n: "ok") as srv:
        code, message = asyncio.run(scenario(srv))
    assert code == 0  # ended by the SIGTERM the failure sent (a clean exit), before stop()
    assert f"the last {GONE_AFTER} requests could not reach the server" in message
    assert "cannot connect to 127.0.0.1" in message and "compiled engine" in message

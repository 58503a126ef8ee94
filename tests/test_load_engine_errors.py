"""The compiled load engine through errors: every request ends answered or with its outcome (a FAILED record), and
the load goes on. Loopback stand-in servers answer 503 / grpc-status 14 to every k-th request, hold some past the
timeout, cut some responses mid-way, or go away; the engine is driven through `CompiledLoad` where that works (its
windows' `failures` are what the trial counts), directly where its raw records are the point (pacing)."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import GONE_AFTER, LoadError, LoadPoint
from experiments.measure.samples import WindowSamples
from serving.clients.http1 import build_request
from serving.clients.outcomes import Outcome
from serving.clients.wire import WireRequest, grpc_wire, http1_wire
from tests.engine_servers import MODEL_INFER, loop_thread, take_request_head, triton_like_body

BODY = triton_like_body()
REPLY = b"\x0a\x01m" * 20
# What a stand-in does with its n-th request (1 = the first to arrive): "ok", an error status (HTTP status, or the
# grpc-status for gRPC), ("sleep", s) then "ok", "cut" (HTTP/1.1: half the response, then the connection closes), or
# ("early", status) (HTTP/1.1: that status as soon as the request's head is in, the body unread, and a close).
Action = str | int | tuple[str, float]
Plan = Callable[[int], Action]


@pytest.fixture(autouse=True)
def engine_folders_in_tmp_path(tmp_path, monkeypatch) -> None:
    """The engine's request and response files go under pytest's tmp_path, not /tmp."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def every(k: int, then: Action) -> Plan:
    return lambda n: then if n % k == 0 else "ok"


# --- stand-in servers, each on a thread and event loop of its own ---------------------------------------------------

@dataclass
class Stand:
    """What a stand-in counts; `gone()` makes it go away (no listener, its connections closed)."""

    port: int = 0
    requests: int = 0
    connections: int = 0
    cancelled: int = 0  # gRPC: calls their client reset before they were answered
    answered: dict = field(default_factory=dict)  # action name -> how many
    gone: Callable[[], None] = lambda: None

    def count(self, action: Action) -> None:
        name = action[0] if isinstance(action, tuple) else str(action)
        self.answered[name] = self.answered.get(name, 0) + 1


class _Http(asyncio.Protocol):
    def __init__(self, stand: Stand, plan: Plan, transports: set) -> None:
        self.stand, self.plan, self.transports = stand, plan, transports
        self.buffer = bytearray()
        self.left = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.transports.add(transport)
        self.stand.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self.buffer += data
        while True:
            if self.left < 0:
                length = take_request_head(self.buffer)
                if length is None:
                    return
                self.left = length
                self.stand.requests += 1
                self.action = self.plan(self.stand.requests)
                self.stand.count(self.action)
                if isinstance(self.action, tuple) and self.action[0] == "early":  # a proxy rejecting a big body
                    self.transport.write(f"HTTP/1.1 {self.action[1]} X\r\nContent-Length: 8\r\n"
                                         "Connection: close\r\n\r\ntoo big!".encode())
                    self.transport.close()
                    return
            if len(self.buffer) < self.left:
                return
            del self.buffer[:self.left]
            self.left = -1
            action = self.action
            if isinstance(action, tuple):  # held, then answered (if the client still waits)
                asyncio.get_running_loop().call_later(action[1], self._answer, 200, BODY)
            elif action == "cut":
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
                self.transport.write(head + BODY[:len(BODY) // 2])
                self.transport.close()  # mid-response
            elif isinstance(action, int):
                self._answer(action, b"shedding load: try again later")
            else:
                self._answer(200, BODY)

    def _answer(self, status: int, body: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/octet-stream\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


@contextmanager
def http_stand(plan: Plan) -> Iterator[Stand]:
    stand, transports = Stand(), set()
    with loop_thread() as loop:
        listening = asyncio.run_coroutine_threadsafe(
            loop.create_server(lambda: _Http(stand, plan, transports), "127.0.0.1", 0), loop).result(10)
        stand.port = listening.sockets[0].getsockname()[1]

        async def go_away() -> None:
            listening.close()
            for transport in list(transports):
                transport.abort()

        stand.gone = lambda: asyncio.run_coroutine_threadsafe(go_away(), loop).result(10)
        try:
            yield stand
        finally:
            stand.gone()


@contextmanager
def grpc_stand(plan: Plan, options: tuple[tuple[str, int], ...] = ()) -> Iterator[Stand]:
    """A grpc.aio server answering ModelInfer with REPLY, or aborting with the plan's grpc-status; `connections`
    counts the client connections that made calls (by peer address)."""
    import grpc

    stand = Stand()
    peers: set[str] = set()

    async def model_infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        stand.requests += 1
        peers.add(context.peer())
        stand.connections = len(peers)
        action = plan(stand.requests)
        stand.count(action)
        if isinstance(action, tuple):
            try:
                await asyncio.sleep(action[1])
            except asyncio.CancelledError:  # the client reset the stream
                stand.cancelled += 1
                raise
        elif isinstance(action, int):
            await context.abort(grpc.StatusCode[_STATUS_NAMES[action]], "shedding load: try again later")
        return REPLY

    async def start() -> grpc.aio.Server:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1), *options])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)}),))
        stand.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server

    with loop_thread() as loop:
        server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        stopped = []

        def go_away() -> None:
            if not stopped:
                stopped.append(True)
                asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(10)

        stand.gone = go_away
        try:
            yield stand
        finally:
            go_away()


_STATUS_NAMES = {8: "RESOURCE_EXHAUSTED", 13: "INTERNAL", 14: "UNAVAILABLE"}


def http_wire(port: int, body_bytes: int = 200) -> WireRequest:
    url = f"http://127.0.0.1:{port}/v2/models/m/infer"
    return http1_wire(url, build_request("POST", url, b"x" * body_bytes, {"Content-Type": "application/octet-stream"}))


def h2_wire(port: int) -> WireRequest:
    return grpc_wire(f"127.0.0.1:{port}", MODEL_INFER, b"\x0a\x05hello" * 20)


STANDS = {"http": (http_stand, http_wire, "http_503", 503), "grpc": (grpc_stand, h2_wire, "grpc_14", 14)}


# --- driving CompiledLoad ---------------------------------------------------------------------------------------------

async def _measure(load: CompiledLoad, at_least: int, window_s: float = 0.4, max_windows: int = 15,
                   min_windows: int = 1) -> WindowSamples:
    """Windows cut from the engine's stream until they hold `at_least` requests (answered and failed) and there are
    `min_windows` of them, merged."""
    await load.open()
    load.start()
    try:
        await load.wait_warm(5, 0.1, 10)
        start = load.now()
        parts: list[WindowSamples] = []
        while (sum(p.requests + p.failures.count for p in parts) < at_least or len(parts) < min_windows) and len(
                parts) < max_windows:
            i = len(parts)
            parts.append(await load.collect(start + i * window_s, start + (i + 1) * window_s))
        return WindowSamples.merge(parts)
    finally:
        await load.stop()


def _failure_share(part: WindowSamples) -> float:
    return part.failures.count / (part.requests + part.failures.count)


def _assert_consistent(part: WindowSamples) -> None:
    """Every failure was scheduled in the window, sent no earlier than scheduled, and ended after it was sent."""
    f = part.failures
    assert np.all((f.intended_s >= part.window_start) & (f.intended_s < part.window_end))
    assert np.all(f.send_s >= f.intended_s - 1e-6) and np.all(f.done_s > f.send_s)


@pytest.mark.parametrize("share", [0.01, 0.05, 0.20])
@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_error_statuses_are_recorded_at_their_share_and_the_load_goes_on(protocol: str, mode: str,
                                                                        share: float) -> None:
    """Every k-th request answered 503 (gRPC: grpc-status 14): over >= 2,000 requests the windows' failure share is
    the server's, every failure is of that class with the engine's message, everything else was answered; an open
    loop keeps its schedule through them (constant arrivals: one every 1/rate, failed or not)."""
    stand, wire, name, status = STANDS[protocol]
    # The grpc.aio stand-in, on a thread of this process, serves ~2,500 calls/s here; at that rate on a starved CPU
    # (2 cores, another test worker) it falls behind and grpc-core itself answers some calls CANCELLED at once
    # (grpc_1, rightly recorded as such): it is offered half of that.
    rate = 2500.0 if protocol == "http" else 1250.0
    point = LoadPoint(LoadMode.CLOSED, 4) if mode == "closed" else LoadPoint(LoadMode.CONSTANT, rate)
    with stand(every(round(1 / share), status)) as srv:
        load = CompiledLoad(wire(srv.port), point, 5, 1, horizon_s=10)
        part = asyncio.run(_measure(load, 2000))
    total = part.requests + part.failures.count
    measured = _failure_share(part)
    print(f"{protocol} {mode} set {share:.0%}: {part.failures.count} of {total} failed ({measured:.2%})")
    assert total >= 2000
    assert abs(measured - share) <= 0.01, measured
    assert part.failures.by_class() == {name: part.failures.count}
    assert np.all(part.failures.outcome == (Outcome.HTTP_STATUS if protocol == "http" else Outcome.GRPC_STATUS))
    expect = "HTTP 503 from the server: shedding load" if protocol == "http" else "gRPC status 14: shedding load"
    assert expect in part.error_messages[name] and "compiled engine" in part.error_messages[name]
    if protocol == "http" and mode == "closed":
        assert srv.connections == 4  # a complete 503 leaves its keep-alive connection usable
    _assert_consistent(part)
    if mode == "open":
        intended = np.sort(np.concatenate([part.intended_s, part.failures.intended_s]))
        assert np.allclose(np.diff(intended), 1 / rate, atol=2e-6)


def test_the_first_response_checked_is_the_first_answered_well() -> None:
    """The first answers are 503s: the body handed to the client's check is the first 200's, not an error's."""
    checked = []
    with http_stand(lambda n: 503 if n <= 10 else "ok") as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 1), 5, 1, check_response=checked.append)
        part = asyncio.run(_measure(load, 50))
    assert checked == [BODY]
    assert part.requests >= 50 and part.failures.count == 0  # the 503s came before the warm-up ended


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_past_the_timeout_fail_as_timeouts_and_the_load_goes_on(protocol: str) -> None:
    """Every 10th request is held 3 s, past the 0.4 s timeout: each is a TIMEOUT ended 0.4 s (+ the heartbeat's
    5 ms) after it was sent, the others are answered meanwhile. HTTP/1.1 closed each such connection and opened
    another; h2 reset just that stream (the server saw the call cancelled) on the one connection."""
    stand, wire, _, _ = STANDS[protocol]
    with stand(every(10, ("sleep", 3.0))) as srv:
        load = CompiledLoad(wire(srv.port), LoadPoint(LoadMode.CLOSED, 4), 0.4, 1)
        part = asyncio.run(_measure(load, 150, window_s=0.5, max_windows=6))
        time.sleep(0.2)  # the server's side of the last resets
        cancelled, connections = srv.cancelled, srv.connections
    f = part.failures
    print(f"{protocol}: {f.count} timeouts, {part.requests} answered")
    assert f.count >= 3 and f.by_class() == {"timeout": f.count}
    waited = f.done_s - f.send_s
    assert np.all((waited >= 0.4) & (waited < 0.6)), waited
    assert part.requests >= 6 * f.count  # nine answered per one held, less the loops held at the window's end
    assert "no answer within 0.4 s (experiment.request_timeout_s)" in part.error_messages["timeout"]
    _assert_consistent(part)
    if protocol == "http":
        assert connections >= 4 + f.count  # a new connection for each one given up
    else:
        assert cancelled >= f.count  # its stream reset: the server's call cancelled


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_connections_the_server_ends_with_a_goaway_are_replaced_without_failures(mode: str) -> None:
    """gRPC servers end old connections (grpc.max_connection_age_ms: GOAWAY, the calls in flight finish): the engine
    sends no new call on such a connection, opens another, and nothing fails."""
    point = LoadPoint(LoadMode.CLOSED, 4) if mode == "closed" else LoadPoint(LoadMode.CONSTANT, 1000)
    options = (("grpc.max_connection_age_ms", 150), ("grpc.max_connection_age_grace_ms", 2000))
    with grpc_stand(lambda n: "ok", options) as srv:
        load = CompiledLoad(h2_wire(srv.port), point, 5, 1, horizon_s=10)
        part = asyncio.run(_measure(load, 1000, window_s=0.3, max_windows=8, min_windows=3))
        connections = srv.connections
    print(f"{mode}: {part.requests} answered over {connections} connections")
    assert part.failures.count == 0 and part.requests >= 1000
    assert connections >= 4  # 0.9 s and more of windows, a connection ending every 0.15 s


def test_a_connection_closed_mid_response_is_a_reset_and_the_load_goes_on_on_another() -> None:
    """Every 10th response stops half-way and its connection closes: RESET, the next request on a new connection."""
    with http_stand(every(10, "cut")) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 2), 5, 1)
        part = asyncio.run(_measure(load, 600))
        cuts, connections = srv.answered.get("cut", 0), srv.connections
    f = part.failures
    print(f"{f.count} resets of {part.requests + f.count} ({_failure_share(part):.2%})")
    assert f.by_class() == {"reset": f.count} and abs(_failure_share(part) - 0.10) <= 0.01
    assert "closed the connection before the response ended" in part.error_messages["reset"]
    # every cut connection was replaced (but one cut as the load stopped), no other one opened
    assert 1 + cuts <= connections <= 2 + cuts, (connections, cuts)
    _assert_consistent(part)


def test_an_error_answered_before_the_request_was_all_sent_is_that_status_on_a_new_connection() -> None:
    """Every 3rd 2 MB request is answered 413 once its head is in, and the server closes without reading the body
    (as a proxy does): each is http_413, even where the server's close reset the engine's send first (what it
    answered is read before the connection is given up), and the next request goes on a new connection."""
    with http_stand(every(3, ("early", 413))) as srv:
        load = CompiledLoad(http_wire(srv.port, 2_000_000), LoadPoint(LoadMode.CLOSED, 2), 5, 1)
        part = asyncio.run(_measure(load, 150, window_s=0.5, max_windows=6))
    f = part.failures
    print(f"{f.count} early 413s of {part.requests + f.count} ({_failure_share(part):.2%})")
    assert f.by_class() == {"http_413": f.count}
    assert abs(_failure_share(part) - 1 / 3) <= 0.05  # (a few hundred requests)
    assert "HTTP 413 from the server: too big!" in part.error_messages["http_413"]
    _assert_consistent(part)


# --- a server that goes away ------------------------------------------------------------------------------------------

class RecordReader:
    """The engine's records as they come (a thread reads its stdout), with the CLOCK_MONOTONIC time each arrived."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.records: list[np.ndarray] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = bytearray()
        while chunk := self.proc.stdout.read1(1 << 16):
            buffer += chunk
            self.records.append(records.parse(buffer))

    def all(self) -> np.ndarray:
        return np.concatenate(self.records) if self.records else np.zeros(0, records.RECORD)

    def wait_for(self, what: Callable[[np.ndarray], bool], timeout_s: float = 10) -> np.ndarray:
        deadline = time.monotonic() + timeout_s
        while not what(batch := self.all()):
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            assert time.monotonic() < deadline, "timed out waiting for the engine's records"
            time.sleep(0.01)
        return batch

    def join(self) -> None:
        self._thread.join(10)


@contextmanager
def engine(wire: WireRequest, folder: Path, *load: str) -> Iterator[subprocess.Popen]:
    (folder / "request.bin").write_bytes(wire.payload)
    args = [str(engine_binary()), f"--{wire.protocol}", wire.host, str(wire.port), "--request",
            str(folder / "request.bin"), "--timeout", "5", *load]
    if wire.headers:
        (folder / "headers.txt").write_text("".join(f"{k}: {v}\n" for k, v in wire.headers))
        args += ["--headers", str(folder / "headers.txt")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _of(batch: np.ndarray, outcome: Outcome) -> np.ndarray:
    failed = batch[batch["kind"] == records.Kind.FAILED]
    return failed[(failed["code"] & 0xFF) == outcome]


@pytest.mark.parametrize(("protocol", "load", "slots"), [("http", "closed", 3), ("http", "open", 4),
                                                         ("grpc", "closed", 1), ("grpc", "open", 1)])
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
        reader.wait_for(lambda b: _of(b, Outcome.REFUSED).size >= 1)
        time.sleep(0.7)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, proc.stderr.read().decode()
        reader.join()
    batch = reader.all()
    refused = _of(batch, Outcome.REFUSED)
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
    assert 0.5 <= took < 2.0, took
    last = reader.all()[-1]
    assert last["kind"] == records.Kind.HEARTBEAT and last["bytes"] >= 3  # still in flight when it gave up


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

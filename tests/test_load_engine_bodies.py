"""The compiled load engine with a pool of distinct requests (`WireRequest.payloads`, the engine's `--lengths`):
loopback stand-ins note which body each request carried, and the n-th request sent must carry body n modulo the
pool's size: every body whole, each in its turn, in equal shares, over HTTP/1.1 and gRPC (HTTP/2), closed and open
loop. A lengths file that does not describe the request file is refused, saying what is wrong."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LoadPoint
from serving.clients.http1 import build_request
from serving.clients.wire import WireRequest, grpc_message, grpc_wire, http1_wire
from tests.engine_runs import closed_port, cut_windows, done, run_engine
from tests.engine_servers import (
    MODEL_INFER,
    RequestStream,
    loop_thread,
    start_model_infer_server,
    triton_like_body,
)

BODY = triton_like_body()  # every answer: the same size whichever body asked (binary outputs)
REPLY = b"\x0a\x01m" * 20
# Distinct contents and lengths, each small enough to go out in one send (their order on the wire is the engine's).
SIZES = (1_000, 20_000, 3_000, 45_000, 9_000)
# Past the engine's 256 KiB per write: each goes out in several, EPOLLOUT between (HTTP/1.1) or in many DATA frames.
LARGE_SIZES = (602_112, 300_001, 602_112, 700_000, 262_145)


pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


def distinct(sizes: tuple[int, ...]) -> list[bytes]:
    """Random bytes of each size (seeded per body): no two alike, as distinct input images are not."""
    return [np.random.default_rng(i).bytes(n) for i, n in enumerate(sizes)]


@dataclass
class Recorder:
    """A stand-in's record: the pool index of each request's body, in the order they arrived whole (-1: a body
    that is none of the pool's, torn or mixed)."""

    pool: dict[bytes, int]
    port: int = 0
    seen: list[int] = field(default_factory=list)

    def note(self, body: bytes) -> None:
        self.seen.append(self.pool.get(body, -1))


class _Http(asyncio.Protocol):
    """Keep-alive HTTP/1.1: each request's body noted, BODY answered at once."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.stream = RequestStream()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.stream.buffer += data
        while True:
            self.stream.next_head()
            body = self.stream.body()
            if body is None:
                return
            self.recorder.note(body)
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)


@contextmanager
def http_recorder(bodies: list[bytes]) -> Iterator[Recorder]:
    recorder = Recorder({body: i for i, body in enumerate(bodies)})
    with loop_thread() as loop:
        listening = asyncio.run_coroutine_threadsafe(
            loop.create_server(lambda: _Http(recorder), "127.0.0.1", 0), loop).result(10)
        recorder.port = listening.sockets[0].getsockname()[1]
        try:
            yield recorder
        finally:
            async def close() -> None:
                listening.close()

            asyncio.run_coroutine_threadsafe(close(), loop).result(10)


@contextmanager
def grpc_recorder(messages: list[bytes]) -> Iterator[Recorder]:
    """A grpc.aio server (one event loop: calls are handled in the order they arrive) noting each ModelInfer's
    message and answering REPLY."""
    import grpc

    recorder = Recorder({message: i for i, message in enumerate(messages)})

    async def model_infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        recorder.note(request)
        return REPLY

    async def start() -> grpc.aio.Server:
        server, recorder.port = await start_model_infer_server(model_infer)
        return server

    with loop_thread() as loop:
        server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        try:
            yield recorder
        finally:
            asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(10)


@contextmanager
def stand_and_wire(protocol: str, sizes: tuple[int, ...]) -> Iterator[tuple[Recorder, WireRequest]]:
    """A recording stand-in and the wire of a pool of distinct bodies for it: HTTP/1.1 requests (each its own head:
    Content-Length differs) or gRPC messages (one set of headers for all)."""
    bodies = distinct(sizes)
    if protocol == "http":
        with http_recorder(bodies) as recorder:
            url = f"http://127.0.0.1:{recorder.port}/v2/models/m/infer"
            yield recorder, http1_wire(url, [build_request("POST", url, body, {
                "Content-Type": "application/octet-stream"}) for body in bodies])
    else:
        with grpc_recorder(bodies) as recorder:
            yield recorder, grpc_wire(f"127.0.0.1:{recorder.port}", MODEL_INFER, bodies)


def assert_in_turn(seen: list[int], pool: int, reorder: int) -> None:
    """Every body arrived whole; the n-th request sent carried body n % pool (so each body's share is exact: the
    first `sent % pool` bodies once more than the rest), and arrived at most `reorder` places from n (requests in
    flight together may arrive in another order than they were sent)."""
    arrived = np.array(seen)
    assert arrived.size >= 20, arrived.size
    assert np.all(arrived >= 0), "a body arrived that is none of the pool's: torn, or two mixed"
    q, r = divmod(arrived.size, pool)
    assert np.bincount(arrived, minlength=pool).tolist() == [q + (i < r) for i in range(pool)]
    sent = np.empty(arrived.size, dtype=np.int64)  # the m-th arrival of body i was the (pool * m + i)-th sent
    for i in range(pool):
        where = np.flatnonzero(arrived == i)
        sent[where] = pool * np.arange(where.size) + i
    displacement = np.abs(sent - np.arange(arrived.size))
    assert displacement.max() <= reorder, (displacement.max(), np.bincount(displacement))


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_request_at_a_time_carries_the_bodies_exactly_in_turn(protocol: str) -> None:
    """One request in flight: the server sees body 0, 1, 2, 3, 4, 0, 1, ... and nothing else."""
    with stand_and_wire(protocol, SIZES) as (recorder, wire):
        batch, code, err, folder = run_engine(wire, ["--closed", "1"], 1.0)
    assert code == 0, err
    assert done(batch).size == len(recorder.seen)  # every request the server saw was answered and recorded
    assert_in_turn(recorder.seen, len(SIZES), reorder=0)
    first = (folder / "first.bin").read_bytes()
    assert (first if protocol == "http" else grpc_message(first)) == (BODY if protocol == "http" else REPLY)


@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_compiled_load_sends_a_pool_in_turn_closed_and_open(protocol: str, mode: str) -> None:
    """Through `CompiledLoad` (request.bin and lengths.bin as a trial writes them): 3 request loops, or Poisson
    arrivals at 300/s. Its stop lets the requests in flight finish, so the server saw every request sent."""
    checked = []
    with stand_and_wire(protocol, SIZES) as (recorder, wire):
        load = LoadPoint(LoadMode.CLOSED, 3) if mode == "closed" else LoadPoint(LoadMode.POISSON, 300)
        engine = CompiledLoad(wire, load, 5, 1, horizon_s=30, check_response=checked.append)
        parts = asyncio.run(cut_windows(engine, 2, window_s=0.5))
    assert len(checked) == 1 and all(part.requests > 20 for part in parts)
    assert_in_turn(recorder.seen, len(SIZES), reorder=12)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bodies_too_large_for_one_write_are_each_sent_whole(protocol: str) -> None:
    """602 KB inputs and others past the engine's 256 KiB per write, two loops: each request's writes resume from
    its own body (HTTP/1.1: its connection's position in it; h2: its stream's DATA)."""
    with stand_and_wire(protocol, LARGE_SIZES) as (recorder, wire):
        batch, code, err, _ = run_engine(wire, ["--closed", "2"], 1.5)
    assert code == 0, err
    assert done(batch).size == len(recorder.seen)
    assert_in_turn(recorder.seen, len(LARGE_SIZES), reorder=12)


@pytest.mark.parametrize(("lengths", "expect"), [
    (np.array([100, 50], "<u8").tobytes(), "the 2 lengths sum to 150 bytes, but"),
    (np.array([150, 100], "<u8").tobytes(), "the lengths sum to more than the 200 bytes of"),
    (np.array([0, 200], "<u8").tobytes(), "body 0 has length 0"),
    (b"\x01" * 12, "holds 12 bytes: it must hold one or more uint64 lengths"),
    (b"", "holds 0 bytes: it must hold one or more uint64 lengths"),
])
@pytest.mark.slow
def test_a_lengths_file_that_does_not_fit_the_request_file_is_refused(lengths: bytes, expect: str,
                                                                      tmp_path: Path) -> None:
    """Before any connection is opened (none could be: nothing listens on the port): exit 2, an error record, and
    what is wrong on stderr."""
    (tmp_path / "request.bin").write_bytes(b"x" * 200)
    (tmp_path / "lengths.bin").write_bytes(lengths)
    proc = subprocess.run([str(engine_binary()), "--http1", "127.0.0.1", str(closed_port()), "--request",
                           str(tmp_path / "request.bin"), "--lengths", str(tmp_path / "lengths.bin"), "--closed", "1"],
                          capture_output=True, timeout=10)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert expect in err and "--lengths" in err, err
    assert "cannot connect" not in err
    assert records.parse(bytearray(proc.stdout))["kind"].tolist() == [records.Kind.ERROR]


def test_compiled_load_says_why_the_engine_refused_its_bodies() -> None:
    """An empty body in the pool (no request at all): the load fails to start with the engine's reason. A WireRequest
    refuses one where it is built (the test below); the engine's own check stays, for what else writes its files."""
    wire = WireRequest("http1", "127.0.0.1", closed_port(), (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",) * 2)
    object.__setattr__(wire, "payloads", (b"", wire.payloads[1]))  # past the WireRequest's own check
    engine = CompiledLoad(wire, LoadPoint(LoadMode.CLOSED, 1), 5, 1)
    with pytest.raises(RuntimeError, match="stopped before the load started: .*body 0 has length 0"):
        asyncio.run(engine.open())


def test_a_wire_request_without_a_request_or_with_an_empty_one_is_refused_where_it_is_built() -> None:
    with pytest.raises(ValueError, match="at least one payload"):
        WireRequest("http1", "127.0.0.1", 80, ())
    with pytest.raises(ValueError, match=r"payloads \[1\] of 2 are empty"):
        WireRequest("http1", "127.0.0.1", 80, (b"POST / HTTP/1.1\r\n\r\n", b""))

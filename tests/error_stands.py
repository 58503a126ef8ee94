"""Loopback stand-ins for the compiled load engine's error tests (tests/test_load_engine_error_statuses.py,
_timeouts.py, _connection_loss.py), each on a thread and event loop of its own, following a plan of what to do with
each request: answer it, answer an error status (503, grpc-status 14, ...), hold it past the timeout, cut its response
mid-way, answer before its body is in, or go away altogether. With them, what those tests share: driving
`CompiledLoad` until its windows hold enough requests (`measure`), and reading the engine's records as they come
(`RecordReader`, for an engine run directly: `engine`)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.samples import WindowSamples
from serving.clients.http1 import build_request
from serving.clients.outcomes import Outcome
from serving.clients.wire import WireRequest, grpc_wire, http1_wire
from tests.engine_servers import (
    MODEL_INFER,
    RequestStream,
    loop_thread,
    start_model_infer_server,
    triton_like_body,
)

BODY = triton_like_body()
REPLY = b"\x0a\x01m" * 20
# What a stand-in does with its n-th request (1 = the first to arrive): "ok", an error status (HTTP status, or the
# grpc-status for gRPC), ("sleep", s) then "ok", "cut" (HTTP/1.1: half the response, then the connection closes), or
# ("early", status) (HTTP/1.1: that status as soon as the request's head is in, the body unread, and a close).
Action = str | int | tuple[str, float]
Plan = Callable[[int], Action]


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
        self.stream = RequestStream()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.transports.add(transport)
        self.stand.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self.stream.buffer += data
        while True:
            if self.stream.next_head():
                self.stand.requests += 1
                self.action = self.plan(self.stand.requests)
                self.stand.count(self.action)
                if isinstance(self.action, tuple) and self.action[0] == "early":  # a proxy rejecting a big body
                    self.transport.write(f"HTTP/1.1 {self.action[1]} X\r\nContent-Length: 8\r\n"
                                         "Connection: close\r\n\r\ntoo big!".encode())
                    self.transport.close()
                    return
            if self.stream.body() is None:
                return
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
        server, stand.port = await start_model_infer_server(model_infer, options)
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

async def measure(load: CompiledLoad, at_least: int, window_s: float = 0.4, max_windows: int = 15,
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


def failure_share(part: WindowSamples) -> float:
    return part.failures.count / (part.requests + part.failures.count)


def assert_consistent(part: WindowSamples) -> None:
    """Every failure was scheduled in the window, sent no earlier than scheduled, and ended after it was sent."""
    f = part.failures
    assert np.all((f.intended_s >= part.window_start) & (f.intended_s < part.window_end))
    assert np.all(f.send_s >= f.intended_s - 1e-6) and np.all(f.done_s > f.send_s)


# --- the engine run directly, its records read as they come -----------------------------------------------------------

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


def failed_as(batch: np.ndarray, outcome: Outcome) -> np.ndarray:
    failed = batch[batch["kind"] == records.Kind.FAILED]
    return failed[(failed["code"] & 0xFF) == outcome]

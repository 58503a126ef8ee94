"""Loopback servers for the compiled engine's tests, each on a thread of its own (the engine's reader runs in the
test's event loop): an HTTP/1.1 server whose behaviour a test sets (status, chunked bodies, Server-Timing, closing
the connection, delays, failing after N requests) and a gRPC server answering `ModelInfer` with fixed bytes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

NUM_CLASSES = 10
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


@contextmanager
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own (a stand-in server's), stopped and closed on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def start_model_infer_server(model_infer, options: tuple[tuple[str, int], ...] = ()) -> tuple[object, int]:
    """A started grpc.aio server (on loopback, any port) whose ModelInfer is `model_infer` on raw message bytes, and
    its port: the stand-in gRPC server the engine's tests talk to."""
    import grpc

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1), *options])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def triton_like_body(classes: int = NUM_CLASSES) -> bytes:
    """A binary-data OIP response body: its JSON header, then one FP32 [1, classes] output."""
    logits = np.arange(classes, dtype=np.float32).reshape(1, classes).tobytes()
    header = json.dumps({"model_name": "m", "model_version": "1", "outputs": [
        {"name": "logits", "datatype": "FP32", "shape": [1, classes],
         "parameters": {"binary_data_size": len(logits)}}]}).encode()
    return header + logits


@dataclass
class HttpBehaviour:
    status: int = 200
    body: bytes = b""
    chunked: bool = False
    close: bool = False  # Connection: close after every response
    delay_s: float = 0.0
    slow: tuple[int, ...] = ()  # these requests (1 = the first to arrive) are answered `slow_s` late: others overtake
    slow_s: float = 0.0
    server_timing: str | None = None
    fail_after: int | None = None  # answer 500 from this request on
    vary_after: int | None = None  # answer a body one byte longer from this request on


def take_request_head(buffer: bytearray) -> int | None:
    """The Content-Length of the HTTP request head at the front of `buffer` (the head is consumed), or None while the
    head is incomplete."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).lower()
    del buffer[:end + 4]
    return next((int(line[15:]) for line in head.split(b"\r\n") if line.startswith(b"content-length:")), 0)


class RequestStream:
    """A keep-alive HTTP/1.1 connection's bytes cut into requests: the stand-in servers' one parser."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.left = -1  # the body bytes the request whose head was read still needs; -1: between requests

    def next_head(self) -> bool:
        """Read the next request's head when between requests and it is in: whether one was read just now."""
        if self.left >= 0:
            return False
        length = take_request_head(self.buffer)
        if length is None:
            return False
        self.left = length
        return True

    def body(self) -> bytes | None:
        """The current request's body once it is all in (taken: the stream is between requests again), else None."""
        if self.left < 0 or len(self.buffer) < self.left:
            return None
        body = bytes(self.buffer[:self.left])
        del self.buffer[:self.left]
        self.left = -1
        return body


class _HttpProtocol(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.stream = RequestStream()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.server.connections += 1

    def data_received(self, data: bytes) -> None:
        self.stream.buffer += data
        while True:
            self.stream.next_head()
            if self.stream.body() is None:
                return
            self.server.requests += 1
            behaviour = self.server.behaviour
            delay = behaviour.slow_s if self.server.requests in behaviour.slow else behaviour.delay_s
            asyncio.get_running_loop().call_later(delay, self._answer, self.server.requests)

    def _answer(self, number: int) -> None:
        b = self.server.behaviour
        status, body = b.status, b.body
        if b.fail_after is not None and number >= b.fail_after:
            status, body = 500, b"model failed: out of cheese"
        if b.vary_after is not None and number >= b.vary_after:
            body = body + b"!"
        reason = {200: "OK", 500: "Internal Server Error"}.get(status, "X")
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/octet-stream"]
        if b.server_timing:
            head.append(f"Server-Timing: {b.server_timing}")
        if b.close:
            head.append("Connection: close")
        if b.chunked:
            head.append("Transfer-Encoding: chunked")
            half = len(body) // 2
            chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:]) if p)
            payload = chunks + b"0\r\n\r\n"
        else:
            head.append(f"Content-Length: {len(body)}")
            payload = body
        if self.transport.is_closing():
            return
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        if b.close:
            self.transport.close()


class HttpServer:
    """Counts connections and requests; `behaviour` may be changed while it runs."""

    def __init__(self, behaviour: HttpBehaviour) -> None:
        self.behaviour = behaviour
        self.connections = 0
        self.requests = 0
        self.port = 0


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _close(listening: asyncio.Server) -> None:
    listening.close()


@contextmanager
def http_server(behaviour: HttpBehaviour) -> Iterator[HttpServer]:
    server = HttpServer(behaviour)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=_run_loop, args=(loop,), daemon=True)
    thread.start()
    listening = asyncio.run_coroutine_threadsafe(
        loop.create_server(lambda: _HttpProtocol(server), "127.0.0.1", 0), loop).result(10)
    server.port = listening.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        # closed on its own loop: from this thread it races the loop detaching a closing connection
        asyncio.run_coroutine_threadsafe(_close(listening), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@dataclass
class GrpcBehaviour:
    reply: bytes = b""
    server_timing: str | None = None
    fail_after: int | None = None  # answer INTERNAL from this call on
    delay_s: float = 0.0


@contextmanager
def grpc_server(behaviour: GrpcBehaviour) -> Iterator[dict]:
    """A sync gRPC server (thread pool) with a generic handler: the request's bytes in, `reply` out. Yields a dict
    with its port, the calls so far, the metadata of the last call and how many calls their client cancelled."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    state = {"calls": 0, "metadata": {}, "port": 0, "cancelled": 0}
    lock = threading.Lock()

    def model_infer(request: bytes, context: grpc.ServicerContext) -> bytes:
        with lock:
            state["calls"] += 1
            number = state["calls"]
        state["metadata"] = dict(context.invocation_metadata())
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if not context.is_active():  # the client cancelled the call while it was being served
            with lock:
                state["cancelled"] += 1
        if behaviour.fail_after is not None and number >= behaviour.fail_after:
            context.abort(grpc.StatusCode.INTERNAL, "model failed: out of cheese")
        if behaviour.server_timing:
            context.set_trailing_metadata((("server-timing", behaviour.server_timing),))
        return behaviour.reply

    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)})
    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=[("grpc.max_receive_message_length", -1)])
    server.add_generic_rpc_handlers((handler,))
    state["port"] = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield state
    finally:
        server.stop(None)

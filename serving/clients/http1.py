"""A minimal HTTP/1.1 client for load generation: keep-alive connections, each request's bytes built once, the
response read by an `asyncio.Protocol`. Every HTTP client of the load (Triton's binary protocol, Ray Serve's
ingress) sends through it, so two backends are never compared through two different HTTP stacks (Triton's
shared-memory trials, which send no tensor bytes, keep `tritonclient.http.aio` for its region calls).

Why not aiohttp: per request it builds headers, a writer, a response object and a stream; here a request is one
`transport.write` of pre-built bytes and a response one parse of its head, on the event loop's own transport
(uvloop's in Ray's workers). Against a loopback stub (benchmarks/loopback_stub.py) with the 602 KB tensor, the
client's CPU per request halved (~540 -> ~270 µs, about half of what remains being the kernel's copy of the
body), which is what separates a Python client from perf_analyzer on a ~1 ms server.

A streamed answer (server-sent events, `text/event-stream`: an OpenAI-compatible server's tokens) is read as it
arrives (`Http1Client(streaming=True)`): each event's `data` is kept with the moment its bytes reached the process
(`time.perf_counter()` on entry to `data_received`), and nothing else is done per event, so the client's cost per
token stays a few microseconds (benchmarks/stream_client_cost.py).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import NamedTuple
from urllib.parse import urlsplit

HEADER_END = b"\r\n\r\n"


class HttpResponse(NamedTuple):
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


class HttpStream(NamedTuple):
    """A response read as it streamed: an event stream's `data` payloads, each with when its bytes arrived
    (`time.perf_counter()`), or the whole body of any other response (an error, an answer not streamed)."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes  # the body when it is not an event stream
    events: list[tuple[float, bytes]]  # (arrival, the event's data) of an event stream, in order
    complete: bool  # the body ended as HTTP framed it; False: the connection closed first (a stream cut mid-way)
    ended: float  # when the response's last bytes arrived (perf_counter)


class HttpError(ConnectionError):
    pass


def build_request(method: str, url: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The request's bytes, head and body, sent as they are by every call."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    host = parts.netloc.rpartition("@")[2]  # never user info (credentials) in a header
    head = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}",
            *(f"{name}: {value}" for name, value in headers.items()), "", ""]
    return "\r\n".join(head).encode("latin-1") + body


MULTIPART_BOUNDARY = "tierbench-multipart-boundary"  # never inside a JPEG's bytes in practice; checked when building


def multipart_body(files: list[tuple[str, bytes]], content_type: str = "image/jpeg") -> tuple[bytes, str]:
    """A multipart/form-data body with one file part per (field name, bytes), and its content type."""
    marker = f"--{MULTIPART_BOUNDARY}".encode()
    if any(marker in data for _, data in files):
        raise ValueError(f"a file contains the multipart boundary {MULTIPART_BOUNDARY!r}")
    parts = [marker + b"\r\n" + (f'Content-Disposition: form-data; name="{field}"; filename="{field}-{i}.jpg"\r\n'
                                 f"Content-Type: {content_type}\r\n\r\n").encode() + data + b"\r\n"
             for i, (field, data) in enumerate(files)]
    return b"".join(parts) + marker + b"--\r\n", f"multipart/form-data; boundary={MULTIPART_BOUNDARY}"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time; the response (Content-Length or chunked) completes a
    future."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future | None = None
        self._head: tuple[int, dict[str, str]] | None = None
        self._body_at = 0
        self._length = -1  # body bytes expected; -1: chunked

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            detail = f": {exc}" if exc else ""
            self._waiter.set_exception(HttpError(f"connection closed before the response ended{detail}"))

    def send(self, request: bytes) -> asyncio.Future:
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return waiter

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            response = self._response()
        except (HttpError, ValueError) as exc:  # a malformed response: fail the request, drop the connection
            response = HttpError(f"bad HTTP response: {exc}")
        if response is None:
            return
        waiter, self._waiter = self._waiter, None
        if isinstance(response, Exception) or response.headers.get("connection", "").lower() == "close":
            self.closed = True
            self.transport.close()
        if waiter is not None and not waiter.done():
            if isinstance(response, Exception):
                waiter.set_exception(response)
            else:
                waiter.set_result(response)

    def _response(self) -> HttpResponse | None:
        """The response, once complete in the buffer (consumed from it); None while it is incomplete."""
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(HEADER_END)
            if end < 0:
                return None
            self._head = self._parse_head(bytes(buffer[:end]))
            self._body_at = end + len(HEADER_END)
        if self._length >= 0:
            if len(buffer) - self._body_at < self._length:
                return None
            body = bytes(buffer[self._body_at:self._body_at + self._length])
            del buffer[:self._body_at + self._length]
        else:
            body = self._dechunk()
            if body is None:
                return None
        (status, headers), self._head = self._head, None
        return HttpResponse(status, headers, body)

    def _parse_head(self, head: bytes) -> tuple[int, dict[str, str]]:
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            raise HttpError(f"not an HTTP/1.x response: {lines[0][:100]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            self._length = -1
        else:
            self._length = int(headers.get("content-length", "0"))
        return int(status_line[1]), headers

    def _dechunk(self) -> bytes | None:
        """The body of a complete chunked response in the buffer (consumed), or None while it is incomplete."""
        buffer, at, chunks = self._buffer, self._body_at, []
        while True:
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                return None
            size = int(bytes(buffer[at:line_end]).split(b";", 1)[0], 16)
            start = line_end + 2
            if size == 0:
                end = buffer.find(HEADER_END, line_end)  # the last chunk, then optional trailers
                if end < 0:
                    return None
                del buffer[:end + len(HEADER_END)]
                return b"".join(chunks)
            if len(buffer) < start + size + 2:
                return None
            chunks.append(bytes(buffer[start:start + size]))
            at = start + size + 2


class _StreamConnection(asyncio.Protocol):
    """One keep-alive connection whose response is read as it arrives: an event stream's events are timed and kept
    one by one (chunked, Content-Length or close-delimited framing), any other body kept whole. A connection that
    closes before the body ended completes the response as cut (`complete=False`), with what arrived: a stream cut
    mid-way is a result of the request, not an error of the transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future | None = None
        self._reset()

    def _reset(self) -> None:
        self._buffer = b""  # bytes not yet framed (the head, a chunk's size line)
        self._head: tuple[int, dict[str, str]] | None = None
        self._chunked = False
        # body bytes still to come: of the body (Content-Length), of this chunk (chunked); -1: open (close-delimited,
        # or a chunk's size line next); -2: a chunk's closing CRLF next
        self._left = -1
        self._trailer = False  # chunked: the last chunk came, its trailer section follows
        self._sse = False
        self._body = bytearray()  # what the body carried, when it is not an event stream
        self._partial = b""  # an event stream's bytes not yet a whole event
        self._events: list[tuple[float, bytes]] = []
        self._arrived = 0.0  # when the latest bytes arrived

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._head is None:
            detail = f": {exc}" if exc else ""
            waiter.set_exception(HttpError(f"connection closed before the response came{detail}"))
            return
        close_delimited = not self._chunked and self._left < 0
        self._complete(close_delimited)  # a body read until the close ended there; any other was cut

    def send(self, request: bytes) -> asyncio.Future:
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self._reset()
        self.transport.write(request)
        return waiter

    def data_received(self, data: bytes) -> None:
        self._arrived = arrived = time.perf_counter()
        try:
            if self._head is None:
                data = self._buffer + data
                end = data.find(HEADER_END)
                if end < 0:
                    self._buffer = data
                    return
                self._head = self._parse_head(data[:end])
                self._buffer, data = b"", data[end + len(HEADER_END):]
            if self._chunked:
                self._dechunk(data, arrived)
            else:
                self._body_bytes(data, arrived)
        except (HttpError, ValueError) as exc:  # a malformed response: fail the request, drop the connection
            waiter, self._waiter = self._waiter, None
            self.closed = True
            self.transport.close()
            if waiter is not None and not waiter.done():
                waiter.set_exception(HttpError(f"bad HTTP response: {exc}"))

    def _parse_head(self, head: bytes) -> tuple[int, dict[str, str]]:
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            raise HttpError(f"not an HTTP/1.x response: {lines[0][:100]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        if not self._chunked and "content-length" in headers:
            self._left = int(headers["content-length"])
        self._sse = headers.get("content-type", "").startswith("text/event-stream")
        status = int(status_line[1])
        if not self._chunked and self._left < 0 and status in (204, 304):
            self._left = 0
        return status, headers

    def _body_bytes(self, data: bytes, arrived: float) -> None:
        """Content-Length or close-delimited framing."""
        if self._left >= 0:
            data, rest = data[:self._left], data[self._left:]
            if rest:
                raise HttpError("bytes past the response's Content-Length")
            self._left -= len(data)
        self._take(data, arrived)
        if self._left == 0:
            self._complete(True)

    def _dechunk(self, data: bytes, arrived: float) -> None:
        """Chunked framing: the chunks the bytes complete, taken at once (one event stream read per packet)."""
        buffer = self._buffer + data if self._buffer else data
        at, size_of, left, parts = 0, len(buffer), self._left, []
        ended = False
        while True:
            if self._trailer:  # trailer fields, then the empty line
                end = buffer.find(b"\r\n", at)
                while end > at:
                    at = end + 2
                    end = buffer.find(b"\r\n", at)
                if end == at:
                    at, ended = end + 2, True
                break
            if left > 0:
                take = min(left, size_of - at)
                if take <= 0:
                    break
                parts.append(buffer[at:at + take])
                at += take
                left -= take
                if left:
                    break
                left = -2
            if left == -2:
                if size_of - at < 2:
                    break
                at += 2
                left = -1
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                break
            size_line = buffer[at:line_end]
            size = int(size_line.split(b";", 1)[0] if b";" in size_line else size_line, 16)  # extensions are rare
            at = line_end + 2
            if size == 0:
                self._trailer = True
            else:
                left = size
        self._left, self._buffer = left, buffer[at:]
        if parts:
            self._take(parts[0] if len(parts) == 1 else b"".join(parts), arrived)
        if ended:
            self._complete(True)

    def _take(self, data: bytes, arrived: float) -> None:
        """Body bytes: kept whole, or, in an event stream, cut into events as they complete (each event's `data`
        lines joined, other fields and comments dropped)."""
        if not self._sse:
            self._body += data
            return
        text = self._partial + data if self._partial else data
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n")
        blocks = text.split(b"\n\n")
        self._partial = blocks.pop()  # what is not yet a whole event
        events = self._events
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:  # the usual event: one data line
                events.append((arrived, block[6:]))
                continue
            data_lines = [line[6:] if line[5:6] == b" " else line[5:] for line in block.split(b"\n")
                          if line.startswith(b"data:")]
            if data_lines:
                events.append((arrived, b"\n".join(data_lines)))

    def _complete(self, ended: bool) -> None:
        status, headers = self._head
        waiter, self._waiter = self._waiter, None
        if not ended or headers.get("connection", "").lower() == "close":
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        body = b"" if self._sse else bytes(self._body)
        if waiter is not None and not waiter.done():
            waiter.set_result(HttpStream(status, headers, body, self._events, ended, self._arrived))
        self._reset()


class Http1Client:
    """Keep-alive connections to one server, shared by a client actor's request loops: a request takes an idle
    connection or opens one, so the connections grow to the requests in flight. `streaming`: responses are read as
    they arrive (`HttpStream`: an event stream's events timed one by one) instead of whole (`HttpResponse`)."""

    def __init__(self, url: str, timeout_s: float, tls: ssl.SSLContext | None = None, streaming: bool = False) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or (443 if tls else 80)
        self.timeout_s = timeout_s
        self.tls = tls
        self._protocol = _StreamConnection if streaming else _Connection
        self._idle: list[_Connection | _StreamConnection] = []
        self._all: list[_Connection | _StreamConnection] = []

    async def _connect(self) -> _Connection | _StreamConnection:
        loop = asyncio.get_running_loop()
        connecting = loop.create_connection(self._protocol, self.host, self.port, ssl=self.tls)
        _, connection = await asyncio.wait_for(connecting, self.timeout_s)
        self._all.append(connection)
        return connection

    async def send(self, request: bytes) -> HttpResponse | HttpStream:
        """Send pre-built request bytes; the response (`HttpStream` for a streaming client). A connection is reused
        only after a complete response."""
        idle = self._idle
        connection = idle.pop() if idle else await self._connect()
        while connection.closed:  # closed by the server while idle
            self._all.remove(connection)
            connection = idle.pop() if idle else await self._connect()
        try:
            response = await connection.send(request)
        except BaseException:
            connection.transport.close()  # a response may still be on its way: never reuse the connection
            self._all.remove(connection)
            raise
        if connection.closed:
            self._all.remove(connection)
        else:
            idle.append(connection)
        return response

    async def close(self) -> None:
        for connection in self._all:
            if connection.transport is not None:
                connection.transport.close()
        self._all, self._idle = [], []

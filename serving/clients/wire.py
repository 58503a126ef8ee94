"""A request as it crosses the socket, built once by a client's own code, for the compiled load engine to send
again and again (experiments/measure/engine): the whole HTTP/1.1 request, or a gRPC call's HEADERS and DATA."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

GRPC_PREFIX = 5  # a gRPC message on the wire: compressed flag (1 byte), length (4 bytes, big-endian), the message


@dataclass(frozen=True)
class WireRequest:
    """`protocol` http1: `payload` is the request, head and body; h2: `payload` is the DATA of a gRPC call (one
    length-prefixed message) and `headers` its HEADERS, pseudo-headers first."""

    protocol: str
    host: str
    port: int
    payload: bytes
    headers: tuple[tuple[str, str], ...] = ()
    # Every answer has the first one's size (binary outputs): the engine checks that of each response. False for a
    # text answer (JSON numbers: a batched forward pass changes their digits, not the answer).
    sized: bool = True


def http1_wire(url: str, request: bytes) -> WireRequest:
    """`request` (bytes from `serving.clients.http1.build_request`) sent to the server of `url`."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return WireRequest("http1", parts.hostname or "127.0.0.1", parts.port or 80, request)


def grpc_wire(target: str, method: str, message: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> WireRequest:
    """A unary gRPC call of `method` (`/package.Service/Method`) carrying the serialized `message`, with `metadata`
    (e.g. Ray Serve's `application`) as the headers any gRPC client sends it in."""
    host, _, port = target.rpartition(":")
    headers = ((":method", "POST"), (":scheme", "http"), (":path", method), (":authority", target),
               ("content-type", "application/grpc"), ("te", "trailers"), *metadata)
    payload = b"\x00" + len(message).to_bytes(4, "big") + message
    return WireRequest("h2", host.strip("[]"), int(port), payload, headers)


def grpc_message(data: bytes) -> bytes:
    """The message of a gRPC response's DATA (one uncompressed length-prefixed message)."""
    if len(data) < GRPC_PREFIX or data[0] != 0:
        raise ValueError(f"not an uncompressed gRPC message ({len(data)} bytes)")
    length = int.from_bytes(data[1:GRPC_PREFIX], "big")
    if len(data) != GRPC_PREFIX + length:
        raise ValueError(f"gRPC message of {len(data) - GRPC_PREFIX} bytes, its prefix says {length}")
    return data[GRPC_PREFIX:]

"""Requests as they cross the socket, built once by a client's own code, for the compiled load engine to send
again and again (experiments/measure/engine): whole HTTP/1.1 requests, or a gRPC call's HEADERS and its DATA. A
client with distinct inputs hands over several bodies (its pool of distinct requests): the engine sends them in
turn, the n-th request sent carrying body n modulo their count."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

GRPC_PREFIX = 5  # a gRPC message on the wire: compressed flag (1 byte), length (4 bytes, big-endian), the message


@dataclass(frozen=True)
class WireRequest:
    """`protocol` http1: each of `payloads` is a request, head and body; h2: each is the DATA of a gRPC call (one
    length-prefixed message), all sent with the HEADERS `headers`, pseudo-headers first."""

    protocol: str
    host: str
    port: int
    payloads: tuple[bytes, ...]
    headers: tuple[tuple[str, str], ...] = ()
    # Every answer has the first one's size (binary outputs): the engine checks that of each response. False for a
    # text answer (JSON numbers: a batched forward pass changes their digits, not the answer).
    sized: bool = True

    def __post_init__(self) -> None:
        if not self.payloads:
            raise ValueError("a WireRequest needs at least one payload")
        if not all(self.payloads):  # the engine would refuse it later, less clearly: a client built nothing
            empty = [i for i, payload in enumerate(self.payloads) if not payload]
            raise ValueError(f"a WireRequest's payloads are whole requests (http1) or length-prefixed gRPC messages "
                             f"(h2); payloads {empty[:5]} of {len(self.payloads)} are empty")

    @property
    def payload(self) -> bytes:
        """The first request (the one the engine's first response is checked against)."""
        return self.payloads[0]


def http1_wire(url: str, requests: bytes | list[bytes]) -> WireRequest:
    """`requests` (bytes from `serving.clients.http1.build_request`, one or several) sent to the server of `url`."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return WireRequest("http1", parts.hostname or "127.0.0.1", parts.port or 80,
                       (requests,) if isinstance(requests, bytes) else tuple(requests))


def grpc_wire(target: str, method: str, messages: bytes | list[bytes],
              metadata: tuple[tuple[str, str], ...] = ()) -> WireRequest:
    """Unary gRPC calls of `method` (`/package.Service/Method`) carrying the serialized `messages` (one or several),
    with `metadata` (e.g. Ray Serve's `application`) as the headers any gRPC client sends them in."""
    host, _, port = target.rpartition(":")
    headers = ((":method", "POST"), (":scheme", "http"), (":path", method), (":authority", target),
               ("content-type", "application/grpc"), ("te", "trailers"), *metadata)
    messages = [messages] if isinstance(messages, bytes) else messages
    payloads = tuple(b"\x00" + len(message).to_bytes(4, "big") + message for message in messages)
    return WireRequest("h2", host.strip("[]"), int(port), payloads, headers)


def grpc_message(data: bytes) -> bytes:
    """The message of a gRPC response's DATA (one uncompressed length-prefixed message)."""
    if len(data) < GRPC_PREFIX or data[0] != 0:
        raise ValueError(f"not an uncompressed gRPC message ({len(data)} bytes)")
    length = int.from_bytes(data[1:GRPC_PREFIX], "big")
    if len(data) != GRPC_PREFIX + length:
        raise ValueError(f"gRPC message of {len(data) - GRPC_PREFIX} bytes, its prefix says {length}")
    return data[GRPC_PREFIX:]

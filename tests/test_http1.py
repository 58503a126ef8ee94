"""The load's HTTP/1.1 client against raw loopback servers: keep-alive reuse, Content-Length and chunked
bodies, a server that closes, a malformed reply; and Triton's binary-data reply read in place."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from serving.clients.http1 import Http1Client, HttpError, build_request
from serving.oip.clients import binary_output


async def _serve(reply) -> tuple[asyncio.AbstractServer, str, list[bytes]]:
    """A server that reads each request (head + Content-Length body) and writes `reply(n)` for the n-th one;
    returns it, its URL and the requests it read."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                seen.append(head + await reader.readexactly(length))
                writer.write(reply(len(seen)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v2/infer", seen


def _content_length(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_requests_reuse_connections_up_to_the_requests_in_flight() -> None:
    async def scenario():
        server, url, seen = await _serve(lambda n: _content_length(f"reply {n}".encode(), "X-Reply: yes\r\n"))
        client = Http1Client(url, timeout_s=5)
        request = build_request("POST", url, b"x" * 100_000, {"Content-Type": "application/octet-stream"})
        replies = [await client.send(request) for _ in range(5)]  # one at a time: one connection
        sequential = len(client._all)
        replies += await asyncio.gather(*(client.send(request) for _ in range(4)))
        concurrent = len(client._all)
        await client.close()
        server.close()
        return replies, sequential, concurrent, seen

    replies, sequential, concurrent, seen = asyncio.run(scenario())
    assert sequential == 1 and concurrent == 4
    assert [r.status for r in replies] == [200] * 9 and replies[0].body == b"reply 1"
    assert replies[0].headers["x-reply"] == "yes"
    assert len(seen) == 9 and seen[0].startswith(b"POST /v2/infer HTTP/1.1\r\n") and seen[0].endswith(b"x" * 100_000)


def test_chunked_reply_and_a_server_that_closes() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")

    async def scenario():
        server, url, seen = await _serve(lambda n: chunked)
        client = Http1Client(url, timeout_s=5)
        request = build_request("GET", url, b"", {})
        first, second = await client.send(request), await client.send(request)
        await client.close()
        server.close()
        return first, second, len(seen)

    first, second, requests = asyncio.run(scenario())
    assert first.body == second.body == b"hello world" and requests == 2  # a new connection after the close


def test_a_malformed_reply_fails_the_request_instead_of_hanging() -> None:
    async def scenario():
        server, url, _ = await _serve(lambda n: b"SMTP ready\r\n\r\n")
        client = Http1Client(url, timeout_s=5)
        try:
            async with asyncio.timeout(5):
                await client.send(build_request("POST", url, b"x", {}))
        finally:
            await client.close()
            server.close()

    with pytest.raises(HttpError, match="not an HTTP/1.x response"):
        asyncio.run(scenario())


def test_triton_binary_output_is_read_in_place() -> None:
    logits = np.arange(6, dtype=np.float32).reshape(2, 3)
    other = np.zeros(4, np.int32).tobytes()
    header = json.dumps({"outputs": [
        {"name": "other", "datatype": "INT32", "shape": [4], "parameters": {"binary_data_size": len(other)}},
        {"name": "logits", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}]}).encode()
    body = header + other + logits.tobytes()
    np.testing.assert_array_equal(binary_output(body, str(len(header)), "logits"), logits)
    with pytest.raises(RuntimeError, match="no output 'probs'"):
        binary_output(body, str(len(header)), "probs")

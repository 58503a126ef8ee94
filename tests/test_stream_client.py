"""The generative client against raw loopback servers that answer exactly as a test writes them: server-sent events
read as they arrive (chunked, Content-Length and close-delimited framing; events split across packets), each
event's arrival kept; an answer's tokens counted by usage, the tokenizer or events, saying which; a stream cut or
carrying an error is a failed request with its class; what the request body asks (fast, no process)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import numpy as np
import pytest

from serving.clients.http1 import Http1Client, build_request
from serving.clients.outcomes import Outcome, RequestError, classify, error_class
from serving.workloads.generative.api import PinOutput, RequestFormat, request_body
from serving.workloads.generative.client import OpenAIClient, OpenAISpec
from serving.workloads.generative.prompts import LengthSpec, Prompt, PromptSource

Writer = Callable[[asyncio.StreamWriter, bytes], object]


async def _serve(write: Writer) -> tuple[asyncio.AbstractServer, str, list[bytes]]:
    """A server that reads each request (head + Content-Length body) and answers it with `write(writer, body)` (a
    coroutine function); returns it, its base URL and the bodies it read."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                seen.append(body)
                await write(writer, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(message: dict | str) -> bytes:
    text = message if isinstance(message, str) else json.dumps(message)
    return f"data: {text}\n\n".encode()


def _chat_events(tokens: list[str], usage: dict | None = None) -> list[bytes]:
    events = [_event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    events += [_event({"choices": [{"index": 0, "delta": {"content": t}}]}) for t in tokens]
    events.append(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    if usage is not None:
        events.append(_event({"choices": [], "usage": usage}))
    return [*events, _event("[DONE]")]


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _streaming(events: list[bytes], gap_s: float = 0.02, cut_after: int | None = None) -> Writer:
    """Writes the events one chunk each, `gap_s` apart; with `cut_after`, closes the connection after that many."""
    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(SSE_HEAD)
        for index, event in enumerate(events):
            if cut_after is not None and index == cut_after:
                writer.close()
                return
            writer.write(_chunk(event))
            await writer.drain()
            await asyncio.sleep(gap_s)
        writer.write(b"0\r\n\r\n")
    return write


def _spec(url: str, input_format: str = "chat_stream", **fields) -> OpenAISpec:
    source = PromptSource(input_tokens=LengthSpec(8.0), output_tokens=LengthSpec(4.0), conversations=2)
    return OpenAISpec(target="", url=url, model_name="m", input_format=input_format, batch_size=1, input_shape=(),
                      output_shape=(), inputs=source, timeout_s=5.0, **fields)


def _answer(write: Writer, input_format: str = "chat_stream", **fields):
    async def scenario():
        server, url, seen = await _serve(write)
        client = OpenAIClient(_spec(url, input_format, **fields))
        await client.open()
        try:
            return (*await client.answer(0), seen)
        finally:
            await client.close()
            server.close()
    return asyncio.run(scenario())


def test_a_streamed_answer_keeps_each_events_arrival_and_the_servers_usage() -> None:
    answer, report, seen = _answer(_streaming(_chat_events(["a", "b", "c", "d"],
                                                           {"prompt_tokens": 9, "completion_tokens": 4}), gap_s=0.03))
    trace = report.detail
    assert answer.text == "abcd" and answer.finish_reason == "length"
    assert (trace.output_tokens, trace.input_tokens, trace.counted_by) == (4, 9, "usage")
    # the role-only first event carries no output: the first token came one gap after it; each token is stamped as
    # it arrived, at least the server's gap after the one before (never all at once when the answer ends)
    gaps = trace.gaps_s
    assert trace.output_after_s.size == 4 and np.all(gaps > 0.02)
    assert trace.first_token_after_s >= 0.02
    assert report.answered_after_s >= trace.output_after_s[-1]  # the answer ended after its last token
    body = json.loads(seen[0])
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][-1]["role"] == "user" and body["model"] == "m"


def test_events_split_across_packets_and_several_in_one_are_all_read() -> None:
    events = _chat_events(["x", "y", "z"], {"prompt_tokens": 3, "completion_tokens": 3})
    raw = b"".join(_chunk(e) for e in events) + b"0\r\n\r\n"

    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(SSE_HEAD)
        for start in range(0, len(raw), 7):  # 7-byte packets: sizes, data and CRLFs cut anywhere
            writer.write(raw[start:start + 7])
            await writer.drain()
            await asyncio.sleep(0.001)

    answer, report, _ = _answer(write)
    assert answer.text == "xyz" and report.detail.output_tokens == 3


@pytest.mark.parametrize("framing", ["content-length", "close"])
def test_an_event_stream_without_chunked_framing_is_read_too(framing: str) -> None:
    payload = b"".join(_chat_events(["p", "q"], {"prompt_tokens": 1, "completion_tokens": 2}))

    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        length = f"Content-Length: {len(payload)}\r\n" if framing == "content-length" else "Connection: close\r\n"
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{length}\r\n".encode() + payload)
        await writer.drain()
        if framing == "close":
            writer.close()

    answer, report, _ = _answer(write)
    assert answer.text == "pq" and report.detail.output_tokens == 2


def test_without_usage_the_tokens_are_counted_by_the_events_and_it_says_so() -> None:
    _, report, _ = _answer(_streaming(_chat_events(["one", "two", "three"]), gap_s=0.0))
    assert (report.detail.output_tokens, report.detail.counted_by, report.detail.input_tokens) == (3, "events", -1)


def _failure(write: Writer, input_format: str = "chat_stream") -> tuple[Outcome, int, str]:
    with pytest.raises(RequestError) as info:
        _answer(write, input_format)
    outcome, status = classify(info.value)
    return outcome, status, str(info.value)


def test_a_stream_cut_mid_way_is_a_truncated_request() -> None:
    outcome, _, message = _failure(_streaming(_chat_events(["a", "b", "c", "d"]), gap_s=0.0, cut_after=3))
    assert error_class(outcome) == "truncated" and "the connection closed" in message


def test_a_stream_whose_body_ends_without_finishing_is_truncated_too() -> None:
    events = _chat_events(["a", "b"])[:3]  # role, a, b: no finish, no [DONE]
    outcome, _, message = _failure(_streaming(events, gap_s=0.0))
    assert error_class(outcome) == "truncated" and "the body ended" in message


def test_an_error_event_mid_stream_is_a_stream_error() -> None:
    events = [*_chat_events(["a"])[:2], _event({"error": {"message": "engine died", "type": "InternalError"}})]
    outcome, _, message = _failure(_streaming(events, gap_s=0.0))
    assert error_class(outcome) == "stream_error" and "engine died" in message


def test_an_error_status_is_its_http_class() -> None:
    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        text = b'{"error": {"message": "overloaded"}}'
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(text)).encode() + b"\r\n\r\n" + text)

    outcome, status, message = _failure(write)
    assert error_class(outcome, status) == "http_503" and "overloaded" in message


def test_an_answer_not_streamed_when_asked_to_stream_is_invalid() -> None:
    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        text = json.dumps({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(text)).encode() + b"\r\n\r\n" + text)

    outcome, _, message = _failure(write)
    assert outcome is Outcome.INVALID and "asked for a stream" in message


def test_an_answer_asked_whole_has_its_tokens_and_no_token_timing() -> None:
    async def write(writer: asyncio.StreamWriter, body: bytes) -> None:
        text = json.dumps({"choices": [{"text": "abc", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 3}}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(text)).encode() + b"\r\n\r\n" + text)

    answer, report, seen = _answer(write, "completions")
    assert answer.text == "abc" and report.detail.output_tokens == 3 and not report.detail.streamed
    assert np.isnan(report.detail.first_token_after_s)
    body = json.loads(seen[0])
    assert "stream" not in body and "prompt" in body and "messages" not in body


def test_the_body_pins_the_length_the_way_the_server_takes() -> None:
    prompt = Prompt(messages=(("user", "hi"),), text="user: hi\nassistant:", input_tokens=-1, max_tokens=7)
    asked = {pin: json.loads(request_body(prompt, "m", RequestFormat.CHAT_STREAM, pin)) for pin in PinOutput
             if pin is not PinOutput.AUTO}
    assert asked[PinOutput.IGNORE_EOS]["ignore_eos"] is True and "min_tokens" not in asked[PinOutput.IGNORE_EOS]
    assert asked[PinOutput.MIN_TOKENS]["min_tokens"] == 7 and "ignore_eos" not in asked[PinOutput.MIN_TOKENS]
    assert not {"ignore_eos", "min_tokens"} & set(asked[PinOutput.NONE])
    assert all(body["max_tokens"] == 7 for body in asked.values())


def test_a_streaming_connection_is_reused_after_a_whole_answer() -> None:
    async def scenario():
        server, url, seen = await _serve(_streaming(_chat_events(["a"], {"prompt_tokens": 1,
                                                                          "completion_tokens": 1}), gap_s=0.0))
        client = Http1Client(url, 5.0, streaming=True)
        request = build_request("POST", f"{url}/v1/chat/completions", b"{}", {"Content-Type": "application/json"})
        answers = [await client.send(request) for _ in range(3)]
        connections = len(client._all)
        await client.close()
        server.close()
        return answers, connections

    answers, connections = asyncio.run(scenario())
    assert connections == 1 and all(a.complete and len(a.events) == 5 for a in answers)


def test_the_requests_carry_the_endpoints_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_TEST_OPENAI_TOKEN", "tok-123")
    client = OpenAIClient(_spec("http://127.0.0.1:1", token_env="TIERBENCH_TEST_OPENAI_TOKEN"))
    request = client._request_bytes(client.pool[0])
    assert b"\r\nAuthorization: Bearer tok-123\r\n" in request and b"POST /v1/chat/completions HTTP/1.1" in request

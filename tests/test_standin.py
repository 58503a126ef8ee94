"""The stand-in OpenAI-compatible server (serving.workloads.generative.standin): its routes, OpenAI's layouts, exact
token counts, failure modes and timing (checked on its own lateness record, in bands: this machine is noisy), and
the `transformers serve` helper the generative tests share. Answers are read with a small raw-socket HTTP/1.1 client
here, independent of the project's generative client."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from serving.workloads.generative.standin import TOKEN_TEXT, Behaviour, StandIn, parser
from tests.processes import server_processes

pytest_plugins = ["tests.generative_servers"]

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@dataclass
class Reply:
    """One HTTP answer as it arrived: status, headers, body; for SSE, each event with its arrival time."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[tuple[float, Any]] = field(default_factory=list)  # (time.monotonic(), JSON or "[DONE]")
    sent: float = 0.0  # when the request was written
    complete: bool = False  # the whole body (or the chunked terminator) arrived

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def data(self) -> list[Any]:
        return [data for _, data in self.events]

    def content_times(self) -> list[float]:
        """Arrival times of the events that carry tokens."""
        return [t for t, data in self.events if isinstance(data, dict) and _token_text(data)]


def _token_text(event: dict[str, Any]) -> str:
    choices = event.get("choices") or [{}]
    return choices[0].get("delta", {}).get("content") or choices[0].get("text") or ""


class Connection:
    """An HTTP/1.1 keep-alive connection: requests in turn, each answer read whole (a cut one marked incomplete)."""

    def __init__(self, url: str) -> None:
        self.address = urlsplit(url)

    async def __aenter__(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.address.hostname, self.address.port)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.writer.close()

    async def request(self, path: str, payload: Any = None, method: str | None = None) -> Reply:
        body = b"" if payload is None else json.dumps(payload).encode()
        method = method or ("GET" if payload is None else "POST")
        reply = Reply(sent=time.monotonic())  # before the write: the server cannot have the request any sooner
        self.writer.write(f"{method} {path} HTTP/1.1\r\nHost: {self.address.netloc}\r\nContent-Type: application/json"
                          f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await self.writer.drain()
        try:
            await self._read(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # cut: `complete` stays False
        return reply

    async def _read(self, reply: Reply) -> None:
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        reply.status = int(head[0].split(" ")[1])
        reply.headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if line)}
        if reply.headers.get("transfer-encoding") != "chunked":
            reply.body = await self.reader.readexactly(int(reply.headers["content-length"]))
            reply.complete = True
            return
        pending = b""
        while size := int(await self.reader.readuntil(b"\r\n"), 16):
            chunk = (await self.reader.readexactly(size + 2))[:-2]
            arrived = time.monotonic()
            reply.body += chunk
            pending += chunk
            *events, pending = pending.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ")
                reply.events.append((arrived, "[DONE]" if data == b"[DONE]" else json.loads(data)))
        await self.reader.readuntil(b"\r\n")
        reply.complete = True


async def _fetch(url: str, path: str, payload: Any = None, method: str | None = None) -> Reply:
    async with Connection(url) as connection:
        return await connection.request(path, payload, method)


def fetch(url: str, path: str, payload: Any = None, method: str | None = None) -> Reply:
    """One request on a connection of its own."""
    return asyncio.run(_fetch(url, path, payload, method))


def chat(model: str = "standin", content: str = "one two three", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def completion(model: str = "standin", prompt: str = "one two three four", **extra: Any) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, **extra}


def tokens_of(reply: Reply) -> list[str]:
    return [_token_text(data) for data in reply.data if isinstance(data, dict) and _token_text(data)]


# --- without a server --------------------------------------------------------------------------------------------


def test_behaviour_flags_round_trip() -> None:
    behaviour = Behaviour(model="m", ttft_ms=12.5, itl_ms=3, tokens_per_chunk=2, strict_fields=True, fail_every=3,
                          cut_after=4, error_event=True, loop="asyncio")
    args = vars(parser().parse_args(behaviour.to_args()))
    assert Behaviour(**{k: v for k, v in args.items() if k not in ("host", "port")}) == behaviour


def test_bad_behaviour_names_the_field() -> None:
    with pytest.raises(ValueError, match="tokens_per_chunk=0"):
        Behaviour(tokens_per_chunk=0)
    with pytest.raises(TypeError, match="colour"):
        Behaviour(colour="red")  # what StandIn(colour="red") is refused by, before it starts anything


# --- the stand-in at TTFT 40 ms, ITL 8 ms (one per module) -------------------------------------------------------


@pytest.mark.slow
def test_models_and_health(standin) -> None:
    models = fetch(standin.url, "/v1/models")
    assert models.status == 200
    assert models.json() == {"object": "list", "data": [{"id": "standin", "object": "model", "created": 0,
                                                          "owned_by": "tierbench"}]}
    assert fetch(standin.url, "/health").status == 200
    assert fetch(standin.url, "/nowhere").status == 404
    assert fetch(standin.url, "/v1/models", {}).status == 405


@pytest.mark.slow
def test_another_model_is_404(standin) -> None:
    for path, payload in ((CHAT, chat("gpt-9")), (COMPLETIONS, completion("gpt-9"))):
        reply = fetch(standin.url, path, payload)
        assert reply.status == 404
        assert "gpt-9" in reply.json()["error"]["message"]


@pytest.mark.slow
def test_bad_requests_are_400(standin) -> None:
    assert fetch(standin.url, CHAT, "not an object").status == 400
    assert fetch(standin.url, CHAT, {"messages": [{"role": "user", "content": "x"}]}).status == 400  # no model
    assert fetch(standin.url, CHAT, chat(max_tokens=0)).status == 400
    assert fetch(standin.url, CHAT, {"model": "standin"}).status == 400  # no messages
    assert fetch(standin.url, COMPLETIONS, {"model": "standin"}).status == 400  # no prompt


@pytest.mark.slow
def test_streamed_chat_layout(standin) -> None:
    reply = fetch(standin.url, CHAT, chat(max_tokens=5, stream=True, stream_options={"include_usage": True}))
    assert reply.status == 200 and reply.complete
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["transfer-encoding"] == "chunked"
    role, *token_events, finish, usage, done = reply.data
    assert role["choices"] == [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]
    assert [e["choices"][0]["delta"] for e in token_events] == [{"content": TOKEN_TEXT}] * 5
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == "standin" for e in reply.data[:-1])
    assert len({e["id"] for e in reply.data[:-1]}) == 1
    assert finish["choices"][0]["finish_reason"] == "length"
    assert all(e["usage"] is None for e in (role, *token_events, finish))  # as OpenAI's, with include_usage
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert done == "[DONE]"


@pytest.mark.slow
def test_streamed_completions_layout(standin) -> None:
    reply = fetch(standin.url, COMPLETIONS, completion(max_tokens=4, stream=True))
    assert reply.status == 200 and reply.complete
    *token_events, finish, done = reply.data  # no usage: include_usage was not asked
    assert not any("usage" in e for e in (*token_events, finish))
    assert [e["choices"][0]["text"] for e in token_events] == [TOKEN_TEXT] * 4
    assert all(e["object"] == "text_completion" for e in token_events)
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["text"] == ""
    assert done == "[DONE]"


@pytest.mark.slow
def test_token_counts(standin) -> None:
    assert len(tokens_of(fetch(standin.url, CHAT, chat(stream=True)))) == 16  # max_tokens absent
    assert len(tokens_of(fetch(standin.url, CHAT, chat(stream=True, max_completion_tokens=3)))) == 3
    reply = fetch(standin.url, COMPLETIONS, completion(max_tokens=7, stream=True, stream_options={"include_usage": 1}))
    assert "".join(tokens_of(reply)) == TOKEN_TEXT * 7
    assert reply.data[-2]["usage"] == {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11}


@pytest.mark.slow
def test_not_streamed(standin) -> None:
    reply = fetch(standin.url, CHAT, chat(max_tokens=6))
    answer = reply.json()
    assert reply.status == 200 and answer["object"] == "chat.completion"
    assert answer["choices"] == [{"index": 0, "message": {"role": "assistant", "content": TOKEN_TEXT * 6},
                                  "finish_reason": "length"}]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    started = time.monotonic()
    answer = fetch(standin.url, COMPLETIONS, completion(max_tokens=6)).json()
    assert answer["choices"][0]["text"] == TOKEN_TEXT * 6 and answer["usage"]["completion_tokens"] == 6
    assert time.monotonic() - started >= (standin.behaviour.ttft_ms + 5 * standin.behaviour.itl_ms) / 1e3


@pytest.mark.slow
def test_keep_alive_and_unknown_fields(standin) -> None:
    async def two() -> list[Reply]:
        async with Connection(standin.url) as connection:
            return [await connection.request(CHAT, chat(max_tokens=2, stream=True, ignore_eos=True, min_tokens=2,
                                                        temperature=0.7, seed=3, some_new_field={"x": 1})),
                    await connection.request(COMPLETIONS, completion(max_tokens=2))]

    streamed, whole = asyncio.run(two())
    assert streamed.status == 200 and streamed.complete and len(tokens_of(streamed)) == 2
    assert whole.status == 200 and whole.json()["usage"]["completion_tokens"] == 2


@pytest.mark.slow
def test_its_tokens_come_no_sooner_than_set_and_it_records_its_own_lateness(standin) -> None:
    """TTFT and ITL as set, read as what cannot be otherwise on any machine: a token is written on its deadline or
    after it (deadlines absolute from the request, so the last of 21 tokens comes no sooner than TTFT + 20 ITLs
    after the send), and the stand-in records how late it was, chunk by chunk (how close the figures come to the set
    ones is benchmarks/generative_standin.py's question, not a test's)."""
    ttft_set, itl_set = standin.behaviour.ttft_ms, standin.behaviour.itl_ms  # 40 ms, 8 ms
    standin.reset_stats()
    replies = [fetch(standin.url, CHAT, chat(max_tokens=21, stream=True)) for _ in range(5)]
    stats = standin.stats()
    assert stats["requests"] == 5 and stats["chunks"] == 5 * 21
    lateness = stats["lateness_ms"]
    assert 0 <= lateness["p50"] <= lateness["p90"] <= lateness["max"], stats
    for reply in replies:
        times = reply.content_times()
        assert len(times) == 21 and times == sorted(times)
        assert (times[0] - reply.sent) * 1e3 >= ttft_set
        assert (times[-1] - reply.sent) * 1e3 >= ttft_set + 20 * itl_set


@pytest.mark.slow
def test_256_streams_at_once(standin) -> None:
    standin.reset_stats()

    async def many() -> list[Reply]:
        return await asyncio.gather(*(_fetch(standin.url, CHAT, chat(max_tokens=4, stream=True))
                                      for _ in range(256)))

    replies = asyncio.run(many())
    assert all(r.status == 200 and r.complete and len(tokens_of(r)) == 4 for r in replies)
    stats = standin.stats()
    assert stats["requests"] == 256 and stats["chunks"] == 256 * 4  # all 256 on one core: late perhaps, never lost


# --- stand-ins with flags ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_strict_fields_refuse_vllm_extensions(tmp_path) -> None:
    with StandIn(strict_fields=True, log_path=tmp_path / "standin.log") as server:
        for extra in ({"ignore_eos": True}, {"min_tokens": 4}):
            reply = fetch(server.url, CHAT, chat(max_tokens=4, stream=True, **extra))
            assert reply.status == 422  # as transformers serve 5.25 answers
            body = reply.json()
            assert next(iter(extra)) in body["detail"] and next(iter(extra)) in body["error"]["message"]
        assert fetch(server.url, CHAT, chat(max_tokens=4, stream=True, temperature=0)).status == 200


@pytest.mark.slow
def test_cut_after_every_second_request(tmp_path) -> None:
    with StandIn(ttft_ms=5, itl_ms=2, cut_after=3, fail_every=2, log_path=tmp_path / "standin.log") as server:
        whole = fetch(server.url, CHAT, chat(max_tokens=6, stream=True))
        cut = fetch(server.url, CHAT, chat(max_tokens=6, stream=True))
        again = fetch(server.url, COMPLETIONS, completion(max_tokens=6))
        cut_whole = fetch(server.url, COMPLETIONS, completion(max_tokens=6))
    assert whole.complete and len(tokens_of(whole)) == 6 and whole.data[-1] == "[DONE]"
    assert cut.status == 200 and not cut.complete
    assert len(tokens_of(cut)) == 3 and "[DONE]" not in cut.data
    assert not any(e["choices"] and e["choices"][0].get("finish_reason") for e in cut.data if isinstance(e, dict))
    assert again.status == 200 and again.json()["usage"]["completion_tokens"] == 6
    assert cut_whole.status == 0 and not cut_whole.complete  # closed with no answer


@pytest.mark.slow
def test_error_status(tmp_path) -> None:
    with StandIn(error_status=503, log_path=tmp_path / "standin.log") as server:
        for reply in (fetch(server.url, CHAT, chat(stream=True)), fetch(server.url, COMPLETIONS, completion())):
            assert reply.status == 503 and reply.headers["content-type"] == "application/json"
            assert reply.json()["error"]["type"] == "server_error"
        assert server.stats()["requests"] == 2


@pytest.mark.slow
def test_error_event(tmp_path) -> None:
    with StandIn(ttft_ms=5, itl_ms=2, error_event=True, cut_after=2, log_path=tmp_path / "standin.log") as server:
        reply = fetch(server.url, CHAT, chat(max_tokens=6, stream=True, stream_options={"include_usage": True}))
        whole = fetch(server.url, CHAT, chat(max_tokens=6))
    assert reply.status == 200 and reply.complete
    role, first, second, error, done = reply.data
    assert tokens_of(reply) == [TOKEN_TEXT] * 2
    assert set(error) == {"error"} and error["error"]["message"] and error["error"]["type"]
    assert done == "[DONE]"
    assert whole.status == 500 and "error" in whole.json()


@pytest.mark.slow
def test_tokens_per_chunk(tmp_path) -> None:
    with StandIn(ttft_ms=5, itl_ms=2, tokens_per_chunk=3, log_path=tmp_path / "standin.log") as server:
        reply = fetch(server.url, COMPLETIONS, completion(max_tokens=7, stream=True))
        stats = server.stats()
    assert tokens_of(reply) == [TOKEN_TEXT * 3, TOKEN_TEXT * 3, TOKEN_TEXT]
    assert stats["chunks"] == 3


@pytest.mark.slow
def test_sigterm_stops_it_and_the_leak_check_sees_it(tmp_path, no_leftover_processes) -> None:
    with StandIn(log_path=tmp_path / "standin.log") as server:
        assert server.process.pid in server_processes()
    assert server.process.returncode == 0  # stopped by SIGTERM, cleanly
    assert "ready http://127.0.0.1:" in (tmp_path / "standin.log").read_text()


# --- with the tiny Llama's tokenizer, and transformers serve -----------------------------------------------------


@pytest.mark.slow
def test_with_the_models_tokenizer_it_counts_the_prompt_as_a_server_does(tiny_llama_dir, tmp_path) -> None:
    """Given the tiny Llama's tokenizer (one token per character), the stand-in counts a chat's prompt with the chat
    template applied, as `transformers serve` does (tests/test_generative_sweep.py measures that server), and a
    completion's as it is."""
    with StandIn(model="tiny", tokenizer=str(tiny_llama_dir), log_path=tmp_path / "si.log") as si:
        payload = chat("tiny", "hello", max_tokens=8, stream=True, stream_options={"include_usage": True})
        counted = fetch(si.url, CHAT, payload).data[-2]["usage"]
        assert counted["prompt_tokens"] == len("user: hello\nassistant: ")
        whole = fetch(si.url, COMPLETIONS, completion(si.model, "hello", max_tokens=2)).json()
        assert whole["usage"]["prompt_tokens"] == 5

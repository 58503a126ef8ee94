"""A stand-in OpenAI-compatible server whose time to first token (TTFT) and inter-token latency (ITL) are set, so a
generative measurement can be checked against known values, with the stand-in's own lateness measured and shown
beside it (`GET /stats`).

Token k (k = 0 .. n-1) of a request is written at t0 + ttft + k * itl, t0 being when the request's body was read:
deadlines are absolute, so one late write delays no later one. It answers exactly `max_tokens` tokens (16 when
absent); each token's text is `TOKEN_TEXT` (" tok": one whitespace-separated word, 4 characters), so n tokens read
as n words. Plain asyncio (uvloop when importable), no web framework: its own overhead stays small and measured.

    python -m serving.workloads.generative.standin --port 8000 --model tiny --ttft-ms 40 --itl-ms 8

Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /stats, POST /stats/reset.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import json
import math
import os
import signal
import sys
import tempfile
import time
import urllib.request
from array import array
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

TOKEN_TEXT = " tok"  # one token's text
DEFAULT_MAX_TOKENS = 16
REFUSED_WHEN_STRICT = ("ignore_eos", "min_tokens")  # vLLM's extensions, which transformers serve refuses
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Behaviour:
    """What the stand-in serves and how; each field is the CLI flag of the same name (`ttft_ms` is `--ttft-ms`).

    Failure modes hit every `fail_every`-th generation request (counted from the last `POST /stats/reset`), the
    first set of: `error_status` answers that HTTP status at once; `error_event` streams `cut_after` tokens (half of
    them when unset), then an SSE error event and [DONE] (as vLLM does); `cut_after` alone closes the connection
    after that many tokens (no finish, no [DONE]). Not streamed, `cut_after` closes the connection without an answer
    when its last token is due, and `error_event` answers 500."""

    model: str = "standin"
    ttft_ms: float = 40.0
    itl_ms: float = 8.0
    tokens_per_chunk: int = 1
    tokenizer: str | None = None  # a local tokenizer folder: real prompt token counts (chat template applied)
    strict_fields: bool = False  # refuse ignore_eos / min_tokens, as transformers serve does
    strict_status: int = 422  # transformers serve 5.25 answers 422 (FastAPI's validation status); OpenAI's API 400
    fail_every: int = 1
    cut_after: int | None = None
    error_status: int | None = None
    error_event: bool = False
    loop: str = "auto"  # auto (uvloop when importable) | uvloop | asyncio

    def __post_init__(self) -> None:
        allowed = {"ttft_ms": (self.ttft_ms >= 0, ">= 0"), "itl_ms": (self.itl_ms >= 0, ">= 0"),
                   "tokens_per_chunk": (self.tokens_per_chunk >= 1, ">= 1"),
                   "fail_every": (self.fail_every >= 1, ">= 1"),
                   "cut_after": (self.cut_after is None or self.cut_after >= 0, "unset or >= 0"),
                   "strict_status": (400 <= self.strict_status <= 599, "400-599"),
                   "error_status": (self.error_status is None or 400 <= self.error_status <= 599, "unset or 400-599"),
                   "loop": (self.loop in ("auto", "uvloop", "asyncio"), "auto, uvloop or asyncio")}
        for name, (ok, what) in allowed.items():
            if not ok:
                raise ValueError(f"stand-in: {name}={getattr(self, name)!r}; allowed: {what}")

    @property
    def failure_mode(self) -> str | None:
        if self.error_status is not None:
            return "error_status"
        if self.error_event:
            return "error_event"
        return "cut_after" if self.cut_after is not None else None

    def to_args(self) -> list[str]:
        """The CLI flags that give this behaviour (defaults left out)."""
        args: list[str] = []
        for field in fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            flag = "--" + field.name.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
        return args


class PromptCounter:
    """Prompt tokens for `usage`: whitespace-separated words, or the tokenizer's count when one is given."""

    def __init__(self, tokenizer_dir: str | None) -> None:
        self.tokenizer = None
        if tokenizer_dir:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)

    def chat(self, messages: list[dict[str, Any]]) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                          return_dict=True)["input_ids"])
        return sum(len(_text(message.get("content")).split()) for message in messages)

    def completion(self, prompt: Any) -> int:
        if isinstance(prompt, list) and all(isinstance(item, int) for item in prompt):
            return len(prompt)  # token ids
        texts = prompt if isinstance(prompt, list) else [prompt]
        if self.tokenizer is not None:
            return sum(len(self.tokenizer(str(text))["input_ids"]) for text in texts)
        return sum(len(str(text).split()) for text in texts)


def _text(content: Any) -> str:
    """A message's text: a string, or OpenAI's list of content parts."""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


class HttpError(Exception):
    """A request answered with an error status and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {**extra, "error": {"message": message, "type": kind, "param": None, "code": status}}


@dataclass
class Request:
    method: str
    path: str
    keep_alive: bool
    body: bytes
    t0: float  # time.monotonic() when the body was read


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on a connection; None when the client closed it between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, f"request head over {MAX_HEAD_BYTES} bytes") from exc
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = b""
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")  # the (empty) trailer
        else:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
    except ValueError as exc:  # a line without ':', a length that is no number
        raise HttpError(400, f"malformed request: {exc}") from exc
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, target.split("?", 1)[0], keep_alive, body, time.monotonic())


def head(status: int, content_type: str, keep_alive: bool, length: int | None = None) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    size = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    return (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {content_type}\r\n{size}\r\nCache-Control: no-cache\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode()


def json_answer(status: int, payload: Any, keep_alive: bool) -> bytes:
    body = json.dumps(payload).encode()
    return head(status, "application/json", keep_alive, len(body)) + body


def sse(payload: Any) -> bytes:
    """One SSE event as one HTTP chunk."""
    data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def sleep_until(deadline: float) -> None:
    """Sleep until time.monotonic() reaches `deadline`. Timers round to the millisecond (uvloop to the nearest): an
    early wake sleeps the rest again, which yields to the loop until the deadline (measured: p50 lateness 0.4 ms
    this way, 0.9 ms rounding every sleep up)."""
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(left)


class StandInServer:
    """The routes, the token schedule and the lateness record."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.counter = PromptCounter(behaviour.tokenizer)
        self.ttft_s, self.itl_s = behaviour.ttft_ms / 1e3, behaviour.itl_ms / 1e3
        self.tasks: set[asyncio.Task] = set()
        self.requests = 0  # generation requests since the last reset, failing ones included: the failure count
        self.lateness = array("d")  # seconds each chunk was written after its time
        self.served = 0  # generation requests since the start: their ids

    def stats(self) -> dict[str, Any]:
        late = sorted(self.lateness)

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1e3, 4)

        def pct(q: float) -> float | None:
            return late[min(len(late) - 1, max(0, math.ceil(q * len(late)) - 1))] if late else None

        return {"requests": self.requests, "chunks": len(late),
                "lateness_ms": {"p50": ms(pct(0.5)), "p90": ms(pct(0.9)), "p99": ms(pct(0.99)),
                                "max": ms(late[-1] if late else None), "min": ms(late[0] if late else None),
                                "mean": ms(sum(late) / len(late) if late else None)},
                "behaviour": asdict(self.behaviour)}

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the connection's requests in turn (HTTP/1.1 keep-alive) until either side closes it."""
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            while True:
                try:
                    request = await read_request(reader)
                except HttpError as exc:
                    writer.write(json_answer(exc.status, exc.body, False))
                    break
                if request is None or not await self.answer(request, writer) or not request.keep_alive:
                    break
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.tasks.discard(task)
            writer.close()

    async def answer(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection was closed (a cut) and must not be read again."""
        keep = request.keep_alive
        route = (request.method, request.path)
        try:
            if route == ("GET", "/health"):
                writer.write(json_answer(200, {"status": "ok"}, keep))
            elif route == ("GET", "/v1/models"):
                model = {"id": self.behaviour.model, "object": "model", "created": 0, "owned_by": "tierbench"}
                writer.write(json_answer(200, {"object": "list", "data": [model]}, keep))
            elif route == ("GET", "/stats"):
                writer.write(json_answer(200, self.stats(), keep))
            elif route == ("POST", "/stats/reset"):
                self.requests, self.lateness = 0, array("d")
                writer.write(json_answer(200, {"reset": True}, keep))
            elif route in (("POST", CHAT), ("POST", COMPLETIONS)):
                return await self.generate(request, writer)
            elif request.path in ("/health", "/v1/models", "/stats", "/stats/reset", CHAT, COMPLETIONS):
                raise HttpError(405, f"{request.method} is not allowed on {request.path}")
            else:
                raise HttpError(404, f"no route {request.path}; see GET /v1/models, POST {CHAT}, POST {COMPLETIONS}")
        except HttpError as exc:
            writer.write(json_answer(exc.status, exc.body, keep))
        return True

    def parse(self, request: Request) -> tuple[dict[str, Any], int, int]:
        """The request's JSON, its answer's length and its prompt's tokens; HttpError when it cannot be served."""
        try:
            payload = json.loads(request.body)
        except ValueError as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise HttpError(400, "the body must be a JSON object")
        if "model" not in payload:
            raise HttpError(400, f"'model' is required (this server serves {self.behaviour.model!r})")
        if payload["model"] != self.behaviour.model:
            raise HttpError(404, f"The model `{payload['model']}` does not exist; this server serves "
                                 f"`{self.behaviour.model}`")
        refused = [name for name in REFUSED_WHEN_STRICT if name in payload]
        if self.behaviour.strict_fields and refused:
            message = f"Unexpected fields in the request: {set(refused)}"
            raise HttpError(self.behaviour.strict_status, message, detail=message)  # `detail`: transformers' layout
        n = payload.get("max_completion_tokens", payload.get("max_tokens"))
        n = DEFAULT_MAX_TOKENS if n is None else n
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise HttpError(400, f"max_tokens must be an integer >= 1, not {n!r}")
        if request.path == CHAT:
            messages = payload.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise HttpError(400, "'messages' must be a non-empty list of {role, content} objects")
            return payload, n, self.counter.chat(messages)
        if "prompt" not in payload:
            raise HttpError(400, "'prompt' is required")
        return payload, n, self.counter.completion(payload["prompt"])

    async def generate(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        payload, n, prompt_tokens = self.parse(request)
        self.requests += 1
        self.served += 1
        b = self.behaviour
        failure = b.failure_mode if b.failure_mode and self.requests % b.fail_every == 0 else None
        if failure == "error_status":
            raise HttpError(b.error_status, f"stand-in failure: --error-status {b.error_status}", "server_error")
        chat = request.path == CHAT
        include_usage = bool(payload.get("stream") and (payload.get("stream_options") or {}).get("include_usage"))
        answer = Answer(chat, f"{'chatcmpl' if chat else 'cmpl'}-standin-{self.served}", b.model,
                        {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
                        include_usage)
        if not payload.get("stream"):
            return await self.whole(request, writer, answer, n, failure)
        return await self.stream(request, writer, answer, n, failure)

    def due(self, request: Request, token: int) -> float:
        return request.t0 + self.ttft_s + token * self.itl_s

    def wrote(self, due: float) -> None:
        self.lateness.append(time.monotonic() - due)

    async def whole(self, request: Request, writer: asyncio.StreamWriter, answer: Answer, n: int,
                    failure: str | None) -> bool:
        """Not streamed: the whole answer when its last token is due."""
        if failure == "error_event":
            raise HttpError(500, "stand-in failure: --error-event (not streamed)", "server_error")
        last = min(n, self.behaviour.cut_after) if failure == "cut_after" else n
        due = self.due(request, max(0, last - 1))
        await sleep_until(due)
        if failure == "cut_after":
            writer.close()
            return False
        writer.write(json_answer(200, answer.whole(n), request.keep_alive))
        self.wrote(due)
        return True

    async def stream(self, request: Request, writer: asyncio.StreamWriter, answer: Answer, n: int,
                     failure: str | None) -> bool:
        """Streamed: headers (and chat's role chunk) at once, then each chunk when its last token is due."""
        writer.write(head(200, "text/event-stream", request.keep_alive) + (sse(answer.role()) if answer.chat else b""))
        cut_after = self.behaviour.cut_after
        stop = {"cut_after": cut_after, "error_event": n // 2 if cut_after is None else cut_after}.get(failure, n)
        stop, per_chunk, frames = min(n, stop), self.behaviour.tokens_per_chunk, {}
        for first in range(0, stop, per_chunk):
            count = min(per_chunk, stop - first)
            due = self.due(request, first + count - 1)
            if count not in frames:
                frames[count] = sse(answer.tokens(count))
            await sleep_until(due)
            writer.write(frames[count])
            self.wrote(due)
            await writer.drain()
        if failure == "cut_after":
            writer.close()
            return False
        if failure == "error_event":
            writer.write(sse({"error": {"message": "stand-in failure: --error-event", "type": "server_error",
                                        "param": None, "code": 500}}))
        else:
            writer.write(sse(answer.finish()) + (sse(answer.usage_chunk()) if answer.include_usage else b""))
        writer.write(sse(b"[DONE]") + b"0\r\n\r\n")
        return True


@dataclass
class Answer:
    """One request's answer in OpenAI's layouts (chat or completions; chunks or whole). With `include_usage`, every
    chunk before the usage chunk carries `"usage": null`, as OpenAI's do."""

    chat: bool
    id: str
    model: str
    usage: dict[str, int]
    include_usage: bool = False

    def __post_init__(self) -> None:
        self.created = int(time.time())

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        usage = {"usage": None} if self.include_usage else {}
        return json.dumps({"id": self.id, "object": kind, "created": self.created, "model": self.model,
                           "choices": choices, **usage, **extra}).encode()

    def _choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def role(self) -> bytes:
        return self._chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])

    def tokens(self, count: int) -> bytes:
        return self._chunk([self._choice(TOKEN_TEXT * count, None)])

    def finish(self) -> bytes:
        return self._chunk([self._choice(None, "length")])

    def usage_chunk(self) -> bytes:
        return self._chunk([], usage=self.usage)

    def whole(self, n: int) -> dict[str, Any]:
        text = TOKEN_TEXT * n
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                  if self.chat else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice], "usage": self.usage}


async def serve(behaviour: Behaviour, host: str, port: int) -> None:
    """Listen until SIGTERM or SIGINT; print `ready URL` once listening."""
    app = StandInServer(behaviour)
    server = await asyncio.start_server(app.connection, host, port, backlog=4096, limit=MAX_HEAD_BYTES)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready http://{host}:{server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()
    for task in list(app.tasks):
        task.cancel()
    await asyncio.gather(*app.tasks, return_exceptions=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: any free port (the ready line says which)")
    d = Behaviour()
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=d.loop, help="auto: uvloop if importable")
    p.add_argument("--model", default=d.model, help="the one model name it serves")
    p.add_argument("--ttft-ms", type=float, default=d.ttft_ms, help="time to first token")
    p.add_argument("--itl-ms", type=float, default=d.itl_ms, help="time between tokens")
    p.add_argument("--tokens-per-chunk", type=int, default=d.tokens_per_chunk, help="tokens per SSE event")
    p.add_argument("--tokenizer", help="a local tokenizer folder: usage.prompt_tokens counted by it, not by words")
    p.add_argument("--strict-fields", action="store_true", help=f"refuse {' / '.join(REFUSED_WHEN_STRICT)}")
    p.add_argument("--strict-status", type=int, default=d.strict_status, help="the status --strict-fields answers")
    p.add_argument("--fail-every", type=int, default=d.fail_every, help="the failure modes hit every N-th request")
    p.add_argument("--cut-after", type=int, help="close the connection after K tokens of a stream")
    p.add_argument("--error-status", type=int, help="answer this HTTP status with an OpenAI error JSON")
    p.add_argument("--error-event", action="store_true", help="an SSE error event mid-stream (after --cut-after K)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = vars(parser().parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    try:
        behaviour = Behaviour(**args)
    except ValueError as exc:
        sys.exit(str(exc))
    factory = None
    if behaviour.loop != "asyncio":
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:
            if behaviour.loop == "uvloop":
                sys.exit("stand-in: --loop uvloop, but uvloop is not installed (pip install uvloop)")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(behaviour, host, port))


class StandIn:
    """The stand-in as an owned child process on a free loopback port: `with StandIn(ttft_ms=40, itl_ms=8) as s:`
    gives `s.url`, `s.stats()`, `s.reset_stats()`; it is stopped on exit, whatever happened."""

    def __init__(self, ttft_ms: float = 40.0, itl_ms: float = 8.0, model: str = "standin",
                 log_path: Path | None = None, env: dict[str, str] | None = None, timeout_s: float = 60.0,
                 **flags: Any) -> None:
        self.behaviour = Behaviour(model=model, ttft_ms=ttft_ms, itl_ms=itl_ms, **flags)
        self.log_path, self.env, self.timeout_s = log_path, env, timeout_s
        self.process = None
        self.port = 0
        self._own_log: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        """The one model name it serves."""
        return self.behaviour.model

    def __enter__(self) -> StandIn:
        from serving.process import free_ports, start_process, tail, wait_until

        if self.log_path is None:
            fd, self._own_log = tempfile.mkstemp(prefix="tierbench-standin-", suffix=".log")
            os.close(fd)
            self.log_path = Path(self._own_log)
        env = None if self.env is None else {**os.environ, **self.env}
        for attempt in range(3):  # a free port can be taken before the child binds it: try another
            (self.port,) = free_ports(1)
            cmd = [sys.executable, "-m", "serving.workloads.generative.standin", "--host", "127.0.0.1", "--port",
                   str(self.port), *self.behaviour.to_args()]
            self.process = start_process(cmd, self.log_path, env)
            try:
                wait_until(lambda: self._get("/health") is not None, self.timeout_s,
                           lambda: self.process.poll() is None, f"the stand-in ({' '.join(cmd[2:])})", 0.05)
            except Exception as exc:
                self._stop()
                if attempt == 2 or "Address already in use" not in tail(self.log_path):
                    raise RuntimeError(f"{exc}; its log ({self.log_path}):\n{tail(self.log_path)}") from exc
            except BaseException:
                self._stop()
                raise
            else:
                return self
        return self  # not reached: the last attempt returns or raises

    def __exit__(self, *exc_info: Any) -> None:
        self._stop()
        if self._own_log:
            Path(self._own_log).unlink(missing_ok=True)

    def _stop(self) -> None:
        from serving.process import stop_process_group

        if self.process is not None:
            stop_process_group(self.process, timeout_s=10)

    def _get(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        """Requests, chunks and the lateness percentiles (ms) since the last reset: `GET /stats`."""
        return self._get("/stats")

    def reset_stats(self) -> None:
        self._get("/stats/reset", "POST")


if __name__ == "__main__":
    main()

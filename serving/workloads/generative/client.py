"""The client of an OpenAI-compatible server: each request one conversation of the pool (`prompts.prompt_pool`),
its bytes built once, sent by the project's HTTP/1.1 client reading the answer as it streams
(`serving.clients.http1`); each answer becomes a `TokenTrace` (when its output arrived, how many tokens it served).

Tokens are counted by the server's `usage` where it gives one, else by the model's tokenizer over the answer's text,
else one per event, and every trace says which. The counting happens after the answer's last byte, whose arrival is
the request's end: the client's own work is never the server's latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, ServerReport, auth_headers, tls_context
from serving.clients.http1 import Http1Client, HttpStream, build_request
from serving.clients.outcomes import Outcome, RequestError
from serving.workloads.generative.api import Answer, PinOutput, RequestFormat, read_body, read_stream, request_body
from serving.workloads.generative.prompts import Prompt, PromptSource, pool_stats, prompt_pool
from serving.workloads.generative.tokens import CountedBy, TokenTrace


@dataclass(frozen=True)
class OpenAISpec(ClientSpec):
    """A client of an OpenAI-compatible server: `url` its base (http://HOST:PORT, the API under /v1), `inputs` the
    `PromptSource` of its conversations, `input_format` a `RequestFormat`."""

    pin_output: str = PinOutput.NONE  # PinOutput, as the server's check settled it (never `auto` here)
    include_usage: bool = True  # ask a streamed answer for its usage (stream_options.include_usage)
    tokenizer: str = ""  # the model's tokenizer folder on the client's node, to count tokens without usage


class PromptPoolStats(NamedTuple):
    """What a generative client's requests carry (the image clients' `PoolStats` counterpart)."""

    distinct_requests: int
    figures: dict[str, float]

    def metrics(self) -> dict[str, float]:
        return {"distinct_requests": float(self.distinct_requests), **self.figures}


class OpenAIClient(InferenceClient):
    spec: OpenAISpec

    def __init__(self, spec: OpenAISpec) -> None:
        super().__init__(spec)
        self.format = RequestFormat(spec.input_format)
        self._http: Http1Client | None = None
        self._requests: list[bytes] = []

    @cached_property
    def pool(self) -> list[Prompt]:  # type: ignore[override] - a generative client's requests are conversations
        source = self.spec.inputs
        if not isinstance(source, PromptSource):
            raise TypeError(f"a generative client's inputs are a PromptSource, not {type(source).__name__}")
        return list(prompt_pool(source))

    @property
    def pool_stats(self) -> PromptPoolStats:  # type: ignore[override]
        figures = pool_stats(self.pool)
        figures["payload_bytes"] = float(np.mean([len(self._body(p)) for p in self.pool]))
        return PromptPoolStats(len(self.pool), figures)

    @property
    def payload_bytes(self) -> int:
        return len(self._body(self.pool[0]))

    @property
    def url(self) -> str:
        return self.spec.url.rstrip("/") + self.format.path

    def _body(self, prompt: Prompt) -> bytes:
        return request_body(prompt, self.spec.model_name, self.format, PinOutput(self.spec.pin_output),
                            self.spec.include_usage)

    def _request_bytes(self, prompt: Prompt) -> bytes:
        headers = {"Content-Type": "application/json", **auth_headers(self.spec)}
        if self.format.streamed:
            headers["Accept"] = "text/event-stream"
        return build_request("POST", self.url, self._body(prompt), headers)

    @cached_property
    def _tokenizer(self):
        if not self.spec.tokenizer:
            return None
        from serving.workloads.generative.tokenizer import load_tokenizer

        return load_tokenizer(self.spec.tokenizer)

    async def open(self) -> None:
        self._requests = [self._request_bytes(prompt) for prompt in self.pool]
        self._http = Http1Client(self.url, self.spec.timeout_s, tls_context(self.spec), streaming=True)

    async def answer(self, index: int = 0) -> tuple[Answer, ServerReport]:
        """Send request `index` of the pool; its answer and what it recorded. Raises `RequestError` with the
        outcome's class on an error status, a stream cut or carrying an error, an answer that does not parse."""
        sent = time.perf_counter()
        response: HttpStream = await self._http.send(self._requests[index])  # type: ignore[assignment]
        if response.status != 200:
            raise RequestError(Outcome.HTTP_STATUS, response.status,
                               f"HTTP {response.status}: {response.body[:300].decode(errors='replace')}")
        streamed_back = bool(response.events) or response.headers.get("content-type", "").startswith(
            "text/event-stream")
        if self.format.streamed != streamed_back:
            asked = "a stream" if self.format.streamed else "a whole answer"
            raise RequestError(Outcome.INVALID, 0, f"asked for {asked} ({self.format}), the server answered "
                                                   f"{response.headers.get('content-type', 'no content type')}")
        if self.format.streamed:
            answer = read_stream(response.events, self.format.chat, response.complete)
        else:
            if not response.complete:
                raise RequestError(Outcome.TRUNCATED, 0, "the answer was cut: the connection closed before its body "
                                                         "ended")
            answer = read_body(response.body, self.format.chat)
        trace = self._trace(answer, self.pool[index], sent)
        return answer, ServerReport(float("nan"), answered_after_s=response.ended - sent, detail=trace)

    def _trace(self, answer: Answer, prompt: Prompt, sent: float) -> TokenTrace:
        if answer.completion_tokens is not None:
            output, counted_by = answer.completion_tokens, CountedBy.USAGE
        elif self._tokenizer is not None:
            output, counted_by = self._tokenizer.count(answer.text), CountedBy.TOKENIZER
        else:
            output, counted_by = len(answer.output_arrivals), CountedBy.EVENTS
        input_tokens = answer.prompt_tokens if answer.prompt_tokens is not None else prompt.input_tokens
        arrivals = np.asarray(answer.output_arrivals, dtype=np.float64) - sent
        return TokenTrace(arrivals, int(output), int(input_tokens), int(prompt.max_tokens), str(counted_by))

    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        _, report = await self.answer(index)
        return np.empty(0), report

    async def infer(self) -> ServerReport | None:
        index, self._next = self._next, (self._next + 1) % len(self.pool)
        return (await self.answer(index))[1]

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        return ("the compiled engine records one completion per request and no token: streamed answers are read by "
                "the Python client")

    async def close(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

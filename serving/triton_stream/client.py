"""The client of Triton's generate endpoint, streamed (`POST /v2/models/<model>/generate_stream`: one server-sent
event `data: {...}` per response of a decoupled model, here one per token). It is the OpenAI client
(`serving.workloads.generative.client`) with another body and another reading of the events: the same prompt pool,
the same HTTP/1.1 streaming client timing every event's arrival (`serving.clients.http1`), the same `TokenTrace`s
(tokens counted by the server where its last response says them, `num_output_tokens`, else by the model's tokenizer,
else one per event).

A body is the model's inputs by name, as Triton's generate extension maps them: `text_input` (the prompt; for a chat
request the conversation as a JSON list of {"role", "content"} with `apply_chat_template: true`, rendered by the
server's tokenizer), `max_tokens`, `ignore_eos`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from serving.clients.base import ServerReport
from serving.clients.http1 import HttpStream
from serving.clients.outcomes import Outcome, RequestError
from serving.workloads.generative.api import Answer, PinOutput
from serving.workloads.generative.client import OpenAIClient, OpenAISpec
from serving.workloads.generative.prompts import Prompt

# An event with more than a token's text (the last response's counts, an error): parsed whole; any other event is a
# token, only scanned (its text parsed when `Answer.text` is read), as the OpenAI stream's reading does.
_MORE_THAN_OUTPUT = re.compile(rb'"(?:num_output_tokens|num_input_tokens|error)"\s*:')
_OUTPUT = re.compile(rb'"text_output"\s*:')


@dataclass(frozen=True)
class TritonGenerateSpec(OpenAISpec):
    """A client of a Triton model's generate_stream: `url` the server's HTTP base (http://HOST:PORT), `model_name`
    the model in its repository."""


@dataclass
class GenerateAnswer(Answer):
    """An answer of generate_stream: its output parts are events' raw data, or text."""

    @property
    def text(self) -> str:
        return "".join(part if isinstance(part, str) else str(json.loads(part).get("text_output") or "")
                       for part in self.output)


def _error(data: bytes) -> str | None:
    try:
        message = json.loads(data)
    except ValueError as exc:
        raise RequestError(Outcome.INVALID, 0, f"an event that is not JSON: {data[:200]!r}") from exc
    if not isinstance(message, dict):
        raise RequestError(Outcome.INVALID, 0, f"an event that is not a JSON object: {data[:200]!r}")
    return str(message["error"])[:300] if "error" in message else None


def read_generate_stream(events: list[tuple[float, bytes]], complete: bool) -> GenerateAnswer:
    """A generate_stream's answer: every event with `text_output` one token (its arrival kept), the last response's
    `num_input_tokens` / `num_output_tokens` the server's counts. RequestError when an event carries an error
    (`stream_error`) or the connection closed before the stream ended (`truncated`)."""
    answer = GenerateAnswer([], [], chat=False)
    for arrived, data in events:
        if _MORE_THAN_OUTPUT.search(data) is None:
            if _OUTPUT.search(data) is not None:
                answer.output_arrivals.append(arrived)
                answer.output.append(data)
            continue
        error = _error(data)
        if error is not None:
            raise RequestError(Outcome.STREAM_ERROR, 0, f"an error event after {len(answer.output_arrivals)} "
                                                        f"tokens: {error}")
        message = json.loads(data)
        if message.get("text_output"):  # a last response that also carries a token
            answer.output_arrivals.append(arrived)
            answer.output.append(str(message["text_output"]))
        if isinstance(message.get("num_input_tokens"), int):
            answer.prompt_tokens = message["num_input_tokens"]
        if isinstance(message.get("num_output_tokens"), int):
            answer.completion_tokens = message["num_output_tokens"]
            answer.finish_reason = "final"
    if not complete:
        raise RequestError(Outcome.TRUNCATED, 0, f"the stream was cut: the connection closed after {len(events)} "
                                                 f"events ({len(answer.output_arrivals)} tokens) before it ended")
    return answer


def generate_body(prompt: Prompt, chat: bool, pin: PinOutput) -> bytes:
    """The JSON body of one request: the model's inputs by name."""
    if chat:
        conversation = [{"role": role, "content": content} for role, content in prompt.messages]
        body: dict = {"text_input": json.dumps(conversation), "apply_chat_template": True}
    else:
        body = {"text_input": prompt.text}
    body["max_tokens"] = prompt.max_tokens
    if pin is PinOutput.IGNORE_EOS:
        body["ignore_eos"] = True
    return json.dumps(body, separators=(",", ":")).encode()


class TritonGenerateClient(OpenAIClient):
    spec: TritonGenerateSpec

    @property
    def url(self) -> str:
        return f"{self.spec.url.rstrip('/')}/v2/models/{self.spec.model_name}/generate_stream"

    def _body(self, prompt: Prompt) -> bytes:
        return generate_body(prompt, self.format.chat, PinOutput(self.spec.pin_output))

    async def answer(self, index: int = 0) -> tuple[Answer, ServerReport]:
        """Send request `index` of the pool; its answer and what it recorded. Raises `RequestError` with the
        outcome's class on an error status, a stream cut or carrying an error."""
        if not self.format.streamed:
            raise RequestError(Outcome.INVALID, 0, f"{self.format}: generate_stream answers as a stream only")
        sent = time.perf_counter()
        response: HttpStream = await self._http.send(self._requests[index])  # type: ignore[union-attr,assignment]
        if response.status != 200:  # Triton says why in an event (an event stream) or the body
            detail = next((e for e in (_safe_error(data) for _, data in response.events) if e), None) \
                or response.body[:300].decode(errors="replace")
            raise RequestError(Outcome.HTTP_STATUS, response.status, f"HTTP {response.status}: {detail}")
        answer = read_generate_stream(response.events, response.complete)
        trace = self._trace(answer, self.pool[index], sent)
        return answer, ServerReport(float("nan"), answered_after_s=response.ended - sent, detail=trace)


def _safe_error(data: bytes) -> str | None:
    try:
        return _error(data)
    except RequestError:
        return data[:300].decode(errors="replace")

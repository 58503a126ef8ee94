"""The OpenAI-compatible API as tierbench speaks it: its request formats (chat or completions, streamed as
server-sent events or answered whole), the body of each request, and what an answer says of its tokens.

vLLM, SGLang, TGI, TensorRT-LLM's server, llama.cpp's, `transformers serve` and Ray Serve LLM all take these bodies.
The output length is pinned where the server allows (`ignore_eos`, or `min_tokens` equal to `max_tokens`): a model
that stops early serves fewer tokens than asked, and every answer records the length it actually served.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from serving.clients.outcomes import Outcome, RequestError
from serving.workloads.generative.prompts import Prompt


class RequestFormat(StrEnum):
    """Which API a request uses and whether its answer streams (the trial's `input_format`)."""

    CHAT_STREAM = "chat_stream"  # /v1/chat/completions, streamed: every token timed
    COMPLETIONS_STREAM = "completions_stream"  # /v1/completions, streamed
    CHAT = "chat"  # /v1/chat/completions, the answer whole: end-to-end latency and tokens/s, no token timing
    COMPLETIONS = "completions"  # /v1/completions, the answer whole

    @property
    def chat(self) -> bool:
        return self in (RequestFormat.CHAT, RequestFormat.CHAT_STREAM)

    @property
    def streamed(self) -> bool:
        return self in (RequestFormat.CHAT_STREAM, RequestFormat.COMPLETIONS_STREAM)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"


class PinOutput(StrEnum):
    """How a request asks for exactly `max_tokens` tokens (`backends.<entry>.pin_output`)."""

    AUTO = "auto"  # the first of ignore_eos, min_tokens the server takes (asked before the trials), else none
    IGNORE_EOS = "ignore_eos"  # vLLM, SGLang, TensorRT-LLM: keep going past the end-of-sequence token
    MIN_TOKENS = "min_tokens"  # vLLM, llama.cpp: min_tokens = max_tokens
    NONE = "none"  # max_tokens alone: the model may stop early (the served lengths say by how much)


def request_body(prompt: Prompt, model: str, request_format: RequestFormat, pin: PinOutput,
                 include_usage: bool = True) -> bytes:
    """The JSON body of one request."""
    body: dict = {"model": model, "max_tokens": prompt.max_tokens}
    if request_format.chat:
        body["messages"] = [{"role": role, "content": content} for role, content in prompt.messages]
    else:
        body["prompt"] = prompt.text
    if request_format.streamed:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    if pin is PinOutput.IGNORE_EOS:
        body["ignore_eos"] = True
    elif pin is PinOutput.MIN_TOKENS:
        body["min_tokens"] = prompt.max_tokens
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class Answer:
    """What one answer said: the arrival of each event that carried output (streamed: one per event with text;
    whole: none) and that output, the server's token counts where it gave them, and why it stopped."""

    output_arrivals: list[float]  # perf_counter of each event that carried output
    output: list[str | bytes]  # each of those events' text, or its raw data where it was not parsed (see `text`)
    chat: bool = True
    prompt_tokens: int | None = None  # the server's `usage`
    completion_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        """The answer's text (the events the stream's reading only scanned are parsed here, when it is asked for)."""
        return "".join(part if isinstance(part, str) else _event_text(part, self.chat) for part in self.output)


# An event with more than output: the usage, a finish reason, an error (parsed whole); else one carrying output, a
# non-empty string as its content, text or reasoning. Both scan the raw JSON: a quote inside a JSON string is
# escaped, so these keys only match the event's own (or a whole string value that reads so, which only costs a
# parse). Scanning an event costs ~2 µs on a slow core, parsing it as JSON ~7 µs: most of the client's budget per
# token (benchmarks/stream_client_cost.py).
_MORE_THAN_OUTPUT = re.compile(rb'"(?:usage"\s*:\s*\{|finish_reason"\s*:\s*"|error"\s*:)')
_OUTPUT = re.compile(rb'"(?:content|text|reasoning_content|reasoning)"\s*:\s*"(?!")')


def _choice_text(choice: dict, chat: bool) -> str:
    if chat:
        part = choice.get("delta") or choice.get("message") or {}
        # reasoning models stream their reasoning first: the user waits on it as on any other token
        return (part.get("content") or "") + (part.get("reasoning_content") or part.get("reasoning") or "")
    return choice.get("text") or ""


def _event_text(data: bytes, chat: bool) -> str:
    return "".join(_choice_text(choice, chat) for choice in json.loads(data).get("choices") or ())


def _read_usage(answer: Answer, message: dict) -> None:
    usage = message.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            answer.prompt_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            answer.completion_tokens = usage["completion_tokens"]


def _error_text(message: dict) -> str:
    error = message.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    return str(error)[:300]


def _parse(data: bytes) -> dict:
    try:
        message = json.loads(data)
    except ValueError as exc:
        raise RequestError(Outcome.INVALID, 0, f"an event that is not JSON: {data[:200]!r}") from exc
    if not isinstance(message, dict):
        raise RequestError(Outcome.INVALID, 0, f"an event that is not a JSON object: {data[:200]!r}")
    return message


def read_stream(events: list[tuple[float, bytes]], chat: bool, complete: bool) -> Answer:
    """An event stream's answer; RequestError when it carried an error event (`stream_error`) or ended before the
    answer finished (`truncated`: the connection closed or the body ended without `[DONE]` or a finish reason).
    Events that only carry output are scanned, not parsed (`_OUTPUT`): their text is parsed if `Answer.text` is read."""
    answer = Answer([], [], chat)
    done = False
    for arrived, data in events:
        if data == b"[DONE]":
            done = True
        elif _MORE_THAN_OUTPUT.search(data) is None:
            if _OUTPUT.search(data) is not None:
                answer.output_arrivals.append(arrived)
                answer.output.append(data)
        else:
            message = _parse(data)
            if "error" in message:
                raise RequestError(Outcome.STREAM_ERROR, 0, f"an error event after {len(answer.output_arrivals)} "
                                                            f"events with output: {_error_text(message)}")
            for choice in message.get("choices") or ():
                text = _choice_text(choice, chat)
                if text:
                    answer.output_arrivals.append(arrived)
                    answer.output.append(text)
                if choice.get("finish_reason"):
                    answer.finish_reason = str(choice["finish_reason"])
            _read_usage(answer, message)
    if not (done or (complete and answer.finish_reason)):
        how = "the connection closed" if not complete else "the body ended"
        raise RequestError(Outcome.TRUNCATED, 0, f"the stream was cut: {how} after {len(events)} events "
                                                 f"({len(answer.output_arrivals)} with output) before the answer "
                                                 "finished")
    return answer


def read_body(body: bytes, chat: bool) -> Answer:
    """A whole (not streamed) answer."""
    try:
        message = json.loads(body)
        choice = message["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RequestError(Outcome.INVALID, 0, f"an answer without choices: {body[:200]!r}") from exc
    answer = Answer([], [_choice_text(choice, chat)], chat, finish_reason=choice.get("finish_reason"))
    _read_usage(answer, message)
    return answer

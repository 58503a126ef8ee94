"""`kind=openai`: an OpenAI-compatible API (vLLM, SGLang, TGI, TensorRT-LLM's server, llama.cpp's, `transformers
serve`, Ray Serve LLM), measured by the generative workload's client (`serving.workloads.generative.client`).

Before any trial it is asked: does `/v1/models` list the model; which way of pinning the output length does it take
(`ignore_eos`, else `min_tokens`: a server that refuses a field it does not know answers 400 or 422); does a stream
report its usage (else tokens are counted with the model's tokenizer, and without one the sweep is refused).
"""

from __future__ import annotations

import json
from typing import Any

from serving.clients.base import ClientSpec
from serving.endpoint.kinds import EndpointKind, EndpointModel
from serving.endpoint.probe import EndpointError, fetch, refused
from serving.endpoint.settings import EndpointSettings
from serving.workloads.generative.api import PinOutput, RequestFormat, read_body, read_stream
from serving.workloads.generative.client import OpenAISpec
from serving.workloads.generative.prompts import Prompt

CLIENT = "serving.workloads.generative.client.OpenAIClient"
PROBE = Prompt(messages=(("user", "Say hello."),), text="user: Say hello.\nassistant:", input_tokens=-1, max_tokens=2)


def _events(body: bytes) -> list[tuple[float, bytes]]:
    """The `data` of each event of a whole event-stream body (the probe reads it at once: no timing)."""
    events = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[6:] if line[5:6] == b" " else line[5:] for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            events.append((0.0, b"\n".join(data)))
    return events


class OpenAIKind(EndpointKind):
    name = "openai"
    clients = {("http", str(f)): CLIENT for f in RequestFormat}
    health_path = "/v1/models"
    spec_kind = OpenAISpec

    def client_url(self, settings: EndpointSettings, transport: str, model: str) -> str:
        return settings.url.rstrip("/")

    def check(self, settings: EndpointSettings, spec: ClientSpec, name: str, input_shape: tuple[int, ...],
              timeout_s: float, input_formats: tuple[str, ...] = ()) -> EndpointModel:
        base = settings.url.rstrip("/")
        listed = self._models(base, spec, name, timeout_s)
        if spec.model_name not in listed:
            shown = ", ".join(repr(m) for m in sorted(listed)[:10]) or "none"
            raise EndpointError(f"backends.{name}.model_name={spec.model_name!r} (else model.name): {base}/v1/models "
                                f"lists no model of that name; it lists {shown}: give one of them with "
                                f"backends.{name}.model_name=NAME")
        formats = [RequestFormat(f) for f in input_formats] or [RequestFormat.CHAT_STREAM]
        pin = self._pin(settings, spec, name, base, formats[0], timeout_s)
        usage = None
        streamed = next((f for f in formats if f.streamed), None)
        if streamed is not None:
            usage = self._stream_usage(spec, name, base, streamed, pin, timeout_s)
        owner = listed[spec.model_name]
        params = {"endpoint_pin_output": str(pin), **({"endpoint_stream_usage": usage} if usage is not None else {})}
        return EndpointModel(spec.model_name, f"OpenAI-compatible ({owner})" if owner else "OpenAI-compatible",
                             params=params, pin_output=str(pin), stream_usage=usage)

    def _models(self, base: str, spec: ClientSpec, name: str, timeout_s: float) -> dict[str, str]:
        """The models `/v1/models` lists, each with its `owned_by`."""
        status, body = fetch(f"{base}/v1/models", spec, name, timeout_s)
        refused(status, name, spec, base)
        if status != 200:
            raise EndpointError(f"backends.{name}.url: {base}/v1/models answered HTTP {status} "
                                f"({body[:200].decode(errors='replace')!r}): give the base URL of an OpenAI-compatible "
                                "server, without /v1 (e.g. http://10.0.0.5:8000)")
        try:
            data = json.loads(body)["data"]
            return {str(m["id"]): str(m.get("owned_by") or "") for m in data}
        except (ValueError, KeyError, TypeError) as exc:
            raise EndpointError(f"backends.{name}.url: {base}/v1/models answered 200 but not with a list of models "
                                f"({type(exc).__name__}: {exc}): is it an OpenAI-compatible server?") from None

    def _post(self, spec: ClientSpec, name: str, base: str, request_format: RequestFormat, pin: PinOutput,
              timeout_s: float, stream: bool = False) -> tuple[int, bytes]:
        from serving.workloads.generative.api import request_body

        chosen = request_format if not stream else (RequestFormat.CHAT_STREAM if request_format.chat
                                                    else RequestFormat.COMPLETIONS_STREAM)
        if not stream and request_format.streamed:
            chosen = RequestFormat.CHAT if request_format.chat else RequestFormat.COMPLETIONS
        body = request_body(PROBE, spec.model_name, chosen, pin)
        status, answer = fetch(f"{base}{chosen.path}", spec, name, timeout_s, method="POST", body=body)
        refused(status, name, spec, base)
        return status, answer

    def _pin(self, settings: EndpointSettings, spec: ClientSpec, name: str, base: str,
             request_format: RequestFormat, timeout_s: float) -> PinOutput:
        """The way of pinning the output length the server takes: the one asked for (refused with the server's
        words when it does not take it), or with `auto` the first it takes."""
        asked = PinOutput(settings.pin_output)
        tries = [PinOutput.IGNORE_EOS, PinOutput.MIN_TOKENS, PinOutput.NONE] if asked is PinOutput.AUTO else [asked]
        answers = []
        for pin in tries:
            status, body = self._post(spec, name, base, request_format, pin, timeout_s)
            if status == 200:
                try:
                    read_body(body, request_format.chat)
                except Exception as exc:  # noqa: BLE001 - an answer we cannot read: say what came
                    raise EndpointError(f"backends.{name}: {base}{request_format.path} answered 200 with no choices "
                                        f"({exc}): is it an OpenAI-compatible server?") from None
                return pin
            answers.append(f"{pin}: HTTP {status} {body[:160].decode(errors='replace')!r}")
            if status not in (400, 422):  # not a refused field: the server cannot answer at all
                break
        raise EndpointError(f"backends.{name}: {base}{request_format.path} did not answer a 2-token request for model "
                            f"{spec.model_name!r} ({'; '.join(answers)})"
                            + (f": backends.{name}.pin_output=auto tries ignore_eos, min_tokens, none"
                               if asked is not PinOutput.AUTO else ""))

    def _stream_usage(self, spec: ClientSpec, name: str, base: str, request_format: RequestFormat, pin: PinOutput,
                      timeout_s: float) -> bool:
        """Whether a streamed answer ends with its usage (stream_options.include_usage)."""
        status, body = self._post(spec, name, base, request_format, pin, timeout_s, stream=True)
        if status != 200:
            raise EndpointError(f"backends.{name}: {base}{request_format.path} answered HTTP {status} to a streamed "
                                f"request ({body[:200].decode(errors='replace')!r}): measure it with "
                                "experiment.input_formats=[chat] or [completions] (answers whole)")
        try:
            answer = read_stream(_events(body), request_format.chat, complete=True)
        except Exception as exc:  # noqa: BLE001 - a stream we cannot read: say what came
            raise EndpointError(f"backends.{name}: {base}{request_format.path} streamed an answer tierbench cannot "
                                f"read ({exc})") from None
        return answer.completion_tokens is not None

    def spec_fields(self, settings: EndpointSettings, meta: EndpointModel | None, context: Any) -> dict[str, Any]:
        tokenizer = getattr(context.model, "tokenizer", None) or ""
        pin = meta.pin_output if meta is not None and meta.pin_output else PinOutput.NONE
        return {"pin_output": str(pin), "tokenizer": str(tokenizer)}


def usage_problem(meta: EndpointModel, name: str, tokenizer: str | None) -> str | None:
    """Why the sweep cannot count the tokens of a streamed answer: the server reports no usage in its stream and the
    model has no tokenizer folder."""
    if meta.stream_usage is False and not tokenizer:
        return (f"backends.{name}: the server reports no usage in a streamed answer (stream_options.include_usage), "
                "and model.tokenizer is null: give the model's tokenizer folder (model.tokenizer=DIR) so that "
                "tokens are counted, or measure answers whole (experiment.input_formats=[chat])")
    return None


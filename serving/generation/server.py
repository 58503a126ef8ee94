"""A generative server tierbench launches, reached through its OpenAI-compatible API by the generative workload's
client (`serving.workloads.generative.client`), as an endpoint of kind openai is. The server is ours, so nothing is
asked of it before the trials beyond being ready: it pins the output length with `ignore_eos` and reports usage in its
streams (vLLM's server, Ray Serve LLM and tierbench's own deployments all do)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from serving.backend import Backend, ServerHandle
from serving.clients.base import ClientSpec
from serving.generation.ceiling import TokenEngine
from serving.workloads.generative.api import PinOutput, RequestFormat
from serving.workloads.generative.client import OpenAISpec

CLIENT = "serving.workloads.generative.client.OpenAIClient"


class LanguageServerBackend(Backend):
    """A launched server of a language model speaking the OpenAI API over HTTP."""

    # How its requests pin the output length (the servers tierbench launches all take ignore_eos).
    pin_output: ClassVar[PinOutput] = PinOutput.IGNORE_EOS

    @property
    def served_name(self) -> str:
        """The name the server lists at /v1/models, and the requests name."""
        return self.context.model.name

    def token_engine(self) -> TokenEngine | None:
        """What generates the tokens inside this server on this node, as the token ceiling times it in-process
        (`serving.generation.ceiling`); None where nothing times it."""
        return None

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        if protocol != "http":
            return f"{protocol}: the OpenAI-compatible API is served over HTTP"
        if input_format not in tuple(str(f) for f in RequestFormat):
            return f"{input_format} is not a request of the generative workload ({[str(f) for f in RequestFormat]})"
        return None

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        spec = self._spec(CLIENT, handle.urls["http"], self.served_name, input_format, batch_size, kind=OpenAISpec)
        return replace(spec, pin_output=str(self.pin_output), include_usage=True)


def listed_models(base_url: str, timeout_s: float = 5.0) -> list[str]:
    """The models `<base_url>/v1/models` lists; OSError when it does not answer with a list."""
    with urllib.request.urlopen(f"{base_url.rstrip('/')}/v1/models", timeout=timeout_s) as answer:  # noqa: S310
        return [str(m["id"]) for m in json.loads(answer.read())["data"]]


def wait_listed(base_url: str, model: str, timeout_s: float, died: Callable[[], str | None] = lambda: None,
                what: str = "the server") -> float:
    """Wait until `base_url` lists `model` at /v1/models (a server loads its model before it lists it); returns the
    seconds waited. Raises with `died()`'s reason as soon as it says the server is gone, TimeoutError after
    `timeout_s`."""
    started = time.monotonic()
    last = "no answer yet"
    while True:
        reason = died()
        if reason:
            raise RuntimeError(f"{what} stopped before it served {model!r}: {reason}")
        try:
            names = listed_models(base_url)
            if model in names:
                return time.monotonic() - started
            last = f"it lists {names}"
        except (OSError, ValueError, KeyError, TypeError) as error:
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what} at {base_url} did not list {model!r} at /v1/models within {timeout_s:.0f} s "
                               f"({last}): raise start_timeout_s if it is still loading")
        time.sleep(0.5)

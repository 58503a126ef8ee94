"""The client of a decoupled Triton model over gRPC (protocol `grpc`): each request its own `ModelStreamInfer` stream
(`tritonclient.grpc.aio`'s `stream_infer`) on one channel, every response's arrival timed as it is read. The same
prompt pool, requests (the model's inputs by name, with their batch dimension) and `TokenTrace`s as the HTTP client
(`serving.triton_stream.client`): a response with `text_output` is a token, the last one's `num_input_tokens` /
`num_output_tokens` are the server's counts."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from serving.clients.base import ServerReport
from serving.clients.outcomes import Outcome, RequestError
from serving.triton_stream.client import GenerateAnswer, TritonGenerateClient
from serving.workloads.generative.api import Answer, PinOutput
from serving.workloads.generative.prompts import Prompt


def _scalar(value: Any, dtype: Any) -> np.ndarray:
    return np.array([[value]], dtype=dtype)  # [batch 1, 1]: the model batches (max_batch_size >= 1)


class TritonGrpcStreamClient(TritonGenerateClient):
    """`url`: the server's gRPC address (HOST:PORT)."""

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self._grpc: Any = None
        self._inputs: list[list[Any]] = []

    @property
    def url(self) -> str:
        return self.spec.url.removeprefix("grpc://")

    def _tensors(self, prompt: Prompt) -> list[Any]:
        import tritonclient.grpc.aio as grpcclient

        if self.format.chat:
            text = json.dumps([{"role": role, "content": content} for role, content in prompt.messages])
        else:
            text = prompt.text
        values = {"text_input": (_scalar(text.encode(), np.object_), "BYTES"),
                  "max_tokens": (_scalar(prompt.max_tokens, np.int32), "INT32"),
                  "ignore_eos": (_scalar(PinOutput(self.spec.pin_output) is PinOutput.IGNORE_EOS, np.bool_), "BOOL"),
                  "apply_chat_template": (_scalar(self.format.chat, np.bool_), "BOOL")}
        tensors = []
        for name, (array, datatype) in values.items():
            tensor = grpcclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        return tensors

    async def open(self) -> None:
        import tritonclient.grpc.aio as grpcclient

        self._inputs = [self._tensors(prompt) for prompt in self.pool]
        self._grpc = grpcclient.InferenceServerClient(self.url)

    async def answer(self, index: int = 0) -> tuple[Answer, ServerReport]:
        """Send request `index` of the pool on a stream of its own; its answer and what it recorded. Raises
        `RequestError` when a response carries an error or the stream ends before the last response."""
        if not self.format.streamed:
            raise RequestError(Outcome.INVALID, 0, f"{self.format}: a decoupled model answers as a stream only")
        request = {"model_name": self.spec.model_name, "inputs": self._inputs[index], "request_id": str(index)}

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        answer = GenerateAnswer([], [], chat=False)
        sent = time.perf_counter()
        ended = sent
        final = False
        async for result, error in self._grpc.stream_infer(requests(), stream_timeout=self.spec.timeout_s):
            ended = time.perf_counter()
            if error is not None:
                raise RequestError(Outcome.STREAM_ERROR, 0, f"an error response after {len(answer.output_arrivals)} "
                                                            f"tokens: {str(error)[:300]}")
            counted = result.as_numpy("num_output_tokens")
            text = result.as_numpy("text_output")
            if counted is None:
                answer.output_arrivals.append(ended)
                answer.output.append(_text(text))
                continue
            if _text(text):  # a last response that also carries a token
                answer.output_arrivals.append(ended)
                answer.output.append(_text(text))
            inputs = result.as_numpy("num_input_tokens")
            answer.prompt_tokens = int(inputs.reshape(-1)[0]) if inputs is not None else None
            answer.completion_tokens = int(counted.reshape(-1)[0])
            answer.finish_reason = "final"
            final = True
        if not final:
            raise RequestError(Outcome.TRUNCATED, 0, f"the stream ended after {len(answer.output_arrivals)} tokens "
                                                     "without the last response")
        trace = self._trace(answer, self.pool[index], sent)
        return answer, ServerReport(float("nan"), answered_after_s=ended - sent, detail=trace)

    async def close(self) -> None:
        if self._grpc is not None:
            client, self._grpc = self._grpc, None
            await client.close()


def _text(array: np.ndarray | None) -> str:
    if array is None or array.size == 0:
        return ""
    value = array.reshape(-1)[0]
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

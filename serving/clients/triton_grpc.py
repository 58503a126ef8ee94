"""Triton over gRPC: through the socket, tritonclient's protocol (`service_pb2`) on a `grpc.aio` channel with the
request serialized once; through shared memory, `tritonclient.grpc.aio`.

`tritonclient.grpc.aio.InferenceServerClient.infer` rebuilds and re-serializes the ~600 KB request on every
call (~0.4 ms of client CPU per request here): the prepared request keeps the client far from being the
bottleneck (the study's Python gRPC client was).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.clients.base import ServerReport
from serving.clients.triton_base import TritonClient
from serving.clients.wire import WireRequest, grpc_message, grpc_wire

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def response_logits(response: Any) -> np.ndarray:
    """The one output of a `ModelInferResponse`, from its raw_output_contents."""
    (output,) = response.outputs
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(tuple(output.shape))


class TritonGrpcClient(TritonClient):
    _channel: Any = None

    def _connect(self) -> Any:
        import tritonclient.grpc.aio as grpc_aio

        return grpc_aio.InferenceServerClient(self.spec.url)

    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        import tritonclient.grpc as grpc

        return grpc.InferInput(name, shape, datatype)

    def _set_input_data(self, infer_input: Any, data: np.ndarray) -> None:
        infer_input.set_data_from_numpy(data)

    def _requested_output(self, name: str) -> Any:
        import tritonclient.grpc as grpc

        return grpc.InferRequestedOutput(name)

    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in result.get_output(name).shape)

    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any:
        return await self._client.infer(self.spec.model_name, inputs, outputs=outputs,
                                        client_timeout=self.spec.timeout_s)

    def _request_bytes(self) -> bytes:
        """The serialized ModelInferRequest: the tensor as raw_input_contents, as tritonclient sends it."""
        from tritonclient.grpc import service_pb2

        return service_pb2.ModelInferRequest(
            model_name=self.spec.model_name,
            inputs=[service_pb2.ModelInferRequest.InferInputTensor(
                name=self.spec.input_name, datatype=self._datatype, shape=list(self._data.shape))],
            outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=self.spec.output_name)],
            raw_input_contents=[self._raw],
        ).SerializeToString()

    def wire_request(self) -> WireRequest:
        return grpc_wire(self.spec.url, MODEL_INFER, self._request_bytes(), self.spec.grpc_metadata)

    def check_wire_response(self, body: bytes) -> None:
        from tritonclient.grpc import service_pb2

        self.check_logits(response_logits(service_pb2.ModelInferResponse.FromString(grpc_message(body))))

    async def _open_prepared(self) -> None:
        import grpc
        from tritonclient.grpc import service_pb2

        self._request = self._request_bytes()
        self._channel = grpc.aio.insecure_channel(
            self.spec.url, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        # No request serializer: the request goes out as the bytes built above.
        self._call = self._channel.unary_unary(
            MODEL_INFER, response_deserializer=service_pb2.ModelInferResponse.FromString)

    async def _send_prepared(self) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._call(self._request, timeout=self.spec.timeout_s,
                                    metadata=self.spec.grpc_metadata or None)
        return response_logits(response), None

    async def _close_prepared(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

"""Triton over gRPC (`tritonclient.grpc.aio`), optionally via shared memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.clients.triton_base import TritonClient


class TritonGrpcClient(TritonClient):
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

"""Triton over gRPC (`tritonclient.grpc.aio`)."""

from __future__ import annotations

from serving.clients.base import ClientSpec, InferenceClient, tensor_batch


class TritonGrpcClient(InferenceClient):
    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format != "tensor":
            raise ValueError(f"TritonGrpcClient sends tensors, not {spec.input_format!r}")
        self._batch = tensor_batch(spec)
        self._client = None

    @property
    def payload_bytes(self) -> int:
        return self._batch.nbytes

    async def open(self) -> None:
        import tritonclient.grpc as grpc
        import tritonclient.grpc.aio as grpc_aio

        self._client = grpc_aio.InferenceServerClient(self.spec.url)
        self._inputs = [grpc.InferInput(self.spec.input_name, list(self._batch.shape), "FP32")]
        self._inputs[0].set_data_from_numpy(self._batch)
        self._outputs = [grpc.InferRequestedOutput(self.spec.output_name)]

    async def infer(self) -> None:  # server-side time comes from Triton's metrics endpoint
        result = await self._client.infer(
            self.spec.model_name, self._inputs, outputs=self._outputs, client_timeout=self.spec.timeout_s
        )
        self.check_logits(result.as_numpy(self.spec.output_name))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

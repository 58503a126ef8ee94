"""Triton over HTTP/REST with binary tensors (`tritonclient.http.aio`)."""

from __future__ import annotations

from serving.clients.base import ClientSpec, InferenceClient, tensor_batch


class TritonHttpClient(InferenceClient):
    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format != "tensor":
            raise ValueError(f"TritonHttpClient sends tensors, not {spec.input_format!r}")
        self._batch = tensor_batch(spec)
        self._client = None

    @property
    def payload_bytes(self) -> int:
        return self._batch.nbytes

    async def open(self) -> None:
        import tritonclient.http as http
        import tritonclient.http.aio as http_aio

        self._client = http_aio.InferenceServerClient(self.spec.url, conn_timeout=self.spec.timeout_s)
        self._inputs = [http.InferInput(self.spec.input_name, list(self._batch.shape), "FP32")]
        # Binary tensors: JSON tensors are ~50x slower and would measure the encoder.
        self._inputs[0].set_data_from_numpy(self._batch, binary_data=True)
        self._outputs = [http.InferRequestedOutput(self.spec.output_name, binary_data=True)]

    async def infer(self) -> None:  # server-side time comes from Triton's metrics endpoint
        result = await self._client.infer(self.spec.model_name, self._inputs, outputs=self._outputs)
        self.check_logits(result.as_numpy(self.spec.output_name))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

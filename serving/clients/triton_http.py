"""Triton over HTTP/REST with binary tensors: tritonclient's request body, built once, sent with aiohttp.

Binary tensors, not JSON (JSON tensors were ~50x slower). `tritonclient.http.aio` rebuilds the ~600 KB body on
every call; like perf_analyzer we build it once with tritonclient's own `generate_request_body` and parse the
reply with its `parse_response_body`.
"""

from __future__ import annotations

from serving.clients.base import ClientSpec, InferenceClient, tensor_batch

HEADER_LENGTH = "Inference-Header-Content-Length"


class TritonHttpClient(InferenceClient):
    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format != "tensor":
            raise ValueError(f"TritonHttpClient sends tensors, not {spec.input_format!r}")
        import tritonclient.http as http

        batch = tensor_batch(spec)
        inputs = [http.InferInput(spec.input_name, list(batch.shape), "FP32")]
        inputs[0].set_data_from_numpy(batch, binary_data=True)
        outputs = [http.InferRequestedOutput(spec.output_name, binary_data=True)]
        self._body, json_size = http.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        self._headers = {"Content-Type": "application/octet-stream"}
        if json_size is not None:
            self._headers[HEADER_LENGTH] = str(json_size)
        self._url = f"http://{spec.url}/v2/models/{spec.model_name}/infer"
        self._payload_bytes = batch.nbytes
        self._session = None

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    async def open(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                              timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s))

    async def infer(self) -> None:  # server-side time comes from Triton's metrics endpoint
        import tritonclient.http as http

        async with self._session.post(self._url, data=self._body, headers=self._headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300].decode(errors='replace')}")
            header_length = response.headers.get(HEADER_LENGTH)
        result = http.InferenceServerClient.parse_response_body(
            body, header_length=int(header_length) if header_length else None)
        self.check_logits(result.as_numpy(self.spec.output_name))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

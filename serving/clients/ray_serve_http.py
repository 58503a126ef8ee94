"""Ray Serve's HTTP ingress (aiohttp): JPEG bytes or raw float32 tensors, one request per batch.

Wire format (see serving/ray_serve/deployment.py): `Content-Type: image/jpeg` with the batch's JPEGs
concatenated and their lengths in `X-Image-Lengths`, or `application/octet-stream` with a C-order float32
tensor [N, C, H, W]. The response is the float32 logits [N, classes].
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, jpeg_batch, tensor_batch

JPEG_CONTENT_TYPE = "image/jpeg"
TENSOR_CONTENT_TYPE = "application/octet-stream"
LENGTHS_HEADER = "X-Image-Lengths"


def encode_request(spec: ClientSpec) -> tuple[bytes, dict[str, str]]:
    if spec.input_format == "jpeg":
        images = jpeg_batch(spec)
        headers = {"Content-Type": JPEG_CONTENT_TYPE, LENGTHS_HEADER: ",".join(str(len(i)) for i in images)}
        return b"".join(images), headers
    return tensor_batch(spec).tobytes(), {"Content-Type": TENSOR_CONTENT_TYPE}


class RayServeHttpClient(InferenceClient):
    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        self._body, self._headers = encode_request(spec)
        self._session = None

    @property
    def payload_bytes(self) -> int:
        return len(self._body)

    async def open(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s),
        )

    async def predict(self) -> np.ndarray:
        async with self._session.post(self.spec.url, data=self._body, headers=self._headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300].decode(errors='replace')}")
        return np.frombuffer(body, dtype=np.float32).reshape(-1, self.spec.num_classes)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

"""Ray Serve's HTTP ingress (aiohttp): JPEG bytes or raw float32 tensors, one request per batch.

Wire format (see serving/ray_serve/deployment.py): `Content-Type: image/jpeg` with the batch's JPEGs
concatenated and their lengths in `X-Image-Lengths`, or `application/octet-stream` with a C-order float32
tensor [N, C, H, W]. The response is the float32 logits [N, classes].
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, ServerReport, jpeg_batch, tensor_batch
from serving.protocols import InputFormat

JPEG_CONTENT_TYPE = "image/jpeg"
TENSOR_CONTENT_TYPE = "application/octet-stream"
LENGTHS_HEADER = "X-Image-Lengths"
TIMING_HEADER = "Server-Timing"


def parse_server_timing(header: str | None) -> ServerReport | None:
    """The replica's own time (ms: the total of the `dur`s) and executed batch (`batch;desc=N`) from a
    `Server-Timing: preprocess;dur=1.2, infer;dur=8.5, batch;desc=8` header."""
    if not header:
        return None
    total, executed = 0.0, None
    for metric in header.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if key == "dur":
                total += float(value)
            elif key == "desc" and name == "batch":
                executed = int(value)
    return ServerReport(total, executed)


def encode_request(spec: ClientSpec) -> tuple[bytes, dict[str, str]]:
    if spec.input_format == InputFormat.JPEG:
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

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        async with self._session.post(self.spec.url, data=self._body, headers=self._headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300].decode(errors='replace')}")
            timing = response.headers.get(TIMING_HEADER)
        return np.frombuffer(body, dtype=np.float32).reshape(-1, self.spec.num_classes), parse_server_timing(timing)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

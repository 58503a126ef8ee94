"""Ray Serve's HTTP ingress, through the project's HTTP/1.1 client (`http1.py`, as Triton's HTTP): JPEG bytes or
raw float32 tensors, one request per batch.

Wire format (see serving/ray_serve/deployment.py): `Content-Type: image/jpeg` with the batch's JPEGs
concatenated and their lengths in `X-Image-Lengths`, or `application/octet-stream` with a C-order float32
tensor [N, C, H, W]. The response is the float32 logits [N, classes].
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, ServerReport, jpeg_batch, tensor_batch
from serving.clients.http1 import Http1Client, build_request
from serving.clients.wire import WireRequest, http1_wire
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
        body, headers = encode_request(spec)
        self._payload_bytes = len(body)
        self._request = build_request("POST", spec.url, body, headers)
        self._http: Http1Client | None = None

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    async def open(self) -> None:
        self._http = Http1Client(self.spec.url, self.spec.timeout_s)

    def _logits(self, body: bytes) -> np.ndarray:
        return np.frombuffer(body, dtype=np.float32).reshape(-1, *self.spec.output_shape)

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._http.send(self._request)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.body[:300].decode(errors='replace')}")
        return self._logits(response.body), parse_server_timing(response.headers.get(TIMING_HEADER.lower()))

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        return None

    def wire_request(self) -> WireRequest:
        return http1_wire(self.spec.url, self._request)

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(self._logits(body))

    async def close(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

"""Ray Serve's HTTP ingress, spoken in the Open Inference Protocol as Triton's HTTP is: the same client
(`TritonHttpClient`: tritonclient's request body with the binary tensor extension, built once and sent as pre-built
bytes by `http1.py`), posting to `<route prefix>/v2/models/<model>/infer`; the replica's `Server-Timing` header
(its own time and the forward pass's images) comes back with every response.

The route prefix itself still takes the format from before the OIP (serving/ray_serve/deployment.py), which
`encode_request` builds (tests and wrk use it): `Content-Type: image/jpeg` with the batch's JPEGs concatenated and
their lengths in `X-Image-Lengths`, or `application/octet-stream` with a C-order float32 tensor [N, C, H, W]; the
response is the float32 logits [N, classes].
"""

from __future__ import annotations

from serving.clients.base import ClientSpec, jpeg_batch, parse_server_timing, tensor_batch
from serving.clients.triton_http import TritonHttpClient
from serving.protocols import InputFormat

__all__ = ["JPEG_CONTENT_TYPE", "LENGTHS_HEADER", "TENSOR_CONTENT_TYPE", "TIMING_HEADER", "RayServeHttpClient",
           "encode_request", "parse_server_timing"]

JPEG_CONTENT_TYPE = "image/jpeg"
TENSOR_CONTENT_TYPE = "application/octet-stream"
LENGTHS_HEADER = "X-Image-Lengths"
TIMING_HEADER = "Server-Timing"


def encode_request(spec: ClientSpec) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a request to the route prefix itself (the format from before the OIP)."""
    if spec.input_format == InputFormat.JPEG:
        images = jpeg_batch(spec)
        headers = {"Content-Type": JPEG_CONTENT_TYPE, LENGTHS_HEADER: ",".join(str(len(i)) for i in images)}
        return b"".join(images), headers
    return tensor_batch(spec).tobytes(), {"Content-Type": TENSOR_CONTENT_TYPE}


class RayServeHttpClient(TritonHttpClient):
    """OIP over HTTP to the app's route prefix (`spec.url`: `http://host:port/<prefix>`); `spec.model_name` is
    `<model>` or `<model>_jpeg`. Serve takes tensors over the socket only."""

    def __init__(self, spec: ClientSpec) -> None:
        if spec.shared_memory != "none":
            raise ValueError(f"RayServeHttpClient: {spec.shared_memory} shared memory is a Triton feature")
        super().__init__(spec)

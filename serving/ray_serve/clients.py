"""Ray Serve's clients: the Open Inference Protocol clients every OIP server shares (`serving.oip.clients`). Over HTTP
to `<route prefix>/v2/models/<model>/infer`, the replica's `Server-Timing` header (its own time and the forward pass's
images) coming back with every response; over gRPC with the app's name in the `application` metadata
(`spec.grpc_metadata`), which Serve's proxy routes by, the Server-Timing coming back as trailing metadata.

The route prefix itself still takes the formats from before the OIP (serving/ray_serve/deployment.py), which
`encode_request` builds (tests use it): `Content-Type: image/jpeg` with the batch's JPEGs concatenated and
their lengths in `X-Image-Lengths`, or `application/octet-stream` with a C-order float32 tensor [N, C, H, W]; the
response is the float32 logits [N, classes]. `build_request` builds a request of the gRPC service from before the OIP,
`tierbench.ImageClassifier/Classify` (serving/ray_serve/proto/classifier.proto), which the deployment still answers.
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import TIMING_HEADER, ClientSpec, ServerReport, jpeg_batch, parse_server_timing, tensor_batch
from serving.oip.clients import OipGrpcClient, OipHttpClient
from serving.workloads.image.formats import InputFormat

JPEG_CONTENT_TYPE = "image/jpeg"
TENSOR_CONTENT_TYPE = "application/octet-stream"
LENGTHS_HEADER = "X-Image-Lengths"
TIMING_METADATA = TIMING_HEADER.lower()  # gRPC metadata keys are lower case
CLASSIFY = "/tierbench.ImageClassifier/Classify"


def encode_request(spec: ClientSpec) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a request to the route prefix itself (the format from before the OIP)."""
    if spec.input_format == InputFormat.JPEG:
        images = jpeg_batch(spec)
        headers = {"Content-Type": JPEG_CONTENT_TYPE, LENGTHS_HEADER: ",".join(str(len(i)) for i in images)}
        return b"".join(images), headers
    return tensor_batch(spec).tobytes(), {"Content-Type": TENSOR_CONTENT_TYPE}


def build_request(spec: ClientSpec):
    """A `ClassifyRequest` of the service from before the OIP."""
    from serving.ray_serve.proto import classifier_pb2

    if spec.input_format == InputFormat.JPEG:
        return classifier_pb2.ClassifyRequest(jpegs=jpeg_batch(spec))
    if spec.input_format == InputFormat.TENSOR:
        batch = tensor_batch(spec)
        return classifier_pb2.ClassifyRequest(tensor=batch.tobytes(), shape=list(batch.shape))
    raise ValueError(f"build_request: input format {spec.input_format!r} (use tensor or jpeg)")


class RayServeHttpClient(OipHttpClient):
    """OIP over HTTP to the app's route prefix (`spec.url`: `http://host:port/<prefix>`); `spec.model_name` is
    `<model>` or `<model>_jpeg`."""


class RayServeGrpcClient(OipGrpcClient):
    """OIP over gRPC to Serve's proxy (or a replica's own port, direct ingress); `spec.model_name` is `<model>` or
    `<model>_jpeg`; the replica's Server-Timing read from the call's trailing metadata."""

    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        call = self._call(self._requests[index], timeout=self.spec.timeout_s, metadata=self.spec.grpc_metadata or None)
        response = await call
        trailing = await call.trailing_metadata()
        return self.response_outputs(response), parse_server_timing(trailing.get(TIMING_METADATA) if trailing else None)

"""Ray Serve's gRPC ingress, spoken in the Open Inference Protocol as Triton's gRPC is: the same client
(`TritonGrpcClient`: a `ModelInferRequest` serialized once, its tensor in raw_input_contents), with the app's name
in the `application` metadata (`spec.grpc_metadata`), which Serve's proxy routes by. The replica's Server-Timing
comes back as the call's `server-timing` trailing metadata.

`build_request` builds a request of the service from before the OIP, `tierbench.ImageClassifier/Classify`
(serving/ray_serve/proto/classifier.proto), which the deployment still answers.
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import ClientSpec, ServerReport, jpeg_batch, parse_server_timing, tensor_batch
from serving.clients.triton_grpc import TritonGrpcClient, response_logits
from serving.protocols import InputFormat

CLASSIFY = "/tierbench.ImageClassifier/Classify"
TIMING_METADATA = "server-timing"


def build_request(spec: ClientSpec):
    """A `ClassifyRequest` of the service from before the OIP."""
    from serving.ray_serve.proto import classifier_pb2

    if spec.input_format == InputFormat.JPEG:
        return classifier_pb2.ClassifyRequest(jpegs=jpeg_batch(spec))
    if spec.input_format == InputFormat.TENSOR:
        batch = tensor_batch(spec)
        return classifier_pb2.ClassifyRequest(tensor=batch.tobytes(), shape=list(batch.shape))
    raise ValueError(f"build_request: input format {spec.input_format!r} (use tensor or jpeg)")


class RayServeGrpcClient(TritonGrpcClient):
    """OIP over gRPC to Serve's proxy (or a replica's own port, direct ingress); `spec.model_name` is `<model>` or
    `<model>_jpeg`. Serve takes tensors over the socket only."""

    def __init__(self, spec: ClientSpec) -> None:
        if spec.shared_memory != "none":
            raise ValueError(f"RayServeGrpcClient: {spec.shared_memory} shared memory is a Triton feature")
        super().__init__(spec)

    async def _send_prepared(self) -> tuple[np.ndarray, ServerReport | None]:
        call = self._call(self._request, timeout=self.spec.timeout_s, metadata=self.spec.grpc_metadata or None)
        response = await call
        trailing = await call.trailing_metadata()
        return response_logits(response), parse_server_timing(trailing.get(TIMING_METADATA) if trailing else None)

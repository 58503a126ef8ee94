"""Ray Serve's gRPC ingress (`grpc.aio`): JPEG files or a raw float32 tensor, one request per batch.

The service is `tierbench.ImageClassifier/Classify` (serving/ray_serve/proto/classifier.proto); Serve's proxy
routes a call to the application named in the `application` metadata, here `spec.model_name`.
"""

from __future__ import annotations

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, ServerReport, jpeg_batch, tensor_batch
from serving.clients.ray_serve_http import parse_server_timing
from serving.clients.wire import WireRequest, grpc_message, grpc_wire
from serving.protocols import InputFormat

CLASSIFY = "/tierbench.ImageClassifier/Classify"


def build_request(spec: ClientSpec):
    from serving.ray_serve.proto import classifier_pb2

    if spec.input_format == InputFormat.JPEG:
        return classifier_pb2.ClassifyRequest(jpegs=jpeg_batch(spec))
    if spec.input_format == InputFormat.TENSOR:
        batch = tensor_batch(spec)
        return classifier_pb2.ClassifyRequest(tensor=batch.tobytes(), shape=list(batch.shape))
    raise ValueError(f"RayServeGrpcClient: input format {spec.input_format!r} (use tensor or jpeg)")


class RayServeGrpcClient(InferenceClient):
    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        self._request = build_request(spec)
        self._payload_bytes = sum(map(len, self._request.jpegs)) or len(self._request.tensor)
        self._metadata = (("application", spec.model_name),)
        self._channel = None

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    async def open(self) -> None:
        import grpc

        from serving.ray_serve.proto import classifier_pb2_grpc

        self._channel = grpc.aio.insecure_channel(self.spec.url, options=[("grpc.max_receive_message_length", -1),
                                                                          ("grpc.max_send_message_length", -1)])
        self._classify = classifier_pb2_grpc.ImageClassifierStub(self._channel).Classify

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        reply = await self._classify(self._request, metadata=self._metadata, timeout=self.spec.timeout_s)
        logits = np.frombuffer(reply.logits, dtype=np.float32).reshape(tuple(reply.shape))
        return logits, parse_server_timing(reply.server_timing)

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        return None

    def wire_request(self) -> WireRequest:
        return grpc_wire(self.spec.url, CLASSIFY, self._request.SerializeToString(), self._metadata)

    def check_wire_response(self, body: bytes) -> None:
        from serving.ray_serve.proto import classifier_pb2

        reply = classifier_pb2.ClassifyResponse.FromString(grpc_message(body))
        self.check_logits(np.frombuffer(reply.logits, dtype=np.float32).reshape(tuple(reply.shape)))

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

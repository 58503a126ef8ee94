"""TorchServe's clients: its native inference APIs, each request built once and sent as the same bytes every time.

REST: `POST <url>` (`http://host:port/predictions/<model>`) through the project's HTTP/1.1 client; `tensor` as an
`application/octet-stream` body, `jpeg` as `multipart/form-data` with one file field per image (image0..image<N-1>).
gRPC: `InferenceAPIsService/Predictions` on a `grpc.aio` channel, the `PredictionsRequest` serialized once, its input
map `{"tensor": bytes}` or `{"image0": jpeg, ...}`. The answer is the float32 outputs as raw bytes either way;
the handler's Server-Timing comes back as a REST header only (TorchServe's gRPC answers carry no metadata).
`jpeg_base64` (REST only) is the shared JSON client (`serving.clients.json_images.JsonImagesClient`) at the same URL.
`payload_bytes` counts the image data (the tensor, or the JPEG files), as every client does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.clients.base import (
    TIMING_HEADER,
    ClientSpec,
    InferenceClient,
    ServerReport,
    jpeg_batch,
    parse_server_timing,
    tensor_batch,
)
from serving.clients.http1 import Http1Client, build_request
from serving.clients.wire import WireRequest, grpc_message, grpc_wire, http1_wire
from serving.protocols import InputFormat
from serving.torchserve.payloads import PREDICTIONS, TENSOR_CONTENT_TYPE, TENSOR_KEY, image_key, outputs_of

BOUNDARY = "tierbench-torchserve-boundary"  # never inside a JPEG's bytes in practice; checked when building


def multipart_body(images: list[bytes]) -> tuple[bytes, str]:
    """A multipart/form-data body with one file field per image (image0..), and its content type."""
    marker = f"--{BOUNDARY}".encode()
    if any(marker in image for image in images):
        raise ValueError(f"an image contains the multipart boundary {BOUNDARY!r}")
    parts = [marker + b"\r\n" + (f'Content-Disposition: form-data; name="{image_key(i)}"; '
                                 f'filename="{image_key(i)}.jpg"\r\nContent-Type: image/jpeg\r\n\r\n').encode()
             + image + b"\r\n" for i, image in enumerate(images)]
    return b"".join(parts) + marker + b"--\r\n", f"multipart/form-data; boundary={BOUNDARY}"


class TorchServeClient(InferenceClient):
    """The request's inputs as TorchServe's APIs carry them; subclasses send them over REST or gRPC."""

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format == InputFormat.TENSOR:
            tensor = tensor_batch(spec)
            self._inputs = {TENSOR_KEY: tensor.tobytes()}
            self._payload_bytes = tensor.nbytes
        elif spec.input_format == InputFormat.JPEG:
            images = jpeg_batch(spec)
            self._inputs = {image_key(i): image for i, image in enumerate(images)}
            self._payload_bytes = sum(len(image) for image in images)
        else:
            raise ValueError(f"{type(self).__name__}: input format {spec.input_format!r} is not sent as binary "
                             "(jpeg_base64 goes through serving.clients.json_images.JsonImagesClient over REST)")

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        return None

    def outputs(self, body: bytes) -> np.ndarray:
        return outputs_of(body, self.spec.batch_size, self.spec.output_shape)


class TorchServeRestClient(TorchServeClient):
    """`POST /predictions/<model>` (`spec.url`)."""

    _http: Http1Client | None = None

    @property
    def _url(self) -> str:
        return self.spec.url if "://" in self.spec.url else f"http://{self.spec.url}"

    def _request_bytes(self) -> bytes:
        if self.spec.input_format == InputFormat.TENSOR:
            body, content_type = self._inputs[TENSOR_KEY], TENSOR_CONTENT_TYPE
        else:
            body, content_type = multipart_body(list(self._inputs.values()))
        return build_request("POST", self._url, body, {"Content-Type": content_type})

    def wire_request(self) -> WireRequest:
        return http1_wire(self._url, self._request_bytes())

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(self.outputs(body))

    async def open(self) -> None:
        self._request = self._request_bytes()
        self._http = Http1Client(self._url, self.spec.timeout_s)

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._http.send(self._request)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.body[:300].decode(errors='replace')}")
        return self.outputs(response.body), parse_server_timing(response.headers.get(TIMING_HEADER.lower()))

    async def close(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()


class TorchServeGrpcClient(TorchServeClient):
    """`InferenceAPIsService/Predictions` at `spec.url` (host:port)."""

    _channel: Any = None

    def _request_bytes(self) -> bytes:
        from serving.torchserve.proto import inference_pb2

        return inference_pb2.PredictionsRequest(model_name=self.spec.model_name,
                                                input=self._inputs).SerializeToString()

    def wire_request(self) -> WireRequest:
        return grpc_wire(self.spec.url, PREDICTIONS, self._request_bytes(), self.spec.grpc_metadata)

    def check_wire_response(self, body: bytes) -> None:
        from serving.torchserve.proto import inference_pb2

        self.check_logits(self.outputs(inference_pb2.PredictionResponse.FromString(grpc_message(body)).prediction))

    async def open(self) -> None:
        import grpc

        from serving.torchserve.proto import inference_pb2

        self._request = self._request_bytes()
        self._channel = grpc.aio.insecure_channel(
            self.spec.url, options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        # No request serializer: the request goes out as the bytes built above.
        self._call = self._channel.unary_unary(PREDICTIONS,
                                               response_deserializer=inference_pb2.PredictionResponse.FromString)

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._call(self._request, timeout=self.spec.timeout_s,
                                    metadata=self.spec.grpc_metadata or None)
        return self.outputs(response.prediction), None

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

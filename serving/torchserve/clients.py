"""TorchServe's clients: its native inference APIs, each request of the pool built once and sent as those bytes.

REST: `POST <url>` (`http://host:port/predictions/<model>`) through the project's HTTP/1.1 client; `tensor` as an
`application/octet-stream` body, `jpeg` as `multipart/form-data` with one file field per image (image0..image<N-1>).
gRPC: `InferenceAPIsService/Predictions` on a `grpc.aio` channel, the `PredictionsRequest` serialized once, its input
map `{"tensor": bytes}` or `{"image0": jpeg, ...}`. The answer is the float32 outputs as raw bytes either way;
the handler's Server-Timing comes back as a REST header only (TorchServe's gRPC answers carry no metadata).
`jpeg_base64` (REST only) is the image workload's JSON client (`serving.workloads.image.json_images.JsonImagesClient`)
at the same URL.
`payload_bytes` counts the image data (the tensor, or the JPEG files), as every client does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient
from serving.clients.grpc_client import GrpcInferenceClient
from serving.clients.http1 import HttpResponse, multipart_body
from serving.clients.http_client import HttpInferenceClient
from serving.torchserve.payloads import PREDICTIONS, TENSOR_CONTENT_TYPE, TENSOR_KEY, image_key, outputs_of
from serving.workloads.image.corpus import RequestInputs
from serving.workloads.image.formats import InputFormat


class TorchServeClient(InferenceClient):
    """The request's inputs as TorchServe's APIs carry them; subclasses send them over REST or gRPC."""

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format not in (InputFormat.TENSOR, InputFormat.JPEG):
            raise ValueError(f"{type(self).__name__}: input format {spec.input_format!r} is not sent as binary "
                             "(jpeg_base64 goes through serving.workloads.image.json_images.JsonImagesClient over "
                             "REST)")

    @staticmethod
    def named_inputs(inputs: RequestInputs) -> dict[str, bytes]:
        """A request's inputs as TorchServe's APIs name them: the tensor, or image0..image<N-1>."""
        if inputs.images is None:
            return {TENSOR_KEY: inputs.tensor.tobytes()}
        return {image_key(i): image for i, image in enumerate(inputs.images)}

    def outputs(self, body: bytes) -> np.ndarray:
        return outputs_of(body, self.spec.batch_size, self.spec.output_shape)


class TorchServeRestClient(TorchServeClient, HttpInferenceClient):
    """`POST /predictions/<model>` (`spec.url`)."""

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        named = self.named_inputs(inputs)
        if self.spec.input_format == InputFormat.TENSOR:
            body, content_type = named[TENSOR_KEY], TENSOR_CONTENT_TYPE
        else:
            body, content_type = multipart_body(list(named.items()))
        return self._post(body, {"Content-Type": content_type})

    def response_outputs(self, response: HttpResponse) -> np.ndarray:
        return self.outputs(response.body)

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(self.outputs(body))


class TorchServeGrpcClient(TorchServeClient, GrpcInferenceClient):
    """`InferenceAPIsService/Predictions` at `spec.url` (host:port)."""

    method = PREDICTIONS

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        from serving.torchserve.proto import inference_pb2

        return inference_pb2.PredictionsRequest(model_name=self.spec.model_name,
                                                input=self.named_inputs(inputs)).SerializeToString()

    def response_type(self) -> Any:
        from serving.torchserve.proto import inference_pb2

        return inference_pb2.PredictionResponse

    def response_outputs(self, response: Any) -> np.ndarray:
        return self.outputs(response.prediction)

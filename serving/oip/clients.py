"""Clients of the Open Inference Protocol over sockets, for every server that speaks it (Triton, the Ray Serve
deployment, the FastAPI service): each request of the pool (a float32 tensor for `<model>`, or the JPEG files for
`<model>_jpeg`) is built once with tritonclient's own protocol code and its bytes are sent each time its turn comes,
as perf_analyzer does with `--input-data` (tritonclient's aio `infer` rebuilds the ~600 KB request on every call).

Inputs: `tensor` sends FP32 [B, C, H, W]; `jpeg` sends BYTES [B, 1], one encoded image per row (the server decodes
and preprocesses). `payload_bytes` counts the image data (the float32 tensor, or the JPEG files), as every client
does, so payloads compare across backends.

HTTP: the binary tensor extension, sent by the project's HTTP/1.1 client (`serving.clients.http1`); the reply's
binary output read in place (`binary_output`). gRPC: `inference.GRPCInferenceService/ModelInfer` on a `grpc.aio`
channel, the `ModelInferRequest` serialized once. A server that reports its own time per request (Ray Serve's
replica, the FastAPI service) answers with a `Server-Timing` header (gRPC: trailing metadata, read by the clients
that need it).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient
from serving.clients.grpc_client import GrpcInferenceClient
from serving.clients.http1 import HttpResponse
from serving.clients.http_client import HttpInferenceClient
from serving.workloads.image.corpus import RequestInputs
from serving.workloads.image.formats import InputFormat

HEADER_LENGTH = "Inference-Header-Content-Length"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def serialize_bytes(elements: list[bytes]) -> bytes:
    """A BYTES tensor's binary form: each element's 4-byte little-endian length, then its bytes."""
    return b"".join(len(e).to_bytes(4, "little") + e for e in elements)


def binary_output(body: bytes, header_length: str | None, name: str) -> np.ndarray:
    """Output `name` of a binary-data response: its JSON header, then each output's bytes in order. ~9 µs, where
    tritonclient's `parse_response_body(...).as_numpy` takes ~75 µs (an `InferResult` per response)."""
    if header_length is None:
        raise RuntimeError(f"the server answered without {HEADER_LENGTH}: the outputs are not binary data")
    header = json.loads(body[:int(header_length)])
    offset = int(header_length)
    for output in header["outputs"]:
        size = output.get("parameters", {}).get("binary_data_size", 0)
        if output["name"] == name:
            if output["datatype"] != "FP32":
                raise RuntimeError(f"output {name} is {output['datatype']}, expected FP32")
            return np.frombuffer(body, np.float32, size // 4, offset).reshape(output["shape"])
        offset += size
    raise RuntimeError(f"the response has no output {name!r}: {[o['name'] for o in header['outputs']]}")


def response_logits(response: Any) -> np.ndarray:
    """The one output of a `ModelInferResponse`, from its raw_output_contents."""
    (output,) = response.outputs
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(tuple(output.shape))


class OipTensor(NamedTuple):
    """A request's input as the protocol carries it: its shape, datatype and raw bytes."""

    shape: list[int]
    datatype: str
    raw: bytes


class OipClient(InferenceClient):
    """The requests' input, as the protocol carries it; subclasses send it over HTTP or gRPC."""

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format not in (InputFormat.JPEG, InputFormat.TENSOR):
            raise ValueError(f"{type(self).__name__}: input format {spec.input_format!r} is not an Open Inference "
                             "Protocol tensor (use tensor or jpeg)")

    def oip_tensor(self, inputs: RequestInputs) -> OipTensor:
        if self.spec.input_format == InputFormat.JPEG:
            return OipTensor([len(inputs.images), 1], "BYTES", serialize_bytes(list(inputs.images)))
        return OipTensor(list(inputs.tensor.shape), "FP32", inputs.tensor.tobytes())


class OipHttpClient(OipClient, HttpInferenceClient):
    """OIP over HTTP/1.1 to `spec.url`: a server's host:port (Triton), or a URL whose path the protocol lives under
    (Ray Serve's route prefix)."""

    @property
    def url(self) -> str:
        """The model's infer endpoint under `spec.url`."""
        return f"{super().url.rstrip('/')}/v2/models/{self.spec.model_name}/infer"

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        """The request, head and body: tritonclient's own body with the binary tensor extension."""
        import tritonclient.http as http

        data = (np.array(inputs.images, dtype=np.object_).reshape(-1, 1) if inputs.images is not None
                else inputs.tensor)
        tensor = self.oip_tensor(inputs)
        infer_input = http.InferInput(self.spec.input_name, tensor.shape, tensor.datatype)
        infer_input.set_data_from_numpy(data, binary_data=True)
        outputs = [http.InferRequestedOutput(self.spec.output_name, binary_data=True)]
        body, json_size = http.InferenceServerClient.generate_request_body([infer_input], outputs=outputs)
        headers = {"Content-Type": "application/octet-stream"}
        if json_size is not None:
            headers[HEADER_LENGTH] = str(json_size)
        return self._post(body, headers)

    def response_outputs(self, response: HttpResponse) -> np.ndarray:
        return binary_output(response.body, response.headers.get(HEADER_LENGTH.lower()), self.spec.output_name)

    def check_wire_response(self, body: bytes) -> None:
        """A binary-data response's body starts with its JSON header; its length is where the JSON ends."""
        _, header_length = json.JSONDecoder().raw_decode(body.decode("latin-1"))
        self.check_logits(binary_output(body, str(header_length), self.spec.output_name))


class OipGrpcClient(OipClient, GrpcInferenceClient):
    """OIP over gRPC to `spec.url` (host:port), with `spec.grpc_metadata` on every call."""

    method = MODEL_INFER

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        """The serialized ModelInferRequest: the tensor as raw_input_contents, as tritonclient sends it."""
        from tritonclient.grpc import service_pb2

        tensor = self.oip_tensor(inputs)
        return service_pb2.ModelInferRequest(
            model_name=self.spec.model_name,
            inputs=[service_pb2.ModelInferRequest.InferInputTensor(
                name=self.spec.input_name, datatype=tensor.datatype, shape=tensor.shape)],
            outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=self.spec.output_name)],
            raw_input_contents=[tensor.raw],
        ).SerializeToString()

    def response_type(self) -> Any:
        from tritonclient.grpc import service_pb2

        return service_pb2.ModelInferResponse

    def response_outputs(self, response: Any) -> np.ndarray:
        return response_logits(response)

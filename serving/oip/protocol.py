"""The Open Inference Protocol (KServe v2) as Triton speaks it, for the servers of ours that speak it (the Ray Serve
deployment, the FastAPI service): their models' metadata and configuration, inference requests decoded and responses
encoded, over HTTP and gRPC alike.

Two models per server, named as Triton names them (serving/triton/ensemble.py): `<model>` takes `input` FP32
[-1, C, H, W]; `<model>_jpeg` takes `jpeg` BYTES [-1, 1], one encoded image per row. Both return `logits` FP32
[-1, *output dims]. A request carries 1..max_batch_size images (the model's), as Triton enforces.

HTTP: the JSON request of the OIP, with Triton's binary tensor extension: the body is the JSON header (its length in
`Inference-Header-Content-Length`), then each binary input's bytes in input order (`parameters.binary_data_size`);
a BYTES element is a 4-byte little-endian length and its bytes. Inputs may also come as JSON `data` lists. Outputs
come back binary when the request asks (an output's `parameters.binary_data`, or the request's
`parameters.binary_data_output`), else as JSON `data`. gRPC: `inference.GRPCInferenceService` messages (tritonclient's
`service_pb2`): inputs in `raw_input_contents` or typed `contents`, outputs in `raw_output_contents`.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from serving.model_config import ModelConfig

HEADER_LENGTH = "Inference-Header-Content-Length"
FP32, BYTES = "FP32", "BYTES"
VERSION = "1"
PLATFORM = "pytorch"
SERVER_NAME = "tierbench-ray-serve"
CONFIG_TYPES = {FP32: "TYPE_FP32", BYTES: "TYPE_STRING"}  # the datatypes as a Triton model config names them
TENSOR_INPUT = "input"
JPEG_INPUT = "jpeg"  # the JPEG model's BYTES input: one encoded image per row
OUTPUT = "logits"


def jpeg_model_name(model_name: str) -> str:
    """The model taking JPEGs (`<model>_jpeg`): Triton's ensemble, and the same name on every OIP server."""
    return f"{model_name}_jpeg"


class OipError(Exception):
    """A request the protocol refuses, with its HTTP status: 400 (bad request) or 404 (unknown model)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Tensor:
    """One input as a request carries it: binary bytes (`raw`), or values (`data`: JSON, or gRPC typed contents)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | memoryview | None = None
    data: Any = None


@dataclass(frozen=True)
class InferRequest:
    inputs: tuple[Tensor, ...]
    outputs: tuple[str, ...] = ()  # the outputs asked for; none: every output
    binary_output: bool = True  # HTTP: answer with binary data (gRPC answers in raw_output_contents)
    id: str = ""


@dataclass(frozen=True)
class ModelSignature:
    """One model as the protocol describes it: one input, one output, a batch dimension first."""

    name: str
    input_name: str
    datatype: str  # FP32 | BYTES
    dims: tuple[int, ...]  # per image
    output_dims: tuple[int, ...]  # per image
    max_batch_size: int
    output_name: str = OUTPUT

    def metadata(self) -> dict[str, Any]:
        """`GET /v2/models/<name>`."""
        return {"name": self.name, "versions": [VERSION], "platform": PLATFORM,
                "inputs": [{"name": self.input_name, "datatype": self.datatype, "shape": [-1, *self.dims]}],
                "outputs": [{"name": self.output_name, "datatype": FP32, "shape": [-1, *self.output_dims]}]}

    def config(self) -> dict[str, Any]:
        """`GET /v2/models/<name>/config`: the Triton model config (JSON) that perf_analyzer reads."""
        return {"name": self.name, "platform": PLATFORM, "max_batch_size": self.max_batch_size,
                "input": [{"name": self.input_name, "data_type": CONFIG_TYPES[self.datatype],
                           "dims": list(self.dims)}],
                "output": [{"name": self.output_name, "data_type": CONFIG_TYPES[FP32], "dims": list(self.output_dims)}]}

    def metadata_pb(self) -> Any:
        from tritonclient.grpc import service_pb2 as pb

        meta = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=self.name, versions=[VERSION], platform=PLATFORM,
            inputs=[meta(name=self.input_name, datatype=self.datatype, shape=[-1, *self.dims])],
            outputs=[meta(name=self.output_name, datatype=FP32, shape=[-1, *self.output_dims])])

    def config_pb(self) -> Any:
        from tritonclient.grpc import model_config_pb2 as mc
        from tritonclient.grpc import service_pb2 as pb

        config = mc.ModelConfig(name=self.name, platform=PLATFORM, max_batch_size=self.max_batch_size)
        config.input.add(name=self.input_name, data_type=mc.DataType.Value(CONFIG_TYPES[self.datatype]),
                         dims=list(self.dims))
        config.output.add(name=self.output_name, data_type=mc.TYPE_FP32, dims=list(self.output_dims))
        return pb.ModelConfigResponse(config=config)

    def batch(self, request: InferRequest) -> np.ndarray | list[bytes]:
        """The request's input: a float32 array [N, *dims], or N encoded images; OipError for anything else."""
        names = [t.name for t in request.inputs]
        if names != [self.input_name]:
            raise OipError(f"model '{self.name}' takes one input '{self.input_name}'; the request has {names}")
        unknown = sorted(set(request.outputs) - {self.output_name})
        if unknown:
            raise OipError(f"model '{self.name}' has no output {unknown} (its output: '{self.output_name}')")
        tensor = request.inputs[0]
        if tensor.datatype != self.datatype:
            raise OipError(f"input '{tensor.name}' of model '{self.name}' is {self.datatype}, the request sent "
                           f"{tensor.datatype}")
        shape = tensor.shape
        if len(shape) != 1 + len(self.dims) or tuple(shape[1:]) != self.dims or shape[0] < 1:
            raise OipError(f"unexpected shape for input '{tensor.name}' for model '{self.name}'. Expected "
                           f"{[-1, *self.dims]}, got {list(shape)}")
        if shape[0] > self.max_batch_size:
            raise OipError(f"inference request batch-size must be <= {self.max_batch_size} for '{self.name}'")
        count = math.prod(shape)
        if self.datatype == BYTES:
            elements = split_bytes(tensor.raw) if tensor.raw is not None else _json_bytes(tensor.data)
            if len(elements) != count:
                raise OipError(f"input '{tensor.name}' has {len(elements)} elements, its shape {list(shape)} says "
                               f"{count}")
            return elements
        if tensor.raw is not None:
            if len(tensor.raw) != 4 * count:
                raise OipError(f"input '{tensor.name}' has {len(tensor.raw)} bytes of binary data; FP32 "
                               f"{list(shape)} is {4 * count}")
            return np.frombuffer(tensor.raw, dtype=np.float32).reshape(shape)
        try:
            values = np.asarray(tensor.data, dtype=np.float32).ravel()
        except (TypeError, ValueError) as exc:
            raise OipError(f"input '{tensor.name}': its data are not FP32 numbers ({exc})") from None
        if values.size != count:
            raise OipError(f"input '{tensor.name}' has {values.size} values, its shape {list(shape)} says {count}")
        return values.reshape(shape)


def model_signatures(model_cfg: ModelConfig) -> dict[str, ModelSignature]:
    """The server's models by the input format they take (`tensor`, `jpeg`;
    serving.workloads.image.formats.InputFormat): the model itself and its JPEG twin, named as Triton names them."""
    from serving.models import output_dims

    name, batch, outputs = str(model_cfg.name), int(model_cfg.max_batch_size), output_dims(model_cfg)
    dims = tuple(int(d) for d in model_cfg.input_shape)
    return {"tensor": ModelSignature(name, TENSOR_INPUT, FP32, dims, outputs, batch),
            "jpeg": ModelSignature(jpeg_model_name(name), JPEG_INPUT, BYTES, (1,), outputs, batch)}


def server_metadata(version: str, name: str = SERVER_NAME) -> dict[str, Any]:
    """`GET /v2`."""
    return {"name": name, "version": version, "extensions": ["binary_tensor_data", "model_configuration"]}


# Computes a request's outputs: (model, request) -> (outputs, extra response headers such as Server-Timing).
Infer = Callable[[ModelSignature, InferRequest], Awaitable[tuple[np.ndarray, dict[str, str]]]]


class OipModels:
    """A server's models by name and the protocol's HTTP routes over them: what every OIP server of ours answers,
    whatever web framework carries it (Ray Serve's ingress, FastAPI)."""

    def __init__(self, models: Iterable[ModelSignature], server_name: str, server_version: str) -> None:
        self.models = {m.name: m for m in models}
        self.server_name = server_name
        self.server_version = server_version

    def model(self, name: str, version: str = "") -> ModelSignature:
        """The model `name` (its one version, or any when `version` is empty); OipError 404 otherwise."""
        model = self.models.get(name)
        if model is None:
            raise OipError(f"Request for unknown model: '{name}' is not found (models: {sorted(self.models)})", 404)
        if version not in ("", VERSION):
            raise OipError(f"model '{name}' has no version {version}; its versions: ['{VERSION}']", 404)
        return model

    async def http(self, method: str, path: str, body: bytes, header_length: str | None,
                   infer: Infer) -> tuple[int, bytes, dict[str, str]]:
        """The response (status, body, headers) to an HTTP request for `path` (below the server's prefix, starting
        /v2); a refused request gets its status and `{"error": message}`, as Triton answers."""
        try:
            action, name = route(method, path)
            if name is None:
                if action == "server_metadata":
                    return _json(server_metadata(self.server_version, self.server_name))
                return 200, b"", {}
            model = self.model(name)
            if action in ("metadata", "config"):
                return _json(model.metadata() if action == "metadata" else model.config())
            if action == "ready":
                return 200, b"", {}
            request = parse_http(body, header_length)
            outputs, headers = await infer(model, request)
            response, response_headers = http_response(model, outputs, request)
            return 200, response, {**response_headers, **headers}
        except OipError as exc:
            return _json({"error": str(exc)}, exc.status)


def _json(value: Any, status: int = 200) -> tuple[int, bytes, dict[str, str]]:
    return status, json.dumps(value).encode(), {"Content-Type": "application/json"}


# (method, path parts after /v2/models/<name>[/versions/<v>]) -> action; None: the server's own routes
MODEL_ROUTES = {("GET", ()): "metadata", ("GET", ("ready",)): "ready", ("GET", ("config",)): "config",
                ("POST", ("infer",)): "infer"}
SERVER_ROUTES = {("GET", ()): "server_metadata", ("GET", ("health", "live")): "live",
                 ("GET", ("health", "ready")): "ready"}


def route(method: str, path: str) -> tuple[str, str | None]:
    """The action a request for `path` (below the route prefix, starting /v2) asks for, and the model it names
    (None for the server's routes); OipError 404 for a path the protocol has not."""
    from urllib.parse import unquote

    parts = tuple(unquote(p) for p in path.strip("/").split("/"))[1:]
    model = None
    if parts[:1] == ("models",) and len(parts) > 1:
        model, parts = parts[1], parts[2:]
        if parts[:1] == ("versions",):
            if parts[1:2] != (VERSION,):
                raise OipError(f"model '{model}' has no version {'/'.join(parts[1:2]) or '(none given)'}; its "
                               f"versions: ['{VERSION}']", 404)
            parts = parts[2:]
    action = (MODEL_ROUTES if model is not None else SERVER_ROUTES).get((method, parts))
    if action is None:
        raise OipError(f"no route {method} {path}", 404)
    return action, model


def split_bytes(raw: bytes | memoryview) -> list[bytes]:
    """A BYTES tensor's elements from its binary form (each a 4-byte little-endian length, then its bytes)."""
    view, elements, at = memoryview(raw), [], 0
    while at < len(view):
        if at + 4 > len(view):
            raise OipError(f"BYTES data cut short: {len(view) - at} bytes where a 4-byte length should be")
        (length,) = struct.unpack_from("<I", view, at)
        at += 4
        if at + length > len(view):
            raise OipError(f"BYTES element of {length} bytes runs past the data's end ({len(view) - at} left)")
        elements.append(bytes(view[at:at + length]))
        at += length
    return elements


def _json_bytes(data: Any) -> list[bytes]:
    """BYTES elements given as values: JSON strings (their UTF-8 bytes, as Triton takes them), or gRPC bytes."""
    flat = list(np.asarray(data, dtype=object).ravel()) if data is not None else []
    if not all(isinstance(e, str | bytes) for e in flat):
        raise OipError("BYTES data must be strings")
    return [e.encode() if isinstance(e, str) else e for e in flat]


def parse_http(body: bytes, header_length: str | None) -> InferRequest:
    """`POST /v2/models/<name>/infer`: the JSON header (the whole body without `Inference-Header-Content-Length`)
    and each binary input's bytes after it."""
    try:
        json_end = int(header_length) if header_length is not None else len(body)
        if not 0 < json_end <= len(body):
            raise ValueError(f"{HEADER_LENGTH} is {json_end}, the body has {len(body)} bytes")
        header = json.loads(bytes(body[:json_end]))
    except ValueError as exc:
        raise OipError(f"failed to parse the request JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list) or not header["inputs"]:
        raise OipError("the request JSON has no 'inputs' list")
    view, offset, inputs = memoryview(body), json_end, []
    for item in header["inputs"]:
        if not isinstance(item, dict):
            raise OipError(f"an input is {type(item).__name__}, not an object")
        name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str) or not isinstance(shape, list) or not all(
                isinstance(d, int) for d in shape):
            raise OipError(f"input {name!r} needs 'name', 'datatype' and 'shape' (a list of integers)")
        parameters = item.get("parameters") or {}
        if "shared_memory_region" in parameters:
            raise OipError("shared memory is not supported: send the tensors in the request")
        size = parameters.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(body):
                raise OipError(f"input '{name}': binary_data_size {size!r} runs past the body "
                               f"({len(body) - offset} bytes left)")
            inputs.append(Tensor(name, datatype, tuple(shape), raw=view[offset:offset + size]))
            offset += size
        elif "data" in item:
            inputs.append(Tensor(name, datatype, tuple(shape), data=item["data"]))
        else:
            raise OipError(f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    if offset != len(body):
        raise OipError(f"{len(body) - offset} bytes of binary data after the inputs' binary_data_size")
    outputs = header.get("outputs") or []
    if not isinstance(outputs, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                                for o in outputs):
        raise OipError("'outputs' must be a list of objects with a 'name'")
    for output in outputs:
        if {"classification", "shared_memory_region"} & set(output.get("parameters") or {}):
            raise OipError(f"output '{output['name']}': classification and shared memory are not supported")
    binary = bool((header.get("parameters") or {}).get("binary_data_output", False)) or any(
        (o.get("parameters") or {}).get("binary_data", False) for o in outputs)
    return InferRequest(tuple(inputs), tuple(o["name"] for o in outputs), binary, str(header.get("id", "")))


def http_response(model: ModelSignature, logits: np.ndarray, request: InferRequest) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: binary output after the JSON header, or JSON `data`."""
    output: dict[str, Any] = {"name": model.output_name, "datatype": FP32, "shape": list(logits.shape)}
    head: dict[str, Any] = {"model_name": model.name, "model_version": VERSION, "outputs": [output]}
    if request.id:
        head["id"] = request.id
    if not request.binary_output:
        output["data"] = logits.ravel().tolist()
        return json.dumps(head).encode(), {"Content-Type": "application/json"}
    data = np.ascontiguousarray(logits, dtype=np.float32).tobytes()
    output["parameters"] = {"binary_data_size": len(data)}
    header = json.dumps(head).encode()
    return header + data, {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}


def parse_grpc(request: Any) -> InferRequest:
    """A `ModelInferRequest`: inputs in `raw_input_contents` (in input order) or in typed `contents`."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise OipError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    inputs = []
    for i, item in enumerate(request.inputs):
        shape = tuple(int(d) for d in item.shape)
        if raw:
            inputs.append(Tensor(item.name, item.datatype, shape, raw=raw[i]))
        elif item.datatype == BYTES:
            inputs.append(Tensor(item.name, item.datatype, shape, data=list(item.contents.bytes_contents)))
        else:
            inputs.append(Tensor(item.name, item.datatype, shape, data=list(item.contents.fp32_contents)))
    return InferRequest(tuple(inputs), tuple(o.name for o in request.outputs), True, request.id)


def grpc_response(model: ModelSignature, logits: np.ndarray, request: InferRequest) -> Any:
    """A `ModelInferResponse` with the logits in `raw_output_contents`."""
    from tritonclient.grpc import service_pb2 as pb

    output = pb.ModelInferResponse.InferOutputTensor(name=model.output_name, datatype=FP32, shape=list(logits.shape))
    return pb.ModelInferResponse(model_name=model.name, model_version=VERSION, id=request.id, outputs=[output],
                                 raw_output_contents=[np.ascontiguousarray(logits, dtype=np.float32).tobytes()])

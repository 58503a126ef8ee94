"""The protocols an endpoint may speak (`backends.<entry>.kind`), each with what tierbench needs of it: which client
sends each (transport, input format), where its requests go, what it is asked before any trial (is the model
there, what it takes), where the network's round trip is timed, and how its Prometheus metrics read.

    oip         the Open Inference Protocol (KServe v2): Triton, KServe, MLServer, tierbench's own servers
    torchserve  TorchServe's inference API: REST `/predictions/<model>` and its gRPC service
    http        a plain HTTP API at `<url><path>` (serving/endpoint/template.py: raw tensor, JPEG bytes, base64 JPEG
                in JSON)
    openai      an OpenAI-compatible API, the generative workload's (serving/endpoint/openai.py)

`serving.endpoint.backend.KINDS` holds one of each by name.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

from serving import torchserve_metrics
from serving.clients.base import ClientSpec
from serving.endpoint.probe import EndpointError, fetch, metadata_problem, oip_model, refused
from serving.endpoint.settings import EndpointSettings
from serving.endpoint.template import TemplateSpec
from serving.oip import triton_metrics
from serving.workloads.image.formats import InputFormat

TENSOR, JPEG, JPEG_BASE64 = InputFormat.TENSOR, InputFormat.JPEG, InputFormat.JPEG_BASE64


@dataclass(frozen=True)
class EndpointModel:
    """What the endpoint said of the model before the trials: its name and platform there, and (where the protocol
    names them) the input and output tensors a request uses."""

    name: str
    platform: str
    input_name: str | None = None
    output_name: str | None = None
    input_shape: tuple[int, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)  # what else the check found, as trial params
    pin_output: str = ""  # kind=openai: how a request pins its output length (serving.workloads.generative.api)
    stream_usage: bool | None = None  # kind=openai: whether a streamed answer reports its usage


class EndpointKind(ABC):
    name: ClassVar[str]
    clients: ClassVar[dict[tuple[str, str], str]]  # (transport, input format) -> the client class's import path
    health_path: ClassVar[str]  # a cheap GET under the URL: the network's round trip is timed on it
    spec_kind: ClassVar[type[ClientSpec]] = ClientSpec  # the spec its clients take

    def spec_fields(self, settings: EndpointSettings, meta: EndpointModel | None, context: Any) -> dict[str, Any]:
        """What its clients' specs carry beyond the common fields (`context`: the backend's `BackendContext`)."""
        return {}

    def transports(self) -> set[str]:
        return {transport for transport, _ in self.clients}

    def unsupported_reason(self, transport: str, input_format: str) -> str | None:
        if (transport, input_format) in self.clients:
            return None
        offered = sorted(f for t, f in self.clients if t == transport)
        return (f"kind={self.name} over {transport} is sent {', '.join(offered)}, not {input_format}" if offered
                else f"kind={self.name} has no {transport} API")

    def client_url(self, settings: EndpointSettings, transport: str, model: str) -> str:
        """Where a client of `transport` sends its requests."""
        return settings.url if transport == "http" else str(settings.grpc_url)

    def round_trip_path(self, settings: EndpointSettings) -> str:
        return self.health_path

    @abstractmethod
    def check(self, settings: EndpointSettings, spec: ClientSpec, name: str, input_shape: tuple[int, ...],
              timeout_s: float, input_formats: tuple[str, ...] = (TENSOR,)) -> EndpointModel:
        """Ask the endpoint whether it serves the model as tierbench will send it; EndpointError naming the setting
        and the fix when not (unreachable, refused, no such model, other tensors)."""

    # Its Prometheus metrics (`metrics_url`): none unless a kind reads them.
    metrics_server: ClassVar[str] = ""  # whose metrics they are (Triton's: the OIP server that has them)
    metrics_marker: ClassVar[str] = ""  # a counter that must be there for the model
    # The module that reads them (parse_counters, breakdown, served_images), shared with the launched backend
    metrics: ClassVar[ModuleType | None] = None

    def metrics_label(self, model: str) -> str:
        return ""

    def parse_counters(self, text: str, model: str) -> dict[str, float]:
        if self.metrics is None:
            raise NotImplementedError(f"kind={self.name} reads no metrics")
        return self.metrics.parse_counters(text, model)

    def breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return self.metrics.breakdown(before, after) if self.metrics is not None else {}

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        return self.metrics.served_images(before, after) if self.metrics is not None else None


class OipKind(EndpointKind):
    name = "oip"
    clients = {("http", TENSOR): "serving.oip.clients.OipHttpClient",
               ("http", JPEG): "serving.oip.clients.OipHttpClient",
               ("grpc", TENSOR): "serving.oip.clients.OipGrpcClient",
               ("grpc", JPEG): "serving.oip.clients.OipGrpcClient"}
    health_path = "/v2/health/ready"
    metrics_server = "Triton"
    metrics_marker = "nv_inference_request_success"
    metrics = triton_metrics

    def unsupported_reason(self, transport: str, input_format: str) -> str | None:
        if input_format == JPEG_BASE64:
            return ("input format jpeg_base64: the Open Inference Protocol carries tensors (JPEG files as a BYTES "
                    "tensor: input format jpeg); a JSON API taking base64: kind=http or kind=torchserve")
        return super().unsupported_reason(transport, input_format)

    def check(self, settings: EndpointSettings, spec: ClientSpec, name: str, input_shape: tuple[int, ...],
              timeout_s: float, input_formats: tuple[str, ...] = (TENSOR,)) -> EndpointModel:
        """The model's metadata: an FP32 input of the model's shape takes tensors, a BYTES input [batch, 1] JPEG
        files; the sweep's formats must be the one it takes."""
        meta = oip_model(settings.url, spec, name, timeout_s)
        sent = tuple(f for f in input_formats if self.unsupported_reason("http", f) is None)
        problem = metadata_problem(meta, input_shape, name, sent)
        if problem:
            raise EndpointError(problem)
        return EndpointModel(meta.name, meta.platform, meta.input_name, meta.output_name, meta.input_shape)

    def metrics_label(self, model: str) -> str:
        return f'model="{model}"'


class TorchServeKind(EndpointKind):
    name = "torchserve"
    clients = {("http", TENSOR): "serving.torchserve.clients.TorchServeRestClient",
               ("http", JPEG): "serving.torchserve.clients.TorchServeRestClient",
               ("http", JPEG_BASE64): "serving.workloads.image.json_images.JsonImagesClient",
               ("grpc", TENSOR): "serving.torchserve.clients.TorchServeGrpcClient",
               ("grpc", JPEG): "serving.torchserve.clients.TorchServeGrpcClient"}
    health_path = "/ping"
    metrics_server = "TorchServe"
    metrics_marker = torchserve_metrics.REQUESTS
    metrics = torchserve_metrics

    def client_url(self, settings: EndpointSettings, transport: str, model: str) -> str:
        if transport == "http":
            return f"{settings.url.rstrip('/')}/predictions/{model}"
        return super().client_url(settings, transport, model)

    def check(self, settings: EndpointSettings, spec: ClientSpec, name: str, input_shape: tuple[int, ...],
              timeout_s: float, input_formats: tuple[str, ...] = (TENSOR,)) -> EndpointModel:
        """`GET /ping` (it is TorchServe's inference API, and healthy), then an empty POST to the model's
        predictions: TorchServe's frontend answers 404 for a model it does not serve, before any handler runs.
        Its version from `OPTIONS /` (the API description)."""
        base = settings.url.rstrip("/")
        status, body = fetch(f"{base}{self.health_path}", spec, name, timeout_s)
        refused(status, name, spec, base)
        if status != 200 or b"status" not in body:
            raise EndpointError(f"backends.{name}.url: {base}{self.health_path} answered HTTP {status} "
                                f"({body[:200].decode(errors='replace')!r}): is it TorchServe's inference API "
                                "(port 8080 by default)?")
        status, body = fetch(f"{base}/predictions/{spec.model_name}", spec, name, timeout_s, method="POST")
        refused(status, name, spec, base)
        if status == 404:
            raise EndpointError(f"backends.{name}.model_name={spec.model_name!r}: {base} serves no model of that "
                                f"name (404 on /predictions/{spec.model_name}): give its name there with "
                                f"backends.{name}.model_name=NAME")
        version = ""
        status, body = fetch(f"{base}/", spec, name, timeout_s, method="OPTIONS")
        if status == 200:
            try:
                version = str(json.loads(body)["info"]["version"])
            except (ValueError, KeyError, TypeError):
                version = ""
        return EndpointModel(spec.model_name, f"TorchServe {version}".strip())

    def metrics_label(self, model: str) -> str:
        return f'model_name="{model}"'

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        """The handler's own image count, where it keeps one (tierbench's handler does; another may not)."""
        if torchserve_metrics.IMAGES_SERVED not in after:
            return None
        return super().served_images(before, after)


class HttpKind(EndpointKind):
    name = "http"
    clients = {("http", TENSOR): "serving.endpoint.template.TemplateHttpClient",
               ("http", JPEG): "serving.endpoint.template.TemplateHttpClient",
               ("http", JPEG_BASE64): "serving.endpoint.template.TemplateHttpClient"}
    health_path = ""
    spec_kind = TemplateSpec

    def spec_fields(self, settings: EndpointSettings, meta: EndpointModel | None, context: Any) -> dict[str, Any]:
        return {"input_key": settings.input_key, "output_key": settings.output_key}

    def client_url(self, settings: EndpointSettings, transport: str, model: str) -> str:
        return f"{settings.url.rstrip('/')}{settings.path}"

    def round_trip_path(self, settings: EndpointSettings) -> str:
        return settings.path  # a GET of the API's route: answered (often 405) without running the model

    def check(self, settings: EndpointSettings, spec: ClientSpec, name: str, input_shape: tuple[int, ...],
              timeout_s: float, input_formats: tuple[str, ...] = (TENSOR,)) -> EndpointModel:
        """An empty POST to the route: 401/403, 404 and 405 mean the URL, path or credentials are wrong; anything
        else (a 400 or 422 for the empty body, even a 500) means a handler is there."""
        url = self.client_url(settings, "http", spec.model_name)
        status, body = fetch(url, spec, name, timeout_s, method="POST")
        refused(status, name, spec, settings.url)
        if status in (404, 405):
            raise EndpointError(f"backends.{name}.path={settings.path!r}: {url} answered HTTP {status} to a POST "
                                f"({body[:200].decode(errors='replace')!r}): give the route the API takes "
                                f"requests at with backends.{name}.path=/ROUTE")
        return EndpointModel(spec.model_name, "")


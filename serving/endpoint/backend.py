"""A server tierbench did not start (`endpoint`): Triton in NVIDIA's container with its native backends, KServe,
MLServer, a Ray Serve or FastAPI service behind a load balancer. `start` starts nothing: it checks the endpoint
(reachable, lets us in, serves the model with tensors tierbench can send) and times the network's round trip to it;
the trials then measure it with the same clients, engines, windows and report as a launched server. `stop` leaves it
running. Nothing of the node it runs on is known: no GPU telemetry, no in-process ceiling, no server log."""

from __future__ import annotations

import logging
from dataclasses import replace
from urllib.parse import urlsplit

from serving.backend import Backend, BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.endpoint.probe import EndpointError, OipModel, fetch, metadata_problem, oip_model, round_trip_ms
from serving.endpoint.settings import EndpointSettings
from serving.oip import triton_metrics
from serving.protocols import InputFormat, parse_protocol

log = logging.getLogger(__name__)

OIP_CLIENTS = {"http": "serving.oip.clients.OipHttpClient", "grpc": "serving.oip.clients.OipGrpcClient"}


class EndpointBackend(Backend):
    settings: EndpointSettings

    def __init__(self, context: BackendContext, settings: EndpointSettings) -> None:
        super().__init__(context, settings)
        self.meta: OipModel | None = None

    @property
    def model_name(self) -> str:
        return self.settings.model_name or self.context.model.name

    def runs_on(self) -> str:
        if not self.settings.url:
            return f"a server tierbench does not start, once backends.{self.context.name}.url names one"
        return f"a server tierbench does not start: {self.settings.url} (model {self.model_name})"

    def gpu_tier_reason(self) -> str | None:
        """The server runs elsewhere, on the tier the user names: this node's GPU is not the question."""
        return None

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        tier = self.settings.tier
        if tier is not None and tier != self.context.tier:
            return f"this endpoint runs on tier {tier} (backends.{self.context.name}.tier), not {self.context.tier}"
        transport, shared_memory = parse_protocol(protocol)
        if shared_memory != "none":
            return f"{protocol}: shared memory needs the server on the client's machine, and an endpoint's is not ours"
        if transport == "grpc" and not self.settings.grpc_url:
            return f"no gRPC address for this endpoint: set backends.{self.context.name}.grpc_url=HOST:PORT"
        if input_format != InputFormat.TENSOR:
            return (f"input format {input_format}: an endpoint is sent FP32 tensors (a JPEG-decoding model there is "
                    "not measured yet)")
        return None

    def _secured(self, spec: ClientSpec) -> ClientSpec:
        """`spec` with how to reach this endpoint: TLS, its CA, the token's variable."""
        settings = self.settings
        return replace(spec, tls=settings.tls, ca_file=settings.ca_file or "", token_env=settings.token_env or "")

    def _probe_spec(self) -> ClientSpec:
        """What the checks before the trials connect with (HTTP, the endpoint's TLS and token)."""
        return self._secured(self._spec(OIP_CLIENTS["http"], self.settings.url, self.model_name, InputFormat.TENSOR, 1))

    def start(self) -> ServerHandle:
        settings, name = self.settings, self.context.name
        spec = self._probe_spec()
        timeout_s = float(settings.probe_timeout_s)
        meta = oip_model(settings.url, spec, name, timeout_s)
        problem = metadata_problem(meta, tuple(self.context.model.input_shape), name)
        if problem:
            raise EndpointError(problem)
        self.meta = meta
        if settings.metrics_url:
            self._check_metrics(spec)
        rtt_ms = round_trip_ms(settings.url, spec, name, timeout_s)
        log.info("%s: endpoint %s serves %s (%s, input %s %s); network round trip p50 %.2f ms", name,
                 settings.url, meta.name, meta.platform or "platform not stated", meta.input_name,
                 list(meta.input_shape), rtt_ms)
        urls = {"http": settings.url, **({"grpc": settings.grpc_url} if settings.grpc_url else {})}
        params = {"endpoint_url": settings.url, "endpoint_model": meta.name,
                  "endpoint_platform": meta.platform, "endpoint_tls": settings.tls,
                  "endpoint_authenticated": bool(settings.token_env), "endpoint_nodes": int(settings.nodes),
                  "server_hostname": urlsplit(settings.url).hostname or ""}
        if settings.grpc_url:
            params["endpoint_grpc"] = settings.grpc_url
        if settings.metrics_url:
            params["endpoint_metrics_url"] = settings.metrics_url
        return ServerHandle(server_mode="endpoint", urls=urls, params=params,
                            metrics={"endpoint_rtt_p50_ms": rtt_ms}, on_gpu=None, remote=True)

    def stop(self) -> dict[str, str]:
        """Nothing to stop: the endpoint is someone else's."""
        return {}

    def _metrics_text(self, spec: ClientSpec) -> str:
        settings = self.settings
        status, body = fetch(str(settings.metrics_url), spec, self.context.name, float(settings.probe_timeout_s))
        if status != 200:
            raise EndpointError(f"backends.{self.context.name}.metrics_url: {self.settings.metrics_url} answered HTTP "
                                f"{status}: give Triton's metrics URL (port 8002 by default), or null")
        return body.decode(errors="replace")

    def _check_metrics(self, spec: ClientSpec) -> None:
        """Triton's metrics at `metrics_url` carry counters for the model, before any trial relies on them."""
        text = self._metrics_text(spec)
        model = self.meta.name if self.meta else self.model_name
        if f'model="{model}"' not in text or "nv_inference_request_success" not in text:
            raise EndpointError(f"backends.{self.context.name}.metrics_url: {self.settings.metrics_url} has no Triton "
                                f"inference counters for model {model!r}: give the metrics URL of the Triton that "
                                "serves it, or null")

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        """Triton's cumulative counters for the model now; None without a metrics URL or when a read fails (the
        trial then has the client's view only)."""
        if not self.settings.metrics_url or self.meta is None:
            return None
        try:
            return triton_metrics.parse_counters(self._metrics_text(self._probe_spec()), self.meta.name)
        except (EndpointError, OSError) as exc:
            log.warning("%s: reading %s failed: %s", self.context.name, self.settings.metrics_url, exc)
            return None

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return triton_metrics.breakdown(before, after)

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        return triton_metrics.served_images(before, after)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        transport, _ = parse_protocol(protocol)
        spec = self._spec(OIP_CLIENTS[transport], handle.urls[transport], self.model_name, input_format, batch_size)
        meta = self.meta
        return self._secured(replace(spec, input_name=meta.input_name if meta else spec.input_name,
                                     output_name=meta.output_name if meta else spec.output_name))

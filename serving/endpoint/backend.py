"""A server tierbench did not start (`endpoint`): Triton in NVIDIA's container with its native backends, KServe,
MLServer, TorchServe, a Ray Serve or FastAPI service behind a load balancer, speaking the protocol of its `kind`
(serving/endpoint/kinds.py). `start` starts nothing: it checks the endpoint
(reachable, lets us in, serves the model with tensors tierbench can send) and times the network's round trip to it;
the trials then measure it with the same clients, engines, windows and report as a launched server. `stop` leaves it
running. Nothing of the node it runs on is known: no GPU telemetry, no in-process ceiling, no server log."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from urllib.parse import urlsplit

from serving.backend import Backend, BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.endpoint.kinds import EndpointKind, EndpointModel, HttpKind, OipKind, TorchServeKind
from serving.endpoint.openai import OpenAIKind, usage_problem
from serving.endpoint.probe import EndpointError, fetch, round_trip_ms
from serving.endpoint.settings import EndpointSettings
from serving.protocols import parse_protocol
from serving.workloads.image.formats import InputFormat

log = logging.getLogger(__name__)
# The protocols an endpoint may speak (`backends.<entry>.kind`), one of each by name.
KINDS: dict[str, EndpointKind] = {kind.name: kind for kind in (OipKind(), TorchServeKind(), HttpKind(), OpenAIKind())}


class EndpointBackend(Backend):
    settings: EndpointSettings

    def __init__(self, context: BackendContext, settings: EndpointSettings) -> None:
        super().__init__(context, settings)
        self.meta: EndpointModel | None = None

    @property
    def kind(self) -> EndpointKind:
        return KINDS[self.settings.kind]

    @property
    def model_name(self) -> str:
        return self.settings.model_name or self.context.model.name

    def runs_on(self) -> str:
        if not self.settings.url:
            return f"a server tierbench does not start, once backends.{self.context.name}.url names one"
        return (f"a server tierbench does not start: {self.settings.url} ({self.settings.kind}, model "
                f"{self.model_name})")

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
        if transport == "grpc" and "grpc" in self.kind.transports() and not self.settings.grpc_url:
            return f"no gRPC address for this endpoint: set backends.{self.context.name}.grpc_url=HOST:PORT"
        return self.kind.unsupported_reason(transport, input_format)

    def _client_spec(self, transport: str, input_format: str, batch_size: int) -> ClientSpec:
        """A client's spec for this endpoint: its kind's client and URL, its gRPC metadata, its TLS files and
        credentials' variables (never their contents), the tensors its metadata named, the plain API's keys."""
        settings, meta = self.settings, self.meta
        spec = self._spec(self.kind.clients.get((transport, input_format), ""),
                          self.kind.client_url(settings, transport, self.model_name), self.model_name, input_format,
                          batch_size, kind=self.kind.spec_kind)
        fields = {"tls": settings.tls, "ca_file": settings.ca_file or "", "token_env": settings.token_env or "",
                  "basic_auth_env": settings.basic_auth_env or "", "client_cert": settings.client_cert or "",
                  "client_key": settings.client_key or "",
                  "grpc_metadata": tuple(sorted((str(k), str(v)) for k, v in (settings.grpc_metadata or {}).items()))}
        if meta is not None and meta.input_name:
            fields |= {"input_name": meta.input_name, "output_name": meta.output_name or spec.output_name}
        return replace(spec, **fields, **self.kind.spec_fields(settings, meta, self.context))

    def _probe_spec(self) -> ClientSpec:
        """What the checks before the trials connect with (HTTP, the endpoint's TLS and credentials)."""
        return self._client_spec("http", InputFormat.TENSOR, 1)

    def _check_files(self) -> None:
        """The TLS files exist here (the client's node reads them again when it connects)."""
        for key in ("ca_file", "client_cert", "client_key"):
            path = getattr(self.settings, key)
            if path and not os.path.isfile(path):
                raise EndpointError(f"backends.{self.context.name}.{key}={path!r}: no such file on "
                                    f"{self.context.node.hostname}: give the path of the PEM file")

    def start(self) -> ServerHandle:
        settings, name = self.settings, self.context.name
        self._check_files()
        spec = self._probe_spec()
        timeout_s = float(settings.probe_timeout_s)
        input_shape = tuple(getattr(self.context.model, "input_shape", ()))  # an image model's; none of a language one
        self.meta = meta = self.kind.check(settings, spec, name, input_shape, timeout_s,
                                           tuple(self.context.input_formats))
        problem = usage_problem(meta, name, getattr(self.context.model, "tokenizer", None))
        if problem:
            raise EndpointError(problem)
        if settings.metrics_url:
            self._check_metrics(spec)
        rtt_ms = round_trip_ms(settings.url, spec, name, timeout_s, path=self.kind.round_trip_path(settings))
        shown = f", input {meta.input_name} {list(meta.input_shape)}" if meta.input_name else ""
        log.info("%s: endpoint %s (%s) serves %s (%s%s); network round trip p50 %.2f ms", name, settings.url,
                 settings.kind, meta.name, meta.platform or "platform not stated", shown, rtt_ms)
        urls = {"http": settings.url, **({"grpc": settings.grpc_url} if settings.grpc_url else {})}
        params = {"endpoint_url": settings.url, "endpoint_kind": settings.kind, "endpoint_model": meta.name,
                  "endpoint_platform": meta.platform, "endpoint_tls": settings.tls,
                  "endpoint_client_certificate": bool(settings.client_cert),
                  "endpoint_authenticated": bool(settings.token_env or settings.basic_auth_env),
                  "endpoint_nodes": int(settings.nodes), "server_hostname": urlsplit(settings.url).hostname or ""}
        if settings.kind == "http":
            params["endpoint_path"] = settings.path
        if settings.grpc_url:
            params["endpoint_grpc"] = settings.grpc_url
        if settings.metrics_url:
            params["endpoint_metrics_url"] = settings.metrics_url
        params.update(meta.params)
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
                                f"{status}: give the server's Prometheus metrics URL (Triton: port 8002, "
                                "TorchServe: 8082), or null")
        return body.decode(errors="replace")

    def _check_metrics(self, spec: ClientSpec) -> None:
        """The server's metrics at `metrics_url` carry counters for the model, before any trial relies on them."""
        text = self._metrics_text(spec)
        model = self.meta.name if self.meta else self.model_name
        if self.kind.metrics_label(model) not in text or self.kind.metrics_marker not in text:
            raise EndpointError(f"backends.{self.context.name}.metrics_url: {self.settings.metrics_url} has no "
                                f"{self.kind.metrics_server} inference counters for model "
                                f"{model!r}: give the metrics URL of the server that serves it, or null")

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        """The server's cumulative counters for the model now; None without a metrics URL or when a read fails (the
        trial then has the client's view only)."""
        if not self.settings.metrics_url or self.meta is None:
            return None
        try:
            return self.kind.parse_counters(self._metrics_text(self._probe_spec()), self.meta.name)
        except (EndpointError, OSError) as exc:
            log.warning("%s: reading %s failed: %s", self.context.name, self.settings.metrics_url, exc)
            return None

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return self.kind.breakdown(before, after)

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        return self.kind.served_images(before, after)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        transport, _ = parse_protocol(protocol)
        return self._client_spec(transport, input_format, batch_size)

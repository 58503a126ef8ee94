"""PyTorch behind Ray Serve (`pytorch`): one Serve application per server group, replicas pinned to the tier,
reached over Serve's HTTP and gRPC ingresses, with or without `@serve.batch` server-side batching."""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import OmegaConf

from serving.backend import Backend, BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.process import free_ports

log = logging.getLogger(__name__)

CLIENTS = {"http": "serving.clients.ray_serve_http.RayServeHttpClient",
           "grpc": "serving.clients.ray_serve_grpc.RayServeGrpcClient"}
INPUT_FORMATS = ("jpeg", "tensor")
GRPC_SERVICER = "serving.ray_serve.proto.classifier_pb2_grpc.add_ImageClassifierServicer_to_server"


def _serve_ports(host: str) -> tuple[int, int | None]:
    """Start Serve's HTTP and gRPC proxies on free ports, or reuse the running instance's (Serve is one per
    cluster and silently ignores the options of a second `serve.start`). The gRPC port is None when a running
    Serve was started without our servicer. Serve's gRPC proxy listens on every address ([::]); Ray offers no
    host option for it."""
    import ray
    from ray import serve
    from ray.serve.context import _disconnect, _get_global_client

    # Serve caches its controller handle per process and trusts it while the job id matches, but job ids
    # restart at 01000000 with every new local cluster: a second sweep in one process (tests, Hydra's basic
    # launcher) would reach the first cluster's dead controller. Look it up afresh.
    _disconnect()
    client = _get_global_client(raise_if_no_controller_running=False)
    if client is not None:
        grpc_config = ray.get(client._controller.get_grpc_config.remote())
        has_ours = GRPC_SERVICER in (grpc_config.grpc_servicer_functions or [])
        return int(client.http_config.port), int(grpc_config.port) if has_ours else None
    http_port, grpc_port = free_ports(2, host)
    serve.start(http_options={"host": host, "port": http_port},
                grpc_options={"port": grpc_port, "grpc_servicer_functions": [GRPC_SERVICER]})
    return http_port, grpc_port


class RayServeTorchBackend(Backend):
    def __init__(self, context: BackendContext, num_replicas: int = 1, replica_num_cpus: float = 0.1,
                 max_ongoing_requests: int = 32, torch_threads: int | None = None, batching: bool = False,
                 max_batch_size: int | None = None, batch_wait_timeout_s: float = 0.0) -> None:
        super().__init__(context)
        self.num_replicas = num_replicas
        self.replica_num_cpus = replica_num_cpus
        self.max_ongoing_requests = max_ongoing_requests
        self.torch_threads = torch_threads
        self.batching = batching
        # Images per server batch; null: the model's max_batch_size (what Triton's dynamic batcher fills up to).
        self.max_batch_size = max_batch_size or int(context.model.max_batch_size)
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self.app_name = f"tierbench-{context.name}-{context.model.name}"
        self._running = False

    @property
    def device(self) -> str:
        return "cuda" if self.context.node.torch_cuda else "cpu"

    @classmethod
    def check_settings(cls, name: str, settings: dict[str, Any], model: Any) -> list[str]:
        problems = super().check_settings(name, settings, model)
        for key in ("num_replicas", "max_ongoing_requests"):
            value = settings.get(key, 1)
            if not isinstance(value, int) or value < 1:
                problems.append(f"backends.{name}.{key}={value!r}: must be a positive integer")
        size = settings.get("max_batch_size")
        if size is not None and (not isinstance(size, int) or not 0 < size <= model.max_batch_size):
            problems.append(f"backends.{name}.max_batch_size={size!r}: must be in 1..model.max_batch_size="
                            f"{model.max_batch_size} (images per server batch), or null for the model's")
        wait = settings.get("batch_wait_timeout_s", 0.0)
        if not isinstance(wait, int | float) or wait < 0:
            problems.append(f"backends.{name}.batch_wait_timeout_s={wait!r}: must be a number of seconds >= 0")
        if not settings.get("batching") and (size is not None or wait):
            problems.append(f"backends.{name}: max_batch_size / batch_wait_timeout_s only apply with "
                            "batching=true; set it, or remove them")
        return problems

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        if protocol not in CLIENTS:
            if protocol.endswith("shm"):
                return (f"{protocol}: shared-memory transport is a Triton feature; Ray Serve's ingress takes "
                        "requests over sockets only")
            return f"the Ray Serve deployment has no {protocol!r} ingress (supported: {sorted(CLIENTS)})"
        if input_format not in INPUT_FORMATS:
            return f"input format {input_format!r} not accepted (supported: {list(INPUT_FORMATS)})"
        return None

    def start(self) -> ServerHandle:
        from ray import serve

        from serving.ray_serve.deployment import TorchImageClassifier

        ctx = self.context
        started = time.monotonic()
        port, grpc_port = _serve_ports(ctx.host)
        actor_options = {"num_cpus": self.replica_num_cpus, **ctx.ray_options}
        batching = ({"max_batch_size": self.max_batch_size, "batch_wait_timeout_s": self.batch_wait_timeout_s}
                    if self.batching else None)
        app = TorchImageClassifier.options(
            num_replicas=self.num_replicas,
            max_ongoing_requests=self.max_ongoing_requests,
            ray_actor_options=actor_options,
        ).bind(OmegaConf.to_container(ctx.model, resolve=True), self.device, self.torch_threads, batching)
        route = f"/{ctx.name}/{ctx.model.name}"  # one per variant: several can be deployed at once
        self._running = True
        serve.run_many([serve.RunTarget(target=app, name=self.app_name, route_prefix=route)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        self._wait_running(ctx.start_timeout_s)
        log.info("%s: Ray Serve app %s running at http://%s:%d%s", ctx.name, self.app_name, ctx.host, port, route)
        urls = {"http": f"http://{ctx.host}:{port}{route}"}
        if grpc_port is not None:
            urls["grpc"] = f"{ctx.host}:{grpc_port}"
        return ServerHandle(
            server_mode="ray_serve",
            urls=urls,
            params={"device": self.device, "num_replicas": self.num_replicas, **self.batching_params()},
            startup_s=time.monotonic() - started,
        )

    def _wait_running(self, timeout_s: float) -> None:
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        deadline = time.monotonic() + timeout_s
        while True:
            status = serve.status().applications.get(self.app_name)
            if status is not None and status.status == ApplicationStatus.RUNNING:
                return
            if status is not None and status.status == ApplicationStatus.DEPLOY_FAILED:
                raise RuntimeError(f"Ray Serve app {self.app_name} failed to deploy: {status.message}")
            if time.monotonic() > deadline:
                detail = status.deployments if status is not None else "no status"
                raise TimeoutError(
                    f"Ray Serve app {self.app_name} not running after {timeout_s:.0f} s (replicas pending? "
                    f"a tier node must have {self.replica_num_cpus} free CPU and the tier resource): {detail}")
            time.sleep(0.5)

    def stop(self) -> dict[str, str]:
        from ray import serve

        if self._running:
            self._running = False
            # Only this group's app: Serve itself is shared by every tier on the cluster and ends with it.
            serve.delete(self.app_name)
        return {}

    def batching_params(self) -> dict[str, Any]:
        """Server-side batching in the terms both servers share (see TritonBackend.batching_params)."""
        on = self.batching
        return {"server_batching": on, "server_instances": self.num_replicas,
                "server_max_batch_size": self.max_batch_size if on else 0,
                "server_batch_wait_ms": self.batch_wait_timeout_s * 1000 if on else 0.0,
                "server_preferred_batch_sizes": ""}

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        if protocol not in handle.urls:
            raise RuntimeError("Ray Serve on this cluster was started without tierbench's gRPC servicer; restart "
                               f"Serve (serve.shutdown()) so it starts with {GRPC_SERVICER}")
        # gRPC routes by application name (metadata), HTTP by route prefix.
        name = self.app_name if protocol == "grpc" else self.context.model.name
        return self._spec(CLIENTS[protocol], handle.urls[protocol], name, input_format, batch_size)

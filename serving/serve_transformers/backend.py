"""transformers behind Ray Serve (`serve_transformers`): one Serve application per server group, its replicas on the
tier's node, answering the OpenAI API at the app's route prefix (serving/serve_transformers/deployment.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

from serving.backend import BackendContext, ServerHandle
from serving.generation.ceiling import TokenEngine
from serving.generation.server import LanguageServerBackend, wait_listed
from serving.pytorch.facts import TorchFacts
from serving.serve_apps import MEASURED_APP_SHUTDOWN, app_and_route, serve_ports, wait_app_running
from serving.serve_transformers.settings import ServeTransformersSettings
from serving.workloads.generative.model_folder import model_folder, random_weights

log = logging.getLogger(__name__)


class ServeTransformersBackend(LanguageServerBackend):
    settings: ServeTransformersSettings

    def __init__(self, context: BackendContext, settings: ServeTransformersSettings) -> None:
        super().__init__(context, settings)
        self.app_name, self.route = app_and_route(context)
        self._running = False

    @property
    def device(self) -> str:
        return self.context.node.facts(TorchFacts).device

    def runs_on(self) -> str:
        version = self.context.node.facts(TorchFacts).version
        return f"Ray Serve, transformers on torch {version} on {self.device}"

    def token_engine(self) -> TokenEngine:
        """transformers' `generate` with the replica's device, dtype and threads, up to `max_batch_size` at once."""
        from serving.generation.transformers_engine import resolved_dtype

        return TokenEngine("transformers", self.device, (("dtype", resolved_dtype(self.settings.dtype, self.device)),
                                                         ("threads", self.settings.torch_threads)),
                           self.settings.max_batch_size)

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        facts = self.context.node.facts(TorchFacts)
        if not facts.version:
            return f"torch is not installed on node {self.context.node.hostname} ({facts.problem})"
        return super().unsupported_reason(protocol, input_format)

    def gpu_tier_reason(self) -> str | None:
        ctx = self.context
        reason = super().gpu_tier_reason()
        if reason or not ctx.requires_gpu:
            return reason
        return ctx.node.facts(TorchFacts).gpu_tier_reason(ctx.node, ctx.tier, "the replica")

    def actor_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.settings.replica_num_cpus, **self.context.ray_options}
        if self.device == "cuda" and self.context.node.ray_gpus > 0 and self.settings.replica_num_gpus > 0:
            options["num_gpus"] = self.settings.replica_num_gpus
        return options

    def _deployment_options(self, ray_actor_options: dict[str, Any]) -> dict[str, Any]:
        return {"num_replicas": self.settings.num_replicas, "max_ongoing_requests": self.settings.max_ongoing_requests,
                "ray_actor_options": ray_actor_options}

    def _app_args(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"model": asdict(self.context.model), "device": self.device, "dtype": self.settings.dtype,
                "torch_threads": self.settings.torch_threads, "max_batch_size": self.settings.max_batch_size,
                "batch_wait_timeout_s": self.settings.batch_wait_timeout_s, "batcher": self.settings.batcher}

    def start(self) -> ServerHandle:
        from ray import serve

        from serving.serve_transformers.deployment import TransformersLanguageModel

        ctx = self.context
        started = time.monotonic()
        model_folder(ctx.model)  # written (an architecture) or found here first: a bad folder fails before Serve
        port, _ = serve_ports(ctx.host, ctx.start_timeout_s)
        app = TransformersLanguageModel.options(**self._deployment_options(self.actor_options()),
                                                **MEASURED_APP_SHUTDOWN).bind(**self._app_args())
        self._running = True
        serve.run_many([serve.RunTarget(target=app, name=self.app_name, route_prefix=self.route)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        wait_app_running(self.app_name, self.start_timeout_s,
                         f"replicas pending? a tier node must have the resources {self.actor_options()}; or a slow "
                         f"model load: raise backends.{ctx.name}.start_timeout_s")
        url = f"http://{ctx.client_host}:{port}{self.route}"
        wait_listed(url, self.served_name, self.start_timeout_s, what=f"Ray Serve app {self.app_name}")
        info = serve.get_app_handle(self.app_name).info.remote().result(timeout_s=ctx.request_timeout_s)
        log.info("%s: Ray Serve app %s serving %s at %s", ctx.name, self.app_name, self.served_name, url)
        params = {"device": info["device"], "torch_dtype": info["dtype"], "torch_threads": info["torch_threads"],
                  "num_replicas": self.settings.num_replicas, "server_batching": self.settings.max_batch_size > 1,
                  "server_max_batch_size": self.settings.max_batch_size,
                  "server_batch_wait_ms": self.settings.batch_wait_timeout_s * 1000,
                  "server_batcher": self.settings.batcher if self.settings.max_batch_size > 1 else "",
                  "server_instances": self.settings.num_replicas, "random_weights": random_weights(ctx.model)}
        return ServerHandle(server_mode="serve_transformers", urls={"http": url}, params=params,
                            startup_s=time.monotonic() - started,
                            metrics={"server_load_s": float(info["load_s"]),
                                     "server_warmup_s": float(info["warmup_s"])},
                            node_id=info.get("node_id"), gpu_ids=tuple(info.get("gpu_ids") or ()),
                            on_gpu=info["device"] == "cuda", processes=(info["pid"],))

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        """The replica's cumulative generates, conversations, tokens and generating seconds (one replica's, the one
        that answers: with several, a share of the whole)."""
        from ray import serve

        if self.settings.num_replicas != 1:
            return None
        try:
            return serve.get_app_handle(self.app_name).counters.remote().result(
                timeout_s=self.context.request_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the trial keeps the client's view
            log.warning("%s: reading the replica's counters failed: %s", self.context.name, exc)
            return None

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """What the replica's generates did between two snapshots: conversations per generate
        (`server_batch_avg`), and its output tokens/s while generating (`server_generating_tokens_s`)."""
        delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
        out: dict[str, float] = {}
        if delta.get("batches", 0) > 0:
            out["server_batch_avg"] = delta["conversations"] / delta["batches"]
        if delta.get("generate_s", 0) > 0:
            out["server_generating_tokens_s"] = delta["tokens"] / delta["generate_s"]
        return out

    def stop(self) -> dict[str, str]:
        from ray import serve

        if self._running:
            self._running = False
            serve.delete(self.app_name)  # only this group's app: Serve is the cluster's, shared by every tier job
        return {}

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """`serve_config.yaml`: this deployment with these settings as `serve deploy` / `serve run` take it."""
        import yaml

        from serving.serve_transformers.deployment import APP_BUILDER, TransformersLanguageModel

        model = self.context.model.name
        resources = {k: v for k, v in self.actor_options().items() if k in ("num_cpus", "num_gpus")}
        deployment = {"name": TransformersLanguageModel.name, **self._deployment_options(resources)}
        app = {"name": f"tierbench-{model}".replace("/", "-"), "route_prefix": "/", "import_path": APP_BUILDER,
               "args": self._app_args(), "deployments": [deployment]}
        header = (f"# Ray Serve config for {model} with the settings of backend entry {self.context.name}: "
                  "`serve deploy serve_config.yaml` (or `serve run`); OpenAI API at /v1 (tierbench installed on the "
                  "cluster).\n")
        if random_weights(self.context.model):
            header += ("# Measured with random weights of the model's architecture: give the model's folder as "
                       "args.model.weights (and drop architecture) to serve the real one.\n")
        return {"serve_config.yaml": header + yaml.safe_dump({"applications": [app]}, sort_keys=False)}

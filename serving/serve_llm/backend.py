"""Ray Serve LLM (`serve_llm`): `ray.serve.llm.build_openai_app` of one `LLMConfig` (vLLM inside Serve replicas),
one Serve app per server group under a route of its own (tier, node, server), reached through Serve's HTTP proxy by
the generative workload's client (`LanguageServerBackend`).

Stopping deletes the app: Serve stops its replicas and removes each replica's placement group as it stops it (Ray's
`serve/_private/deployment_state.py`, `ActorReplicaWrapper.check_stopped`), the engine's GPUs with it."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from serving.backend import BackendContext, ServerHandle
from serving.generation.ceiling import TokenEngine
from serving.generation.server import LanguageServerBackend, wait_listed
from serving.serve_apps import MEASURED_APP_SHUTDOWN, app_and_route, serve_ports, wait_app_running
from serving.serve_llm import config as llm
from serving.serve_llm.settings import ServeLlmSettings
from serving.vllm_facts import VllmFacts, vllm_reason
from serving.workloads.generative.model_folder import random_weights

log = logging.getLogger(__name__)


def folder_on_node(model: dict[str, Any]) -> str:
    """The model's folder on the node this runs on (written there for an architecture): a Ray task placed beside
    the replicas, since Serve LLM loads `model_source` on the replica's node."""
    from serving.workloads.generative.model import LanguageModelConfig
    from serving.workloads.generative.model_folder import model_folder

    return str(model_folder(LanguageModelConfig(**model)))


class ServeLlmBackend(LanguageServerBackend):
    settings: ServeLlmSettings

    def __init__(self, context: BackendContext, settings: ServeLlmSettings) -> None:
        super().__init__(context, settings)
        self.app_name, self.route = app_and_route(context, "tierbench-llm")
        self._running = False

    @property
    def random_weights(self) -> bool:
        return random_weights(self.context.model)

    def engine_args(self) -> dict[str, Any]:
        return self.settings.engine_args(self.context.model, self.random_weights)

    def token_engine(self) -> TokenEngine:
        return self.settings.token_engine(self.context.model)

    def runs_on(self) -> str:
        version = self.context.node.facts(VllmFacts).version
        return f"Ray Serve LLM, vLLM {version} on {self.context.node.gpu_name}".replace("  ", " ")

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        return super().unsupported_reason(protocol, input_format) or \
            vllm_reason(self.context.node, self.settings.tensor_parallel_size, "Ray Serve LLM")

    @property
    def tier_resources(self) -> dict[str, float]:
        """The custom resources that put replicas and ingress on the tier's nodes."""
        return dict(self.context.ray_options.get("resources") or {})

    def llm_config(self, model_source: str, measured: bool = True) -> dict[str, Any]:
        """The app's `LLMConfig`; the measured one also asks for the tier's resources and stops fast."""
        return llm.llm_config(self.settings, self.served_name, model_source, self.engine_args(),
                              self.tier_resources if measured else None, MEASURED_APP_SHUTDOWN if measured else None)

    def start(self) -> ServerHandle:
        import ray
        from ray import serve
        from ray.serve.llm import build_openai_app

        ctx = self.context
        started = time.monotonic()
        port, _ = serve_ports(ctx.host, ctx.start_timeout_s)
        task = ray.remote(folder_on_node).options(num_cpus=0, **ctx.ray_options)
        folder = ray.get(task.remote(asdict(ctx.model)), timeout=ctx.start_timeout_s)
        config = self.llm_config(folder)
        app = build_openai_app(llm.serving_args(config, self.tier_resources))
        self._running = True
        serve.run_many([serve.RunTarget(target=app, name=self.app_name, route_prefix=self.route)],
                       wait_for_ingress_deployment_creation=False, wait_for_applications_running=False)
        hint = (f"replicas pending? each asks a tier node for {self.settings.tensor_parallel_size} x "
                f"{self.settings.num_gpus:g} GPU; or a slow load: raise backends.{ctx.name}.start_timeout_s")
        wait_app_running(self.app_name, self.start_timeout_s, hint)
        url = f"http://{ctx.client_host}:{port}{self.route}"
        left = max(1.0, self.start_timeout_s - (time.monotonic() - started))
        wait_listed(url, self.served_name, left, what=f"Ray Serve LLM app {self.app_name}")
        log.info("%s: Ray Serve LLM app %s serving %s at %s", ctx.name, self.app_name, self.served_name, url)
        params = {"vllm_version": ctx.node.facts(VllmFacts).version, "random_weights": self.random_weights,
                  "serve_llm_replicas": self.settings.num_replicas, "serve_llm_autoscaling": self.settings.autoscaling,
                  "server_num_gpus": self.settings.num_gpus, **self.settings.engine_params()}
        if self.settings.autoscaling:
            params.update(serve_llm_min_replicas=self.settings.min_replicas,
                          serve_llm_max_replicas=self.settings.max_replicas)
        return ServerHandle(server_mode="serve_llm", urls={"http": url}, params=params,
                            startup_s=time.monotonic() - started,
                            artifacts={llm.DEPLOY_FILE: self._yaml(folder)}, node_id=ctx.node.ray_node_id or None)

    def stop(self) -> dict[str, str]:
        from ray import serve

        if self._running:
            self._running = False
            # Only this group's app (Serve is shared by every tier on the cluster); its replicas' placement groups
            # are removed by Serve as each replica stops.
            serve.delete(self.app_name)
        return {}

    def _yaml(self, folder: str) -> str:
        return llm.serve_yaml(self.context.name, self.app_name, self.route, self.llm_config(folder, measured=False),
                              self.random_weights)

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """`serve-llm.yaml`: a Serve config of the measured settings (the measured app's own, else rendered from the
        settings, the model's folder as named in the config)."""
        if llm.DEPLOY_FILE in rendered:
            return {llm.DEPLOY_FILE: rendered[llm.DEPLOY_FILE]}
        model = self.context.model
        return {llm.DEPLOY_FILE: self._yaml(model.weights or f"<the folder of {model.name}'s architecture>")}

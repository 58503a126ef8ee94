"""vLLM's own server (`vllm`): `vllm serve` on the tier's node, from a `VllmHost` actor that owns its process group,
reached through its OpenAI-compatible API by the generative workload's client (`LanguageServerBackend`). A model
given as an architecture runs random weights (`--load-format dummy`): the size, not the answers, sets the cost.

Its Prometheus metrics tell a window's bound: KV-cache-bound (preemptions, the cache near full) or queue-bound
(requests waiting for a seat among max_num_seqs) (`serving.vllm_metrics`)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from serving.backend import BackendContext, ServerHandle
from serving.generation.ceiling import TokenEngine
from serving.generation.server import LanguageServerBackend
from serving.host_actor import host_counters, place_host, stop_host
from serving.vllm.command import deploy_script
from serving.vllm.settings import VllmSettings
from serving.vllm_facts import VllmFacts, vllm_reason
from serving.vllm_metrics import breakdown
from serving.workloads.generative.model_folder import random_weights

log = logging.getLogger(__name__)
HOST_CALL_MARGIN_S = 60.0  # beyond the server's own start timeout: the folder, and the actor's own start
DEPLOY_FILE = "vllm-serve.sh"


class VllmBackend(LanguageServerBackend):
    settings: VllmSettings

    def __init__(self, context: BackendContext, settings: VllmSettings) -> None:
        super().__init__(context, settings)
        self._actor: Any = None  # the VllmHost while the server runs

    @property
    def random_weights(self) -> bool:
        return random_weights(self.context.model)

    def engine_args(self) -> dict[str, Any]:
        return self.settings.engine_args(self.context.model, self.random_weights)

    def token_engine(self) -> TokenEngine:
        return self.settings.token_engine(self.context.model)

    def runs_on(self) -> str:
        version = self.context.node.facts(VllmFacts).version
        return f"vLLM {version} on {self.context.node.gpu_name}".replace("  ", " ")

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        return super().unsupported_reason(protocol, input_format) or \
            vllm_reason(self.context.node, self.settings.tensor_parallel_size, "vLLM")

    def actor_options(self) -> dict[str, Any]:
        """The host's placement: the tier's node, and its GPUs where Ray schedules them (Ray then pins the actor, and
        the server it starts, to them with CUDA_VISIBLE_DEVICES)."""
        options: dict[str, Any] = {"num_cpus": 1, **self.context.ray_options}
        if self.context.node.ray_gpus > 0 and self.settings.gpu_share > 0:
            options["num_gpus"] = self.settings.gpu_share
        return options

    def start(self) -> ServerHandle:
        import ray

        from serving.vllm.host import VllmHost

        ctx = self.context
        self._actor = place_host(VllmHost, self.actor_options(), (asdict(ctx.model), self.engine_args(), ctx.host),
                                 ctx, "vLLM")
        try:
            info: dict[str, Any] = ray.get(self._actor.start.remote(self.start_timeout_s),
                                           timeout=self.start_timeout_s + HOST_CALL_MARGIN_S)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"{ctx.name}: vLLM did not list {self.served_name!r} within {self.start_timeout_s:g} s "
                               f"(raise backends.{ctx.name}.start_timeout_s for a large model)") from exc
        return self._handle(info)

    def _handle(self, info: dict[str, Any]) -> ServerHandle:
        ctx = self.context
        url = f"http://{ctx.client_host}:{info['port']}"
        log.info("%s: vLLM %s serving %s at %s", ctx.name, info["version"], self.served_name, url)
        params = {"vllm_version": info["version"], "server_hostname": info["hostname"],
                  "server_node_id": info.get("node_id") or "", "random_weights": self.random_weights,
                  **self.settings.engine_params()}
        if "num_gpus" in self.actor_options():
            params["server_num_gpus"] = self.settings.gpu_share
        return ServerHandle(
            server_mode="vllm", urls={"http": url, "metrics": f"{url}/metrics"}, params=params,
            startup_s=float(info["startup_s"]), metrics={"server_ready_s": float(info["ready_s"])},
            artifacts={DEPLOY_FILE: self._script(info["folder"])}, node_id=info.get("node_id"),
            gpu_ids=tuple(info.get("gpu_ids") or ()),
            processes=(info["launcher_pid"],) if info.get("launcher_pid") else ())

    def stop(self) -> dict[str, str]:
        actor, self._actor = self._actor, None
        return stop_host(actor, self.context, "vLLM")

    def abort_cause(self, server_logs: dict[str, str]) -> str | None:
        """The last error line of vLLM's log (an out-of-memory, an engine core that died)."""
        lines = server_logs.get("vllm.log", "").splitlines()
        found = [line for line in lines if "Error" in line or "error:" in line]
        return found[-1].strip() if found else None

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        return host_counters(self._actor)

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return breakdown(before, after)

    def _script(self, folder: str) -> str:
        return deploy_script(self.context.name, self.served_name, folder, self.context.host, self.engine_args(),
                             self.random_weights)

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """`vllm-serve.sh`: the measured server's command line (its own, saved with its files, else rendered from
        the settings, the model's folder as named in the config)."""
        if DEPLOY_FILE in rendered:
            return {DEPLOY_FILE: rendered[DEPLOY_FILE]}
        model = self.context.model
        folder = model.weights or f"<the folder of {model.name}'s architecture, as tierbench writes it>"
        return {DEPLOY_FILE: self._script(folder)}

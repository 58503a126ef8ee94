"""Triton streaming a language model's tokens (`triton_stream`): a decoupled Python-backend model running transformers
(`python_backend/model.py`) in a `tritonserver` owned by a `TritonStreamHost` actor on the tier's node, measured per
token through Triton's generate endpoint (`/v2/models/<model>/generate_stream`, one server-sent event per token) by
`serving.triton_stream.client`, or over gRPC through its stream (`ModelStreamInfer`) by
`serving.triton_stream.grpc_client`."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any, ClassVar

from serving.backend import BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.generation.ceiling import TokenEngine
from serving.generation.server import LanguageServerBackend
from serving.host_actor import host_counters, place_host, stop_host
from serving.pytorch.facts import TorchFacts
from serving.triton_stream.client import TritonGenerateSpec
from serving.triton_stream.facts import TransformersFacts
from serving.triton_stream.settings import TritonStreamSettings
from serving.tritonserver.facts import TritonFacts
from serving.tritonserver.installation import NO_TRITON_DOCS, TritonServerKind
from serving.workloads.generative.api import PinOutput, RequestFormat

log = logging.getLogger(__name__)
CLIENTS = {"http": "serving.triton_stream.client.TritonGenerateClient",  # generate_stream, server-sent events
           "grpc": "serving.triton_stream.grpc_client.TritonGrpcStreamClient"}  # ModelStreamInfer
STREAMED = (RequestFormat.CHAT_STREAM, RequestFormat.COMPLETIONS_STREAM)


def triton_model_name(name: str) -> str:
    """The model's name in Triton's repository (a folder name): the served name with anything but letters, digits,
    `-`, `_` and `.` replaced by `_` (`org/model` -> `org_model`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "model"


class TritonStreamBackend(LanguageServerBackend):
    settings: TritonStreamSettings
    pin_output: ClassVar[PinOutput] = PinOutput.IGNORE_EOS  # the model's `ignore_eos` input

    def __init__(self, context: BackendContext, settings: TritonStreamSettings) -> None:
        super().__init__(context, settings)
        self._actor: Any = None  # the TritonStreamHost while the server runs

    @property
    def served_name(self) -> str:
        return triton_model_name(self.context.model.name)

    @property
    def device(self) -> str:
        """Where the model computes: the setting, auto being the GPU where the node's torch sees one."""
        if self.settings.device != "auto":
            return self.settings.device
        return self.context.node.facts(TorchFacts).device

    @property
    def server_kind(self) -> TritonServerKind:
        native = self.context.node.facts(TritonFacts).native and self.settings.server != TritonServerKind.BUNDLED
        return TritonServerKind.NATIVE if native else TritonServerKind.BUNDLED

    def token_engine(self) -> TokenEngine:
        """transformers' `generate` with the model instance's device and dtype, up to `max_batch_size` at once."""
        from serving.generation.transformers_engine import resolved_dtype

        return TokenEngine("transformers", self.device, (("dtype", resolved_dtype(self.settings.dtype, self.device)),),
                           self.settings.max_batch_size)

    def runs_on(self) -> str:
        triton = "NVIDIA's Triton" if self.server_kind is TritonServerKind.NATIVE else "bundled Triton"
        return f"{triton} (Python backend), transformers on {self.device}"

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        if protocol not in CLIENTS:
            return f"the streaming Triton has no {protocol!r} client (supported: {sorted(CLIENTS)})"
        if input_format not in tuple(str(f) for f in STREAMED):
            return (f"{input_format}: the streaming Triton answers token by token (a stream): use "
                    f"{[str(f) for f in STREAMED]}")
        reason = self.gpu_tier_reason()
        if reason:
            return reason
        triton = node.facts(TritonFacts)
        if self.settings.server == TritonServerKind.NATIVE and not triton.native:
            return (f"server=native but node {node.hostname} has no tritonserver on PATH: run NVIDIA's Triton "
                    f"container there, or server=auto for the bundled server ({NO_TRITON_DOCS})")
        if not triton.native and triton.bundled_problem:
            return f"no Triton on node {node.hostname}: no tritonserver on PATH, and {triton.bundled_problem}"
        torch = node.facts(TorchFacts)
        if not torch.version and torch.problem:
            return f"the model runs in torch, and on node {node.hostname} {torch.problem}"
        transformers = node.facts(TransformersFacts)
        if transformers.problem:
            return f"the model runs in transformers, and on node {node.hostname} {transformers.problem}"
        if self.device == "cuda" and not torch.cuda:
            return (f"backends.{self.context.name}.device=cuda but torch on node {node.hostname} sees no GPU "
                    f"({torch.problem or torch.describe(node)}): device=auto or cpu")
        if self.context.requires_gpu and self.device == "cpu":
            return (f"backends.{self.context.name}.device=cpu on tier {self.context.tier}, a GPU tier: a CPU figure is "
                    "never filed under a GPU tier (device=auto)")
        return None

    def actor_options(self) -> dict[str, Any]:
        """On the tier's node, holding a GPU share where the model computes on a GPU Ray schedules."""
        options: dict[str, Any] = {"num_cpus": 0.01, **self.context.ray_options}
        if self.device == "cuda" and self.context.node.ray_gpus > 0 and self.settings.num_gpus > 0:
            options["num_gpus"] = self.settings.num_gpus
        return options

    def variant_options(self) -> dict[str, Any]:
        """What the host renders, but the model's folder (resolved on the server's node)."""
        s = self.settings
        return {"dtype": s.dtype, "gpu": self.device == "cuda", "instances": s.instances,
                "max_batch_size": s.max_batch_size, "batch_wait_us": round(s.batch_wait_ms * 1000)}

    def start(self) -> ServerHandle:
        import ray

        from serving.triton_stream.host import TritonStreamHost

        ctx = self.context
        args = (ctx.model, self.served_name, self.variant_options(), self.settings.server, ctx.host)
        self._actor = place_host(TritonStreamHost, self.actor_options(), args, ctx, "Triton (streaming)")
        # + writing an architecture's folder on first use
        info: dict[str, Any] = ray.get(self._actor.start.remote(self.start_timeout_s),
                                       timeout=self.start_timeout_s + 60)
        return self.handle(info)

    def handle(self, info: dict[str, Any]) -> ServerHandle:
        """The running server as the sweep sees it, from what its host returned."""
        ctx, s = self.context, self.settings
        endpoints, host = info["endpoints"], ctx.client_host
        log.info("%s: %s streaming %s on %s", ctx.name, info["server_mode"], self.served_name, self.device)
        params = {"device": self.device, "dtype": s.dtype, "server_instances": s.instances,
                  "server_batching": s.max_batch_size > 1, "server_max_batch_size": s.max_batch_size,
                  "server_batch_wait_ms": float(s.batch_wait_ms) if s.max_batch_size > 1 else 0.0,
                  "random_weights": bool(info["random_weights"]), "server_model_folder": info["model_folder"],
                  "server_hostname": info["hostname"], "server_node_id": info["node_id"]}
        if info.get("gpu_ids"):
            params["server_gpu_ids"] = ",".join(str(i) for i in info["gpu_ids"])
        return ServerHandle(
            server_mode=info["server_mode"],
            urls={"http": f"http://{host}:{endpoints['http_port']}", "grpc": f"{host}:{endpoints['grpc_port']}",
                  "metrics": f"http://{host}:{endpoints['metrics_port']}/metrics"},
            params=params, startup_s=float(info["startup_s"]), artifacts=dict(info["rendered"]),
            node_id=info.get("node_id"), gpu_ids=tuple(info.get("gpu_ids") or ()), on_gpu=self.device == "cuda",
            processes=(info["pid"],) if info.get("pid") else ())

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        """Triton's own counters around each window: its executions are the generates, so the requests per execution
        are the conversations each generate carried (`server_batch_avg`)."""
        if self._actor is None:
            return None
        try:
            return host_counters(self._actor)
        except Exception as exc:  # noqa: BLE001 - the trial keeps the client's view
            log.warning("%s: reading Triton's counters failed: %s", self.context.name, exc)
            return None

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        from serving.oip.triton_metrics import breakdown

        return breakdown(before, after)

    def stop(self) -> dict[str, str]:
        actor, self._actor = self._actor, None
        return stop_host(actor, self.context, "Triton (streaming)")

    def abort_cause(self, server_logs: dict[str, str]) -> str | None:
        from serving.tritonserver.server import abort_cause

        return abort_cause(server_logs.get("tritonserver.log", ""))

    def broke_under(self, first_errors: str) -> bool:
        # The Python backend answers "Stub process '<instance>' is not healthy" while a stub misses its health check.
        return "Stub process" in first_errors and "is not healthy" in first_errors

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        spec = self._spec(CLIENTS[protocol], handle.urls[protocol], self.served_name, input_format, batch_size,
                          kind=TritonGenerateSpec)
        return replace(spec, pin_output=str(self.pin_output), tokenizer=self.context.model.tokenizer or "")

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """The model's folder as the server that measured it loaded it: `<model>/config.pbtxt` and
        `<model>/1/model.py` (its `model_folder` parameter names the folder on the measured node: point it at the
        model's folder where it is deployed)."""
        from serving.triton_stream.repository import MODEL_FILE

        config = rendered.get("config.pbtxt")
        if config is None:
            return {}
        name = self.served_name
        return {f"{name}/config.pbtxt": config,
                f"{name}/1/model.py": rendered.get("model.py") or MODEL_FILE.read_text()}

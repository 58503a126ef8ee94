"""What every server running the model in PyTorch (`serving.pytorch.runner`) shares as a `Backend`: Ray Serve's
replica, the FastAPI service and TorchServe's workers compute on torch's device of the node, in the precision of their
settings, and ask Ray for the same share of it. Each extends `TorchBackend` with how its server takes requests."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

from serving.backend import Backend, BackendContext
from serving.model_config import ModelSource
from serving.pytorch.facts import TorchFacts
from serving.pytorch.settings import TorchSettings
from serving.runtime import Runtime
from serving.workloads.image.formats import InputFormat


class TorchBackend(Backend):
    settings: TorchSettings
    # What computes on the device, as a refusal names it (e.g. "the replica", "TorchServe's workers").
    computes: ClassVar[str]
    # What takes the requests, as a refusal names it (e.g. "Ray Serve's ingress", "TorchServe").
    ingress: ClassVar[str]

    def __init__(self, context: BackendContext, settings: TorchSettings) -> None:
        super().__init__(context, settings)
        self.options = settings.torch_options()

    @property
    def numerics(self) -> str:
        """fp16 with half precision (compared with the fp16 tolerance, as TensorRT FP16's are), bf16 with bf16."""
        return self.settings.precision

    @property
    def device(self) -> str:
        return self.context.node.facts(TorchFacts).device

    @property
    def actor_cpus(self) -> float:
        """The CPUs the server's actor asks Ray for: a host actor only starts and watches its server."""
        return 0.01

    @property
    @abstractmethod
    def actor_gpus(self) -> float:
        """The GPU fraction the server's actor asks for where Ray schedules GPUs (the setting that says it)."""

    def actor_options(self) -> dict[str, Any]:
        """The actor's placement: the tier's node, and a GPU fraction where Ray schedules GPUs (Ray then pins the
        actor, and the processes it starts, to that GPU with CUDA_VISIBLE_DEVICES)."""
        options: dict[str, Any] = {"num_cpus": self.actor_cpus, **self.context.ray_options}
        if self.device == "cuda" and self.context.node.ray_gpus > 0 and self.actor_gpus > 0:
            options["num_gpus"] = self.actor_gpus
        return options

    def runtime(self) -> Runtime:
        return self.settings.runtime(self.device)

    def torch_runs_on(self) -> str:
        """`runs_on`'s torch part: its version and device."""
        version = self.context.node.facts(TorchFacts).version
        return f"torch {version + ' ' if version else ''}on {self.device}"

    def gpu_tier_reason(self) -> str | None:
        """A GPU tier needs torch to see the node's GPU: a CPU build, or a CUDA build the driver cannot run, would
        put the server on the CPU."""
        ctx = self.context
        reason = super().gpu_tier_reason()
        if reason or not ctx.requires_gpu:
            return reason
        return ctx.node.facts(TorchFacts).gpu_tier_reason(ctx.node, ctx.tier, self.computes)

    def transport_reason(self, protocol: str, input_format: str, clients: Iterable[str]) -> str | None:
        """A protocol the server has no client for (shared memory is Triton's alone), or an input format no server
        takes; None when the server takes both."""
        if protocol not in clients:
            if protocol.endswith("shm"):
                return (f"{protocol}: shared-memory transport is a Triton feature; {self.ingress} takes requests over "
                        "sockets only")
            return f"{self.ingress} has no {protocol!r} ingress (supported: {sorted(clients)})"
        if input_format not in list(InputFormat):
            return f"input format {input_format!r} not accepted (supported: {[str(f) for f in InputFormat]})"
        return None

    def model_reason(self) -> str | None:
        """Why PyTorch cannot run the model: an ONNX file. None when it can."""
        model = self.context.model
        if ModelSource(model.source).pytorch:
            return None
        return (f"model {model.name} is an ONNX file (model.source={model.source}): PyTorch cannot run it; the Triton "
                "backends serve it")

    def torch_reason(self) -> str | None:
        """Why torch on this node cannot run the model as the settings ask: a GPU tier it cannot keep, or an option
        the node lacks (half precision without a GPU). None when it can."""
        reason = self.gpu_tier_reason()
        if reason:
            return reason
        reason = self.options.unsupported_reason(self.device)
        node = self.context.node
        return f"{reason}; node {node.hostname} has none ({node.gpu_name})" if reason else None

    def torch_params(self, model_file: str | None, gpu_ids: Any) -> dict[str, Any]:
        """Trial params of how torch ran the model: the copy of its file the server loaded (`serving.model_files`),
        torch.compile's mode and backend, the GPUs Ray gave the server."""
        params: dict[str, Any] = {}
        if model_file:
            params["server_model_file"] = model_file
        if self.options.compile:
            params["torch_compile_mode"] = self.options.compile_mode or "default"
            params["torch_compile_backend"] = self.options.compile_backend
        if gpu_ids:
            params["server_gpu_ids"] = ",".join(str(i) for i in gpu_ids)
        return params

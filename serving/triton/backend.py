"""Triton serving the model as ONNX: ONNX Runtime with the CUDA EP (`triton_onnx`) or the TensorRT EP
(`triton_trt`), over HTTP and gRPC (optionally with shared-memory tensors), from a `TritonServerHost` actor on
the tier's node. Tensor input goes to the classifier; JPEG input to the `<model>_jpeg` ensemble, which
decodes and preprocesses on the server (`serving.triton.ensemble`)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from serving.backend import Backend, BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.protocols import parse_protocol

log = logging.getLogger(__name__)

CLIENTS = {
    "http": "serving.clients.triton_http.TritonHttpClient",
    "grpc": "serving.clients.triton_grpc.TritonGrpcClient",
}
INPUT_FORMATS = ("tensor", "jpeg")
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                  "tensorrt": "TensorrtExecutionProvider"}


class TritonBackend(Backend):
    def __init__(self, context: BackendContext, accelerator: str = "cuda", instance_count: int = 1,
                 ort_threads: int | None = None, fp16: bool = False, dynamic_batching: bool = False,
                 max_queue_delay_us: int = 0, preferred_batch_sizes: list[int] | None = None,
                 preprocess_instance_count: int | None = None) -> None:
        super().__init__(context)
        self.requested_accelerator = accelerator
        self.instance_count = instance_count
        self.ort_threads = ort_threads
        self.fp16 = fp16
        self.dynamic_batching = dynamic_batching
        self.max_queue_delay_us = max_queue_delay_us
        self.preferred_batch_sizes = list(preferred_batch_sizes or [])
        self.preprocess_instance_count = preprocess_instance_count
        self._actor = None

    @classmethod
    def check_settings(cls, name: str, settings: dict[str, Any], model: Any) -> list[str]:
        problems = super().check_settings(name, settings, model)
        for key in ("instance_count", "preprocess_instance_count"):
            value = settings.get(key)
            if value is not None and (not isinstance(value, int) or value < 1):
                problems.append(f"backends.{name}.{key}={value!r}: must be a positive integer"
                                + (" (or null: one per core)" if key.startswith("preprocess") else ""))
        delay = settings.get("max_queue_delay_us", 0)
        if not isinstance(delay, int) or delay < 0:
            problems.append(f"backends.{name}.max_queue_delay_us={delay!r}: must be an integer >= 0 (microseconds)")
        for size in settings.get("preferred_batch_sizes") or []:
            if not isinstance(size, int) or not 0 < size <= model.max_batch_size:
                problems.append(f"backends.{name}.preferred_batch_sizes has {size!r}: each must be in "
                                f"1..model.max_batch_size={model.max_batch_size}")
        if not settings.get("dynamic_batching") and (settings.get("preferred_batch_sizes")
                                                    or settings.get("max_queue_delay_us")):
            problems.append(f"backends.{name}: max_queue_delay_us / preferred_batch_sizes only apply with "
                            "dynamic_batching=true; set it, or remove them")
        return problems

    @property
    def numerics(self) -> str:
        return "fp16" if self.fp16 else "fp32"

    @property
    def accelerator(self) -> str:
        """What actually runs: the CUDA EP falls back to ONNX Runtime's CPU EP on a node without a GPU."""
        if self.requested_accelerator == "cuda" and not self.context.node.has_gpu:
            return "cpu"
        return self.requested_accelerator

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        wire, shared_memory = parse_protocol(protocol)
        if wire not in CLIENTS:
            return f"Triton has no {protocol!r} client here (supported: {sorted(CLIENTS)})"
        if shared_memory == "cuda" and not node.has_gpu:
            return f"CUDA shared memory needs an NVIDIA GPU; node {node.hostname} has none ({node.gpu_name})"
        if self.accelerator == "tensorrt" and not node.has_gpu:
            return (f"the TensorRT execution provider needs an NVIDIA GPU; node {node.hostname} has none "
                    f"({node.gpu_name})")
        provider = PROVIDER_NAMES[self.accelerator]
        if self.accelerator != "cpu" and not node.native_triton and provider not in node.ort_providers:
            return (f"onnxruntime on node {node.hostname} lacks {provider} (has {list(node.ort_providers)}): "
                    "install tierbench[gpu] there, or run NVIDIA's Triton container")
        if input_format not in INPUT_FORMATS:
            return f"input format {input_format!r} not accepted (supported: {list(INPUT_FORMATS)})"
        return None

    def start(self) -> ServerHandle:
        import ray

        from serving.triton.host import TritonServerHost

        ctx = self.context
        config_text = (Path(ctx.model_repository) / ctx.model.name / "config.pbtxt").read_text()
        variant = {"accelerator": self.accelerator, "instance_count": self.instance_count,
                   "ort_threads": self.ort_threads, "fp16": self.fp16, "dynamic_batching": self.dynamic_batching,
                   "max_queue_delay_us": self.max_queue_delay_us,
                   "preferred_batch_sizes": tuple(self.preferred_batch_sizes)}
        actor_cls = ray.remote(TritonServerHost).options(num_cpus=0.01, **ctx.ray_options)
        self._actor = actor_cls.remote(OmegaConf.to_container(ctx.model, resolve=True), config_text, variant,
                                       ctx.triton_server, ctx.host, str(Path(ctx.model_repository).resolve()),
                                       self.preprocess_instance_count, "jpeg" in ctx.input_formats)
        info: dict[str, Any] = ray.get(self._actor.start.remote(ctx.start_timeout_s),
                                       timeout=ctx.start_timeout_s + 600)  # + an ONNX export on first use
        endpoints = info["endpoints"]
        host = endpoints["host"]
        log.info("%s: %s serving %s (%s)", ctx.name, info["server_mode"], ctx.model.name, self.accelerator)
        return ServerHandle(
            server_mode=info["server_mode"],
            urls={"http": f"{host}:{endpoints['http_port']}", "grpc": f"{host}:{endpoints['grpc_port']}",
                  "metrics": f"http://{host}:{endpoints['metrics_port']}/metrics"},
            params={"execution_provider": PROVIDER_NAMES[self.accelerator], "instance_count": self.instance_count,
                    "onnx_max_abs_diff": info["export"]["max_abs_diff"],
                    "preprocess_instances": info["preprocess_instances"], **self.batching_params()},
            startup_s=info["startup_s"],
            artifacts=info["configs"],
        )

    def batching_params(self) -> dict[str, Any]:
        """Server-side batching in the terms both servers share (see RayServeTorchBackend.batching_params)."""
        on = self.dynamic_batching
        return {"server_batching": on, "server_instances": self.instance_count,
                "server_max_batch_size": int(self.context.model.max_batch_size) if on else 0,
                "server_batch_wait_ms": self.max_queue_delay_us / 1000 if on else 0.0,
                "server_preferred_batch_sizes": ",".join(map(str, self.preferred_batch_sizes)) if on else ""}

    def stop(self) -> dict[str, str]:
        import ray

        if self._actor is None:
            return {}
        actor, self._actor = self._actor, None
        try:
            return ray.get(actor.stop.remote(self.context.stop_timeout_s), timeout=self.context.stop_timeout_s + 30)
        except Exception as exc:  # noqa: BLE001 - the actor may be dead; its server dies with it
            log.warning("%s: stopping the Triton host failed (%s); killing the actor", self.context.name, exc)
            return {}
        finally:
            ray.kill(actor)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        from serving.triton.ensemble import JPEG_INPUT, ensemble_model_name

        wire, shared_memory = parse_protocol(protocol)
        name = self.context.model.name
        spec = self._spec(CLIENTS[wire], handle.urls[wire], name, input_format, batch_size)
        if input_format == "jpeg":
            spec = replace(spec, model_name=ensemble_model_name(name), input_name=JPEG_INPUT)
        return replace(spec, shared_memory=shared_memory)

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

from serving.accelerators import gpu_extra
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
                 ort_threads: int | None = None, fp16: bool = False, engine_cache: bool = True,
                 engine_cache_dir: str | None = None, trt_opt_batch_size: int | None = None,
                 num_gpus: float = 0.5, warmup: bool = True, start_timeout_s: float | None = None,
                 dynamic_batching: bool = False, max_queue_delay_us: int = 0,
                 preferred_batch_sizes: list[int] | None = None, preprocess_instance_count: int | None = None) -> None:
        super().__init__(context)
        if accelerator not in PROVIDER_NAMES:
            raise ValueError(f"backends.{context.name}.accelerator={accelerator!r} is not allowed: choose from "
                             f"{sorted(PROVIDER_NAMES)}")
        if fp16 and accelerator != "tensorrt":
            raise ValueError(f"backends.{context.name}.fp16=true needs accelerator: tensorrt (the {accelerator} "
                             "provider runs the exported FP32 model as it is)")
        self.requested_accelerator = accelerator
        self.instance_count = instance_count
        self.ort_threads = ort_threads
        self.fp16 = fp16
        self.engine_cache = engine_cache
        self.engine_cache_dir = engine_cache_dir
        self.trt_opt_batch_size = trt_opt_batch_size
        self.num_gpus = num_gpus
        self.warmup = warmup
        # A first TensorRT engine build (no cache yet) happens before "ready" and can take minutes.
        self.start_timeout_s = start_timeout_s or context.start_timeout_s
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
        """What actually runs: the CUDA EP falls back to ONNX Runtime's CPU EP on a node without a GPU, unless the
        tier promises a GPU (then `unsupported_reason` skips the trials instead)."""
        if self.requested_accelerator == "cuda" and not self.context.node.has_gpu and not self.context.requires_gpu:
            return "cpu"
        return self.requested_accelerator

    @property
    def native(self) -> bool:
        """Whether the node's own `tritonserver` (NVIDIA's container, native ORT backend) will serve."""
        return self.context.node.native_triton and self.context.triton_server in ("auto", "native")

    def trt_profile(self) -> tuple[int, int, int]:
        """TensorRT's batch profile: 1 .. model.max_batch_size, tuned for the largest batch measured."""
        high = int(self.context.model.max_batch_size)
        opt = self.trt_opt_batch_size or max(self.context.warmup_batch_sizes or (1,))
        return 1, min(max(1, opt), high), high

    def variant_settings(self) -> dict[str, Any]:
        """What the host actor renders; the engine cache folder is resolved there, on the server's node."""
        return {"accelerator": self.accelerator, "instance_count": self.instance_count,
                "ort_threads": self.ort_threads, "fp16": self.fp16,
                "engine_cache": self.engine_cache and self.accelerator == "tensorrt",
                "engine_cache_dir": self.engine_cache_dir,
                "trt_profile": list(self.trt_profile()) if self.accelerator == "tensorrt" else None,
                "warmup_batch_sizes": list(self.context.warmup_batch_sizes) if self.warmup else [],
                "dynamic_batching": self.dynamic_batching, "max_queue_delay_us": self.max_queue_delay_us,
                "preferred_batch_sizes": list(self.preferred_batch_sizes)}

    def actor_options(self) -> dict[str, Any]:
        """Ray options for the host actor: on the tier's node, holding a GPU fraction where Ray has GPUs (Ray then
        pins the server to that GPU with CUDA_VISIBLE_DEVICES)."""
        options: dict[str, Any] = {"num_cpus": 0.01, **self.context.ray_options}
        if self.accelerator != "cpu" and self.context.node.ray_gpus > 0 and self.num_gpus > 0:
            options["num_gpus"] = self.num_gpus
        return options

    def runs_on(self) -> str:
        server = "native Triton" if self.native else "bundled Triton (Python backend)"
        return f"{server}, ONNX Runtime {PROVIDER_NAMES[self.accelerator]}"

    def server_reason(self) -> str | None:
        """Why no Triton can serve this variant on the node: none installed, or the native one lacks the backend."""
        node = self.context.node
        if self.native:
            if node.triton_backends and "onnxruntime" not in node.triton_backends:
                return (f"the tritonserver on node {node.hostname} has no onnxruntime backend (backends: "
                        f"{list(node.triton_backends)}); use NVIDIA's Triton container")
            return None
        if self.context.triton_server == "native":
            return (f"serving.triton_server=native but node {node.hostname} has no tritonserver on PATH: run NVIDIA's "
                    "Triton container there, or serving.triton_server=auto for the bundled server")
        if node.bundled_triton_problem:
            return f"no Triton on node {node.hostname}: no tritonserver on PATH, and {node.bundled_triton_problem}"
        return None

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        wire, shared_memory = parse_protocol(protocol)
        if wire not in CLIENTS:
            return f"Triton has no {protocol!r} client here (supported: {sorted(CLIENTS)})"
        reason = self.gpu_tier_reason() or self.server_reason()
        if reason:
            return reason
        if shared_memory == "cuda" and not node.has_gpu:
            return f"CUDA shared memory needs an NVIDIA GPU; node {node.hostname} has none ({node.gpu_name})"
        if self.accelerator == "tensorrt" and not node.has_gpu:
            return (f"the TensorRT execution provider needs an NVIDIA GPU; node {node.hostname} has none "
                    f"({node.gpu_name})")
        provider = PROVIDER_NAMES[self.accelerator]
        extra = f"tierbench[{gpu_extra(node.cuda_version)}]"
        if self.accelerator != "cpu" and not self.native and provider not in node.ort_usable:
            state = "lists but cannot load" if provider in node.ort_providers else "lacks"
            detail = "; ".join(p for p in node.ort_problems if p.startswith((provider, "log", "preload")))
            return (f"onnxruntime {node.ort_version} on node {node.hostname} {state} {provider} (loads "
                    f"{list(node.ort_usable)}{': ' + detail if detail else ''}): install {extra} there, or run "
                    "NVIDIA's Triton container")
        if self.accelerator == "tensorrt" and not self.native and node.trt_missing_libs:
            return (f"ONNX Runtime's TensorRT provider on node {node.hostname} cannot load "
                    f"{', '.join(node.trt_missing_libs)}: install {extra} there (TensorRT 10 for the driver's CUDA "
                    f"{node.cuda_version}), or run NVIDIA's Triton container")
        if input_format not in INPUT_FORMATS:
            return f"input format {input_format!r} not accepted (supported: {list(INPUT_FORMATS)})"
        return None

    def start(self) -> ServerHandle:
        import ray

        from serving.triton.host import TritonServerHost
        from serving.triton.repository import instances_on_gpu

        ctx = self.context
        config_text = (Path(ctx.model_repository) / ctx.model.name / "config.pbtxt").read_text()
        actor_cls = ray.remote(TritonServerHost).options(**self.actor_options())
        self._actor = actor_cls.remote(OmegaConf.to_container(ctx.model, resolve=True), config_text,
                                       self.variant_settings(), ctx.triton_server, ctx.host,
                                       str(Path(ctx.model_repository).resolve()), self.preprocess_instance_count,
                                       "jpeg" in ctx.input_formats)
        try:  # placed at all? (a node whose resources are taken leaves the actor pending, silently)
            ray.get(self._actor.where.remote(), timeout=ctx.start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"{ctx.name}: the Triton host actor is still pending after {ctx.start_timeout_s:g} s; "
                               f"it asks for {self.actor_options()}: are the node's resources taken?") from exc
        info: dict[str, Any] = ray.get(self._actor.start.remote(self.start_timeout_s),
                                       timeout=self.start_timeout_s + 600)  # + an ONNX export on first use
        endpoints = info["endpoints"]
        host = ctx.client_host
        log.info("%s: %s serving %s (%s)", ctx.name, info["server_mode"], ctx.model.name, self.accelerator)
        params, metrics = self._start_facts(info)
        return ServerHandle(
            server_mode=info["server_mode"],
            urls={"http": f"{host}:{endpoints['http_port']}", "grpc": f"{host}:{endpoints['grpc_port']}",
                  "metrics": f"http://{host}:{endpoints['metrics_port']}/metrics"},
            params=params,
            startup_s=info["startup_s"],
            metrics=metrics,
            artifacts=info["configs"],
            node_id=info.get("node_id"),
            gpu_ids=tuple(info.get("gpu_ids") or ()),
            # Every instance group of the rendered classifier is KIND_GPU (a Python-backend instance also refuses
            # to load when ONNX Runtime falls back from the GPU provider it was asked for: python_backend/model.py).
            on_gpu=instances_on_gpu(info["configs"]["config.pbtxt"]),
        )

    def _start_facts(self, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """Trial params and start-up metrics: provider, precision, and whether TensorRT built or reused engines.

        `server_ready_s` runs from the server process's start to the model answering, warm-up requests (one per
        batch size) included, so with the TensorRT EP it holds the engine build (cache miss) or load (hit).
        """
        params: dict[str, Any] = {"execution_provider": PROVIDER_NAMES[self.accelerator],
                                  "instance_count": self.instance_count,
                                  "onnx_max_abs_diff": info["export"]["max_abs_diff"],
                                  "server_node_id": info["node_id"], "server_hostname": info["hostname"],
                                  "preprocess_instances": info["preprocess_instances"], **self.batching_params(),
                                  "server_warmup_batch_sizes": ",".join(str(b) for b in
                                                                        self.variant_settings()["warmup_batch_sizes"])}
        metrics = {"server_ready_s": float(info["ready_s"])}
        if info.get("gpu_ids"):
            params["server_gpu_ids"] = ",".join(str(i) for i in info["gpu_ids"])
        if self.accelerator == "tensorrt":
            params["trt_precision"] = "fp16" if self.fp16 else "fp32"
            params["trt_profile_batch"] = "-".join(str(b) for b in self.trt_profile())
            cache = info.get("engine_cache")
            params["trt_engine_cache"] = cache["status"] if cache else "off"
            if cache:
                params["trt_engine_cache_dir"] = cache["dir"]
            if cache is None or cache["status"] == "built":
                metrics["trt_engine_build_s"] = float(info["ready_s"])
            elif cache["status"] == "hit":
                metrics["trt_engine_load_s"] = float(info["ready_s"])
        return params, metrics
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

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        import ray

        # Scraped on the server's node: the metrics port listens on the node's loopback.
        return ray.get(self._actor.counters.remote(), timeout=30)

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        from serving.triton.metrics import breakdown

        return breakdown(before, after)

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        from serving.triton.metrics import served_images

        return served_images(before, after)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        from serving.triton.ensemble import JPEG_INPUT, ensemble_model_name

        wire, shared_memory = parse_protocol(protocol)
        name = self.context.model.name
        spec = self._spec(CLIENTS[wire], handle.urls[wire], name, input_format, batch_size)
        if input_format == "jpeg":
            spec = replace(spec, model_name=ensemble_model_name(name), input_name=JPEG_INPUT)
        return replace(spec, shared_memory=shared_memory)

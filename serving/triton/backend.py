"""Triton serving the model as ONNX: ONNX Runtime with the CUDA EP (`triton_onnx`) or the TensorRT EP
(`triton_trt`), over HTTP and gRPC (optionally with shared-memory tensors), from a `TritonServerHost` actor on
the tier's node. Tensor input goes to the classifier; JPEG input to the `<model>_jpeg` ensemble, which
decodes and preprocesses on the server (`serving.triton.ensemble`)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serving.backend import Backend, BackendContext, ServerHandle, formable_batches
from serving.clients.base import ClientSpec
from serving.host_actor import host_counters, place_host, stop_host
from serving.paths import MODEL_REPOSITORY
from serving.protocols import parse_protocol
from serving.runtime import Engine, Runtime
from serving.triton.accelerators import gpu_extra
from serving.triton.clients import TritonClientSpec
from serving.triton.facts import OnnxRuntimeFacts, TritonFacts
from serving.triton.installation import BundledTriton, TritonInstallation, installation_kind
from serving.triton.repository import TritonVariant, instances_on_gpu, precision
from serving.triton.settings import Accelerator, TritonSettings
from serving.workloads.image.formats import InputFormat

log = logging.getLogger(__name__)
NO_GPU_DOCS = "docs/troubleshooting.md#skipped-no-gpu"

CLIENTS = {
    "http": "serving.triton.clients.TritonHttpClient",
    "grpc": "serving.triton.clients.TritonGrpcClient",
}


class TritonBackend(Backend):
    settings: TritonSettings

    def __init__(self, context: BackendContext, settings: TritonSettings) -> None:
        super().__init__(context, settings)
        self._actor: Any = None  # the TritonServerHost while the server runs
        # The classifier's tensor names, from the config the server rendered (an ONNX file the user brings has its
        # own; an exported model has serving.export's).
        self._tensor_names: tuple[str, str] | None = None

    @property
    def numerics(self) -> str:
        return precision(self.settings.fp16, self.settings.int8)

    @property
    def accelerator(self) -> Accelerator:
        """What actually runs: the CUDA EP falls back to ONNX Runtime's CPU EP on a node without a GPU, unless the
        tier promises a GPU (then `unsupported_reason` skips the trials instead)."""
        requested = Accelerator(self.settings.accelerator)
        if requested is Accelerator.CUDA and not self.context.node.has_gpu and not self.context.requires_gpu:
            return Accelerator.CPU
        return requested

    @property
    def server(self) -> type[TritonInstallation]:
        """Which Triton the node will run (the setting `server`, and whether the node has NVIDIA's)."""
        return installation_kind(self.settings.server, self.context.node.facts(TritonFacts).native)

    @property
    def max_request_batch(self) -> int:
        """The classifier's max_batch_size in Triton (requests and the dynamic batcher): the setting, else the
        model's."""
        return self.settings.max_batch_size or int(self.context.model.max_batch_size)

    def trt_profile(self) -> tuple[int, int, int]:
        """TensorRT's batch profile: 1 .. max_batch_size, tuned for the largest batch measured."""
        high = self.max_request_batch
        opt = self.settings.trt_opt_batch_size or max(self.context.warmup_batch_sizes or (1,))
        return 1, min(max(1, opt), high), high

    def variant(self) -> TritonVariant:
        """What the host actor renders; the engine cache folder is resolved there, on the server's node."""
        s, tensorrt = self.settings, self.accelerator is Accelerator.TENSORRT
        return TritonVariant(
            accelerator=str(self.accelerator), instance_count=s.instance_count, ort_threads=s.ort_threads, fp16=s.fp16,
            engine_cache=s.engine_cache and tensorrt, engine_cache_root=s.engine_cache_dir,
            trt_profile=self.trt_profile() if tensorrt else None,
            warmup_batch_sizes=self.warmup_batch_sizes() if s.warmup else (),
            dynamic_batching=s.dynamic_batching, max_queue_delay_us=s.max_queue_delay_us,
            preferred_batch_sizes=tuple(s.preferred_batch_sizes), max_batch_size=self.max_request_batch,
            max_queue_size=s.max_queue_size, queue_timeout_us=s.queue_timeout_us,
            cuda_options=tuple(sorted((str(k), str(v)) for k, v in s.cuda_options.items())),
            python_shm_mib=s.python_shm_mib, batch_buckets=self.batch_buckets(),
            int8=s.int8, calibration=self.context.inputs if s.int8 else None,
            calibration_images=s.int8_calibration_images)

    def batch_buckets(self) -> tuple[int, ...]:
        """The Python backend's sessions by batch size (the setting; automatic: powers of two up to the largest batch
        where the CUDA EP meets the dynamic batcher's changing batch sizes, none elsewhere: the CPU EP does not pay
        for a change of shape, and requests of one size never change it). The largest batch is always one."""
        s, high = self.settings, self.max_request_batch
        if s.batch_buckets is not None:
            chosen = set(s.batch_buckets)
        elif s.dynamic_batching and self.accelerator is Accelerator.CUDA and self.server is BundledTriton:
            chosen = {1 << i for i in range(high.bit_length()) if 1 << i <= high}
        else:
            return ()
        return tuple(sorted(chosen | {high})) if chosen else ()

    def warmup_batch_sizes(self) -> tuple[int, ...]:
        """The experiment's batch sizes; on a GPU with the dynamic batcher, every batch it can form from them (each
        new shape's first pass costs ONNX Runtime a cuDNN algorithm search, which must not land in a window)."""
        sizes = tuple(self.context.warmup_batch_sizes)
        if self.settings.dynamic_batching and self.accelerator.gpu:
            return formable_batches(sizes, self.max_request_batch)
        return sizes

    def actor_options(self) -> dict[str, Any]:
        """Ray options for the host actor: on the tier's node, holding a GPU fraction where Ray has GPUs (Ray then
        pins the server to that GPU with CUDA_VISIBLE_DEVICES)."""
        options: dict[str, Any] = {"num_cpus": 0.01, **self.context.ray_options}
        if self.accelerator.gpu and self.context.node.ray_gpus > 0 and self.settings.num_gpus > 0:
            options["num_gpus"] = self.settings.num_gpus
        return options

    def runtime(self) -> Runtime:
        """ONNX Runtime with this variant's provider, as the Python backend runs it (NVIDIA's native ONNX Runtime
        backend, where the node has it, is the closest in-process equivalent)."""
        accelerator = self.accelerator
        return Runtime(Engine.ONNXRUNTIME, "cuda" if accelerator.gpu else "cpu", self.numerics,
                       provider=accelerator.provider, threads=self.settings.ort_threads)

    def runs_on(self) -> str:
        return f"{self.server.label}, ONNX Runtime {self.accelerator.provider}"

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node, ort = self.context.node, self.context.node.facts(OnnxRuntimeFacts)
        wire, shared_memory = parse_protocol(protocol)
        if wire not in CLIENTS:
            return f"Triton has no {protocol!r} client here (supported: {sorted(CLIENTS)})"
        if input_format == InputFormat.JPEG_BASE64:
            return ("jpeg_base64 is a JSON API's format: Triton's APIs take tensors (its JPEG path, `jpeg`, takes the "
                    "files as a BYTES tensor, binary)")
        reason = self.gpu_tier_reason() or self.server.unavailable_reason(node.facts(TritonFacts), node.hostname,
                                                                          self.settings.server)
        if reason:
            return reason
        if shared_memory == "cuda" and not node.has_gpu:
            return (f"CUDA shared memory needs an NVIDIA GPU; node {node.hostname} has none ({node.gpu_name}) "
                    f"({NO_GPU_DOCS})")
        if self.accelerator is Accelerator.TENSORRT and not node.has_gpu:
            return (f"the TensorRT execution provider needs an NVIDIA GPU; node {node.hostname} has none "
                    f"({node.gpu_name}) ({NO_GPU_DOCS})")
        provider = self.accelerator.provider
        extra = f"tierbench[{gpu_extra(node.cuda_version)}]"
        if self.accelerator.gpu and self.server.uses_node_onnxruntime and provider not in ort.usable:
            state = "lists but cannot load" if provider in ort.providers else "lacks"
            detail = "; ".join(p for p in ort.problems if p.startswith((provider, "log", "preload")))
            return (f"onnxruntime {ort.version} on node {node.hostname} {state} {provider} (loads "
                    f"{list(ort.usable)}{': ' + detail if detail else ''}): install {extra} there, or run "
                    "NVIDIA's Triton container")
        if self.accelerator is Accelerator.TENSORRT and self.server.uses_node_onnxruntime and ort.trt_missing_libs:
            return (f"ONNX Runtime's TensorRT provider on node {node.hostname} cannot load "
                    f"{', '.join(ort.trt_missing_libs)}: install {extra} there (TensorRT 10 for the driver's CUDA "
                    f"{node.cuda_version}), or run NVIDIA's Triton container")
        if input_format not in (InputFormat.TENSOR, InputFormat.JPEG):
            return f"input format {input_format!r} not accepted (supported: tensor, jpeg)"
        return None

    def start(self) -> ServerHandle:
        import ray

        from serving.triton.host import TritonServerHost

        ctx = self.context
        args = (ctx.model, self.variant(), self.settings.server, ctx.host,
                str(MODEL_REPOSITORY.resolve()), self.settings.preprocess_instance_count,
                InputFormat.JPEG in ctx.input_formats)
        self._actor = place_host(TritonServerHost, self.actor_options(), args, ctx, "Triton")
        info: dict[str, Any] = ray.get(self._actor.start.remote(self.start_timeout_s),
                                       timeout=self.start_timeout_s + 600)  # + an ONNX export on first use
        return self._handle(info)

    def adopt(self, running: Backend) -> ServerHandle | None:
        """A running Triton whose settings differ from these only in the classifier's config (instances, batching,
        threads): its host reloads that one model with this config; the process and the JPEG ensemble stay."""
        import ray

        if not isinstance(running, TritonBackend) or running._actor is None \
                or not self.settings.reloadable_from(running.settings) \
                or (running.context.model, running.context.input_formats) != (self.context.model,
                                                                             self.context.input_formats):
            return None
        self._actor, running._actor = running._actor, None
        info = ray.get(self._actor.reload.remote(self.variant(), self.start_timeout_s),
                       timeout=self.start_timeout_s + 30)
        return self._handle(info)

    def _handle(self, info: dict[str, Any]) -> ServerHandle:
        """The running server as the sweep sees it, from what its host returned (a start or a reload)."""
        ctx = self.context
        endpoints = info["endpoints"]
        classifier = text_format.Parse(info["configs"]["config.pbtxt"], mc.ModelConfig())
        self._tensor_names = (classifier.input[0].name, classifier.output[0].name)
        host = ctx.client_host
        log.info("%s: %s %s %s (%s)", ctx.name, info["server_mode"], "reloaded" if info["reloaded"] else "serving",
                 ctx.model.name, self.accelerator)
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
            processes=(info["pid"],) if info.get("pid") else (),
        )

    def _start_facts(self, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """Trial params and start-up metrics: provider, precision, and whether TensorRT built or reused engines.

        `server_ready_s` runs from the server process's start to the model answering, warm-up requests (one per
        batch size) included, so with the TensorRT EP it holds the engine build (cache miss) or load (hit); after
        a reload (trial param `server_start: reload`), from the load request to the new instances answering.
        """
        params: dict[str, Any] = {"execution_provider": self.accelerator.provider,
                                  "instance_count": self.settings.instance_count,
                                  "onnx_max_abs_diff": info["export"]["max_abs_diff"],
                                  "server_node_id": info["node_id"], "server_hostname": info["hostname"],
                                  "preprocess_instances": info["preprocess_instances"], **self.batching_params(),
                                  "server_warmup_batch_sizes": ",".join(str(b) for b in
                                                                        self.variant().warmup_batch_sizes),
                                  # the Python backend's sessions per batch bucket ("": one session for every shape)
                                  "ort_batch_buckets": ",".join(str(b) for b in self.batch_buckets())}
        metrics = {"server_ready_s": float(info["ready_s"])}
        if self.settings.int8:
            params["onnx_quantization"] = "int8_qdq" + ("_symmetric" if self.accelerator is Accelerator.TENSORRT
                                                        else "")
            params["int8_calibration_images"] = self.settings.int8_calibration_images
        elif self.settings.fp16 and self.accelerator is not Accelerator.TENSORRT:
            params["onnx_conversion"] = "fp16"  # the file served; TensorRT's FP16 is trt_precision
        if info.get("model_file"):
            params["server_model_file"] = info["model_file"]
        if info.get("gpu_ids"):
            params["server_gpu_ids"] = ",".join(str(i) for i in info["gpu_ids"])
        if self.accelerator is Accelerator.TENSORRT:
            params["trt_precision"] = self.numerics
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
        s, on = self.settings, self.settings.dynamic_batching
        return {"server_batching": on, "server_instances": s.instance_count,
                "server_max_batch_size": self.max_request_batch if on else 0,
                "server_batch_wait_ms": s.max_queue_delay_us / 1000 if on else 0.0,
                "server_preferred_batch_sizes": ",".join(map(str, s.preferred_batch_sizes)) if on else "",
                "server_max_queue_size": s.max_queue_size if on else 0}  # requests queued; 0: no limit

    def stop(self) -> dict[str, str]:
        actor, self._actor = self._actor, None
        return stop_host(actor, self.context, "Triton")

    def abort_cause(self, server_logs: dict[str, str]) -> str | None:
        from serving.triton.server import abort_cause

        return abort_cause(server_logs.get("tritonserver.log", ""))

    def broke_under(self, first_errors: str) -> bool:
        # The Python backend answers 500 "Stub process '<instance>' is not healthy" while a stub process misses its
        # fixed 1 s health check (a starved CPU), then restarts that stub: a part of the server broke.
        return "Stub process" in first_errors and "is not healthy" in first_errors

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        return host_counters(self._actor)

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        from serving.oip.triton_metrics import breakdown
        from serving.triton import backend_counters

        out = breakdown(before, after)
        return {**out, **backend_counters.breakdown(before, after, out["server_compute_infer_ms"])} if out else out

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        from serving.oip.triton_metrics import served_images

        return served_images(before, after)

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """The classifier's model folder as the server that measured it loaded it: `<model>/config.pbtxt` (NVIDIA's
        container: the native ONNX Runtime backend; the bundled server: the Python backend, with its `model.py`). The
        ONNX file is not among them: it goes at `<model>/1/model.onnx` (native) or where the `onnx_path` parameter
        says (Python)."""
        from serving.triton.repository import PYTHON_MODEL_FILE

        config = rendered.get("config.pbtxt")
        if config is None:
            return {}
        name = self.context.model.name
        files = {f"{name}/config.pbtxt": config}
        if text_format.Parse(config, mc.ModelConfig()).backend == "python":
            files[f"{name}/1/model.py"] = PYTHON_MODEL_FILE.read_text()
        return files

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        from serving.triton.ensemble import JPEG_INPUT, ensemble_model_name

        wire, shared_memory = parse_protocol(protocol)
        name = self.context.model.name
        spec = self._spec(CLIENTS[wire], handle.urls[wire], name, input_format, batch_size, TritonClientSpec)
        if self._tensor_names is not None:
            spec = replace(spec, input_name=self._tensor_names[0], output_name=self._tensor_names[1])
        if input_format == InputFormat.JPEG:
            spec = replace(spec, model_name=ensemble_model_name(name), input_name=JPEG_INPUT)
        return replace(spec, shared_memory=shared_memory)

"""Settings of `serving.triton.backend.TritonBackend` (entries `triton_*` of conf/backends/), and the execution
accelerators ONNX Runtime runs the model with."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from serving.settings import OneGpuServerSettings, is_positive_int
from serving.tritonserver.installation import TRITON_SERVER_CHOICES, TritonServerKind

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches


class Accelerator(StrEnum):
    """ONNX Runtime's execution provider for the classifier, and the providers it falls back on."""

    CPU = "cpu"
    CUDA = "cuda"
    TENSORRT = "tensorrt"

    @property
    def provider(self) -> str:
        return {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                "tensorrt": "TensorrtExecutionProvider"}[self]

    @property
    def providers(self) -> list[str]:
        """The provider chain ONNX Runtime is given: this one first, then those it falls back on."""
        chain = {"cpu": ("cpu",), "cuda": ("cuda", "cpu"), "tensorrt": ("tensorrt", "cuda", "cpu")}[self]
        return [Accelerator(a).provider for a in chain]

    @property
    def gpu(self) -> bool:
        return self is not Accelerator.CPU


@dataclass
class TritonSettings(OneGpuServerSettings):
    """Triton serving the ONNX export through ONNX Runtime: `cuda` (CUDA EP; the CPU EP where a node has no GPU)
    or `tensorrt` (TensorRT EP, a GPU only)."""

    _target_: str = "serving.triton.backend.TritonBackend"
    # Which Triton: auto (the node's own `tritonserver` on PATH, NVIDIA's container, where it has one, else the one
    # bundled in nvidia-pytriton) | native | bundled
    server: str = "auto"
    accelerator: str = "cuda"  # cpu | cuda | tensorrt
    instance_count: int = 1  # model instances (Triton's instance_group count)
    ort_threads: int | None = None  # intra-op threads for ONNX Runtime; null: its default
    # FP16: TensorRT's FP16 kernels (tensorrt), or the export converted to FP16 for ONNX Runtime's CUDA or CPU
    # provider (inputs and outputs kept FP32; serving.triton.quantize). On a CPU it is slower than FP32: ONNX Runtime
    # runs what it has no FP16 kernel for in FP32 between casts
    fp16: bool = False
    # INT8: the export quantised statically (QDQ), calibrated on the sweep's input corpus (serving.triton.quantize),
    # run by ONNX Runtime's integer kernels, or by TensorRT as explicit INT8 (tensorrt: symmetric activations).
    # Every lower precision is held to experiment.accuracy.max_top1_drop against the FP32 reference
    int8: bool = False
    int8_calibration_images: int = 64  # corpus images INT8's activation ranges are calibrated on (int8 only)
    engine_cache: bool = True  # keep built TensorRT engines: a restart loads them instead of rebuilding
    engine_cache_dir: str | None = None  # null: ~/.cache/tierbench/trt on the server's node (then <model>/<gpu>/<key>/)
    trt_opt_batch_size: int | None = None  # TensorRT profile: batch 1..model.max_batch_size tuned for this;
    #                                        null: the largest batch measured
    warmup: bool = True  # Triton model_warmup: one request per experiment batch size before "ready"
    dynamic_batching: bool = False  # Triton's dynamic batcher, up to max_batch_size images
    max_batch_size: int | None = None  # config.pbtxt's max_batch_size: the largest batch the batcher forms (and a
    #                                    request may send); null: model.max_batch_size
    max_queue_delay_us: int = 0  # how long the batcher waits for a batch to fill
    # Load shedding (the batcher's default queue policy): requests beyond max_queue_size queued are rejected at once
    # (HTTP 503 / gRPC UNAVAILABLE), and a request queued longer than queue_timeout_us is rejected; 0: no limit.
    # A max_queue_size the queue reaches can stall the batcher for 500 ms while it refuses every arrival: shed with
    # queue_timeout_us (docs/traffic.md)
    max_queue_size: int = 0
    queue_timeout_us: int = 0
    preferred_batch_sizes: list[int] = field(default_factory=list)  # e.g. [8, 16]: sizes the batcher aims for
    # One ONNX Runtime session per batch size here (the bundled server's Python backend): a merged batch is padded up
    # to the next and run by that size's own session. On CUDA a session whose input shape differs from its last call
    # pays 40-240 ms (measured on an H100, docs/gpu.md), so a batcher handing one session 8, then 11, then 16 images
    # collapses; a session per size never changes shape. null: on the CUDA EP with the dynamic batcher, powers of two
    # up to max_batch_size, else none; []: one session for every shape
    batch_buckets: list[int] | None = None
    # ONNX Runtime's CUDA EP options for the Python backend's sessions (e.g. cudnn_conv_algo_search: HEURISTIC: a new
    # batch shape's first call took 40 ms instead of 110-890 ms on an H100, a shorter start); {}: its defaults
    cuda_options: dict[str, str] = field(default_factory=dict)
    # The Python backend's shared memory with the server, MiB: the first region and each growth step (every request's
    # tensors pass through it); null: the backend's defaults
    python_shm_mib: int | None = None
    preprocess_instance_count: int | None = None  # JPEG decoding (the ensemble's Python model): null = one per
    #                                               core, up to 8

    server_mode_hint: ClassVar[str] = "triton"
    searchable: ClassVar[tuple[str, ...]] = ("instance_count", "dynamic_batching", "max_queue_delay_us",
                                             "preferred_batch_sizes", "max_batch_size", "ort_threads",
                                             "preprocess_instance_count", "max_queue_size", "queue_timeout_us")
    switched_by: ClassVar[dict[str, str]] = {"max_queue_delay_us": "dynamic_batching",
                                             "preferred_batch_sizes": "dynamic_batching",
                                             "max_batch_size": "dynamic_batching",
                                             "max_queue_size": "dynamic_batching",
                                             "queue_timeout_us": "dynamic_batching"}
    # The classifier's own config.pbtxt: the running server reloads that one model (explicit model control).
    # Not max_batch_size: the JPEG ensemble's, set at start, may not exceed the classifier's.
    reloadable: ClassVar[tuple[str, ...]] = ("instance_count", "dynamic_batching", "max_queue_delay_us",
                                             "preferred_batch_sizes", "ort_threads", "max_queue_size",
                                             "queue_timeout_us", "cuda_options", "batch_buckets")

    @property
    def family(self) -> str:
        return "triton_trt" if self.accelerator == Accelerator.TENSORRT else "triton_onnx"

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if self.server not in TRITON_SERVER_CHOICES:
            problems.append(self.refuse(name, "server", f"choose from {list(map(str, TRITON_SERVER_CHOICES))} (auto: "
                                                        "the node's own tritonserver where it has one, else the one "
                                                        "bundled in nvidia-pytriton)"))
        if self.accelerator not in list(Accelerator):
            return [*problems, self.refuse(name, "accelerator", f"choose from {[str(a) for a in Accelerator]}")]
        tensorrt = self.accelerator == Accelerator.TENSORRT
        if not is_positive_int(self.int8_calibration_images):
            problems.append(self.refuse(name, "int8_calibration_images", "a positive number of corpus images (e.g. "
                                                                         "64)"))
        if self.int8 and self.fp16:
            problems.append(self.refuse(name, "int8", "INT8 and FP16 are two precisions: set one of int8 and fp16"))
        for key, null in (("instance_count", ""), ("ort_threads", "ONNX Runtime's default"),
                          ("preprocess_instance_count", "one per core"), ("python_shm_mib", "the backend's defaults")):
            value = getattr(self, key)
            if not (is_positive_int(value) or (value is None and null)):
                problems.append(self.refuse(name, key, "a positive integer" + (f", or null ({null})" if null else "")))
        bound = self.refuse_max_batch_size(name, model, "(the largest batch the export serves), or null (that one)")
        problems += bound
        limit, limit_key = ((self.max_batch_size, "max_batch_size") if self.max_batch_size is not None and not bound
                            else (int(model.max_batch_size), "model.max_batch_size"))
        if self.trt_opt_batch_size is not None:
            if not tensorrt:
                problems.append(self.refuse(name, "trt_opt_batch_size", "it only applies with accelerator: tensorrt"))
            elif not 1 <= self.trt_opt_batch_size <= limit:
                problems.append(self.refuse(name, "trt_opt_batch_size", f"in 1..{limit_key}={limit}, or null "
                                                                        "(the largest batch measured)"))
        if self.engine_cache_dir is not None and not tensorrt:
            problems.append(self.refuse(name, "engine_cache_dir", "it only applies with accelerator: tensorrt"))
        if self.cuda_options and self.accelerator == Accelerator.CPU:
            problems.append(self.refuse(name, "cuda_options", "they apply to ONNX Runtime's CUDA EP: accelerator cuda "
                                                              "or tensorrt (or {})"))
        if self.batch_buckets and any(not 0 < size <= limit for size in self.batch_buckets):
            problems.append(self.refuse(name, "batch_buckets", f"each must be in 1..{limit_key}={limit} (the "
                                                               "largest is added when missing), or [] (none), or "
                                                               "null (automatic)"))
        if self.batch_buckets and self.server == TritonServerKind.NATIVE:
            problems.append(self.refuse(name, "batch_buckets", "they are sessions of the bundled server's Python "
                                                               "backend (server: bundled, or [] / null)"))
        if self.cuda_options and self.server == TritonServerKind.NATIVE:
            problems.append(self.refuse(name, "cuda_options", "they reach the bundled server's Python backend; "
                                                              "NVIDIA's native ONNX Runtime backend takes its own "
                                                              "model parameters (server: bundled, or {})"))
        for key, unit in (("max_queue_delay_us", "microseconds"), ("max_queue_size", "requests queued; 0: no limit"),
                          ("queue_timeout_us", "microseconds a request may wait queued; 0: no limit")):
            if not (isinstance(getattr(self, key), int) and getattr(self, key) >= 0):
                problems.append(self.refuse(name, key, f"an integer >= 0 ({unit})"))
        if any(not 0 < size <= limit for size in self.preferred_batch_sizes):
            problems.append(self.refuse(name, "preferred_batch_sizes", f"each must be in 1..{limit_key}="
                                                                       f"{limit}"))
        return problems + self.refuse_switched_off(name)

    def refuse_batch_sizes(self, name: str, batch_sizes: list[int]) -> list[str]:
        """Triton rejects a request larger than its max_batch_size: a smaller one than the experiment sends is
        refused here, not found failing every trial."""
        largest = max(batch_sizes, default=0)
        if self.max_batch_size is not None and largest > self.max_batch_size:
            return [self.refuse(name, "max_batch_size", f"at least {largest}, the largest of experiment.batch_sizes "
                                                        "(Triton refuses a request above it), or null")]
        return []

"""Render the Triton model repository a server start needs, from the classifier's ONNX file.

The canonical config (`classifier_config`, as checked in at `model_repository/<model>/config.pbtxt` for the
built-in models) is for NVIDIA's container (native ONNX Runtime backend, `platform: "onnxruntime_onnx"`). A server
start renders a copy for its variant: the execution
accelerator (CPU, CUDA EP, TensorRT EP), instance count, warm-up, with or without Triton's dynamic batcher; how
the classifier is served is the installation's (`serving.triton.installation`): the native backend, or, in the
server bundled in nvidia-pytriton, the same ONNX file behind the Python backend running ONNX Runtime. Configs
are edited as protobuf (`text_format`), never as string templates.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serving.triton.settings import Accelerator
from serving.workloads.image.corpus import InputSource

if TYPE_CHECKING:
    from serving.model_config import ModelConfig

PYTHON_MODEL_FILE = Path(__file__).parent / "python_backend" / "model.py"


@dataclass(frozen=True)
class TritonVariant:
    """How one server start serves the model."""

    accelerator: str  # Accelerator: cpu | cuda | tensorrt
    instance_count: int = 1
    ort_threads: int | None = None
    fp16: bool = False  # TensorRT's FP16 kernels; on ONNX Runtime's CUDA or CPU provider, the export converted to FP16
    # Keep TensorRT engine and timing caches (TensorRT only): off, every server start rebuilds the engine.
    engine_cache: bool = False
    engine_cache_root: str | None = None  # where caches live; None: ~/.cache/tierbench/trt on the server's node
    # The folder of this variant's caches (per model, GPU and engine key: serving.triton.accelerators), resolved on
    # the server's node from the root (`TritonServerHost`); None: no cache.
    engine_cache_dir: str | None = None
    # Batch sizes (min, opt, max) of TensorRT's optimisation profile: one engine serves every batch size, and
    # it is built when the session is created rather than when an unseen batch size first arrives.
    trt_profile: tuple[int, int, int] | None = None
    trt_workspace_bytes: int = 1 << 30
    # Triton runs one zero-filled request per batch size before it reports the model ready, so engine builds,
    # cuDNN algorithm searches and lazy allocations happen before any measurement.
    warmup_batch_sizes: tuple[int, ...] = ()
    # Triton's dynamic batcher: merges queued requests into one model execution (off: one request, one run).
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    # The batcher's queue policy: reject beyond this many queued (0: no limit), and after this long queued (0: never)
    max_queue_size: int = 0
    queue_timeout_us: int = 0
    # The largest batch served (config.pbtxt max_batch_size); None: the canonical config's (the model's).
    max_batch_size: int | None = None
    # One ONNX Runtime session per batch size (the Python backend only; a batch runs padded up to the next): (): one
    # session for every shape.
    batch_buckets: tuple[int, ...] = ()
    # ONNX Runtime's CUDA EP options, (name, value) pairs (the Python backend only); (): its defaults.
    cuda_options: tuple[tuple[str, str], ...] = ()
    # The Python backend's shared memory with the server (first region and growth step), MiB; None: its defaults.
    python_shm_mib: int | None = None
    # INT8: the export quantised (serving.triton.quantize) on the server's node, calibrated on this corpus; for
    # TensorRT with symmetric activations, read as explicit INT8.
    int8: bool = False
    calibration: InputSource | None = None
    calibration_images: int = 64

    @property
    def precision(self) -> str:
        return precision(self.fp16, self.int8)


def precision(fp16: bool, int8: bool) -> str:
    """What the model computes in: int8 (the QDQ file), fp16 (TensorRT's FP16 kernels, or the converted file on ONNX
    Runtime's own providers) or fp32."""
    return "int8" if int8 else "fp16" if fp16 else "fp32"


class ClassifierServer(Protocol):
    """What rendering asks of the server it renders for (a `serving.triton.installation.TritonInstallation`)."""

    def serve_classifier(self, config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path,
                         version_dir: Path) -> None: ...


def classifier_config(name: str, onnx_path: Path, max_batch_size: int, input_shape: list[int],
                      output_shape: list[int]) -> mc.ModelConfig:
    """The canonical `config.pbtxt` of a classifier ONNX file for Triton's onnxruntime backend: tensor names from the
    file (an ONNX file the user brings keeps its own), dims from the model config (the output's per image:
    `serving.models.output_dims`), checked against the file before
    the sweep started (experiments.config.model_check). `model_repository/<model>/config.pbtxt` holds it for the
    built-in models, for NVIDIA's container as is."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    (image,) = [i for i in graph.input if i.name not in initializers]
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=int(max_batch_size))
    config.input.add(name=image.name, data_type=mc.TYPE_FP32, dims=[int(d) for d in input_shape])
    config.output.add(name=graph.output[0].name, data_type=mc.TYPE_FP32, dims=[int(d) for d in output_shape])
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_AUTO)
    return config


def export_config(model: ModelConfig, onnx_path: Path, repository: Path) -> list[Path]:
    """`<repository>/<model>/config.pbtxt` beside the model's ONNX export (`runners.export`), unless one is there, so
    the folder is what NVIDIA's container serves as is; the paths written."""
    from serving.models import output_dims

    path = repository / model.name / "config.pbtxt"
    if path.exists():
        return []
    write_config(classifier_config(model.name, onnx_path, model.max_batch_size, list(model.input_shape),
                                   list(output_dims(model))), path)
    return [path]


def read_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def write_config(config: mc.ModelConfig, path: Path) -> None:
    path.write_text(text_format.MessageToString(config))


def instances_on_gpu(config_text: str) -> bool:
    """Whether every instance group of a rendered `config.pbtxt` runs on a GPU (KIND_GPU)."""
    groups = text_format.Parse(config_text, mc.ModelConfig()).instance_group
    return bool(groups) and all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in groups)


def _instance_kind(variant: TritonVariant) -> int:
    return mc.ModelInstanceGroup.KIND_GPU if Accelerator(variant.accelerator).gpu else mc.ModelInstanceGroup.KIND_CPU


def _profile_shapes(config: mc.ModelConfig, profile: tuple[int, int, int]) -> dict[str, str]:
    """`input:1x3x224x224`-style shapes for TensorRT's profile options (same keys in Triton and ORT)."""
    tensor = config.input[0]
    dims = "x".join(str(d) for d in tensor.dims)
    return {f"trt_profile_{which}_shapes": f"{tensor.name}:{batch}x{dims}"
            for which, batch in zip(("min", "opt", "max"), profile, strict=True)}


def _tensorrt_options(config: mc.ModelConfig, variant: TritonVariant) -> dict[str, str]:
    """TensorRT settings under the keys ORT's TensorRT provider and Triton's onnxruntime backend share."""
    options: dict[str, str] = {}
    if variant.engine_cache_dir:
        options.update(trt_engine_cache_enable="1", trt_engine_cache_path=variant.engine_cache_dir,
                       trt_timing_cache_enable="1", trt_timing_cache_path=variant.engine_cache_dir)
    if variant.trt_profile:
        options.update(_profile_shapes(config, variant.trt_profile))
    return options


def _batching(config: mc.ModelConfig, variant: TritonVariant) -> None:
    if not variant.dynamic_batching:
        return
    config.dynamic_batching.max_queue_delay_microseconds = int(variant.max_queue_delay_us)
    config.dynamic_batching.preferred_batch_size.extend(int(n) for n in variant.preferred_batch_sizes)
    if variant.max_queue_size or variant.queue_timeout_us:  # shed load: rejected requests are answered at once
        policy = config.dynamic_batching.default_queue_policy
        policy.max_queue_size = int(variant.max_queue_size)
        policy.default_timeout_microseconds = int(variant.queue_timeout_us)
        policy.timeout_action = mc.ModelQueuePolicy.REJECT


def native_onnxruntime(config: mc.ModelConfig, variant: TritonVariant) -> None:
    """The classifier on Triton's native onnxruntime backend (NVIDIA's container)."""
    if variant.batch_buckets:
        raise ValueError("batch_buckets are sessions of the bundled server's Python backend; NVIDIA's native ONNX "
                         "Runtime backend keeps one: set the variant's server: bundled, or batch_buckets: []")
    if variant.cuda_options:
        raise ValueError("cuda_options reach the bundled server's Python backend only; NVIDIA's native ONNX Runtime "
                         "backend takes its own model parameters: set the variant's server: bundled, or "
                         "cuda_options: {}")
    config.instance_group.add(count=variant.instance_count, kind=_instance_kind(variant))
    if variant.ort_threads:
        config.parameters["intra_op_thread_count"].string_value = str(variant.ort_threads)
    if variant.accelerator == Accelerator.TENSORRT:
        # KIND_GPU alone gives the CUDA EP; the TensorRT EP is an execution accelerator (onnxruntime_backend).
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
        # INT8 from the QDQ file's own scales (explicit quantization): no calibration table
        accelerator.parameters["precision_mode"] = variant.precision.upper()
        accelerator.parameters["max_workspace_size_bytes"] = str(variant.trt_workspace_bytes)
        for key, value in _tensorrt_options(config, variant).items():
            accelerator.parameters[key] = value


def ort_provider_options(config: mc.ModelConfig, variant: TritonVariant) -> dict[str, dict[str, object]]:
    """Options per ONNX Runtime provider for the Python backend (the model adds each instance's device_id)."""
    cuda = {"CUDAExecutionProvider": dict(variant.cuda_options)} if variant.cuda_options else {}
    if variant.accelerator != Accelerator.TENSORRT:
        return cuda
    trt: dict[str, object] = {"trt_fp16_enable": variant.fp16, "trt_int8_enable": variant.int8,
                              "trt_max_workspace_size": variant.trt_workspace_bytes}
    trt.update(_tensorrt_options(config, variant))
    for key in ("trt_engine_cache_enable", "trt_timing_cache_enable"):
        if key in trt:
            trt[key] = True
    return {**cuda, "TensorrtExecutionProvider": trt}


def python_backend_onnxruntime(config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path) -> None:
    """The classifier on the Python backend running ONNX Runtime (`PYTHON_MODEL_FILE`; the bundled server)."""
    config.ClearField("platform")
    config.backend = "python"
    config.instance_group.add(count=variant.instance_count, kind=_instance_kind(variant))
    config.parameters["onnx_path"].string_value = str(onnx_path.resolve())
    config.parameters["ort_providers"].string_value = json.dumps(Accelerator(variant.accelerator).providers)
    config.parameters["ort_provider_options"].string_value = json.dumps(ort_provider_options(config, variant))
    config.parameters["ort_threads"].string_value = str(variant.ort_threads or 0)
    config.parameters["batch_buckets"].string_value = json.dumps(list(variant.batch_buckets))


def _warmup(config: mc.ModelConfig, batch_sizes: tuple[int, ...]) -> None:
    """One zero-filled warm-up request per batch size (Triton's `model_warmup`, run before the model is ready)."""
    config.ClearField("model_warmup")
    limit = config.max_batch_size or 1
    for batch in sorted({b for b in batch_sizes if 0 < b <= limit}):
        sample = config.model_warmup.add(name=f"batch{batch}", batch_size=batch)
        for tensor in config.input:
            value = sample.inputs[tensor.name]
            value.data_type = tensor.data_type
            value.dims.extend(tensor.dims)
            value.zero_data = True


def fresh_version_dir(dest: Path, model_name: str) -> Path:
    """An empty `<dest>/<model>/1/`: whatever an earlier render left of that model is removed."""
    if (dest / model_name).exists():
        shutil.rmtree(dest / model_name)
    version_dir = dest / model_name / "1"
    version_dir.mkdir(parents=True)
    return version_dir


def render_repository(canonical: mc.ModelConfig, onnx_path: Path, dest: Path, variant: TritonVariant,
                      server: ClassifierServer) -> Path:
    """Write `<dest>/<model>/` for `variant`, served the way `server` runs it, from the canonical config
    (`classifier_config`); returns `dest`."""
    config = mc.ModelConfig()
    config.CopyFrom(canonical)
    model_name = config.name
    config.ClearField("instance_group")
    if variant.max_batch_size:
        config.max_batch_size = int(variant.max_batch_size)
    _batching(config, variant)
    version_dir = fresh_version_dir(dest, model_name)
    _warmup(config, variant.warmup_batch_sizes)
    server.serve_classifier(config, variant, onnx_path, version_dir)
    write_config(config, dest / model_name / "config.pbtxt")
    return dest

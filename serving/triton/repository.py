"""Render the Triton model repository a server start needs, from the checked-in `model_repository/`.

`model_repository/<model>/config.pbtxt` is the canonical config for NVIDIA's container (native ONNX Runtime
backend, `platform: "onnxruntime_onnx"`). A server start renders a copy for its variant: the execution
accelerator (CPU, CUDA EP, TensorRT EP) and instance count, or, for the server bundled in nvidia-pytriton,
the same ONNX file behind the Python backend running ONNX Runtime; either way with or without Triton's
dynamic batcher. Configs are edited as protobuf (`text_format`), never as string templates.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

PYTHON_MODEL_FILE = Path(__file__).parent / "python_backend" / "model.py"
ORT_PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}


@dataclass(frozen=True)
class TritonVariant:
    """How one server start serves the model."""

    server_kind: str  # "native" (tritonserver on PATH) | "bundled" (nvidia-pytriton's, Python backend)
    accelerator: str  # "cpu" | "cuda" | "tensorrt"
    instance_count: int = 1
    ort_threads: int | None = None
    fp16: bool = False
    engine_cache_dir: str | None = None
    # Triton's dynamic batcher: merges queued requests into one model execution (off: one request, one run).
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()


def read_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def write_config(config: mc.ModelConfig, path: Path) -> None:
    path.write_text(text_format.MessageToString(config))


def _batching(config: mc.ModelConfig, variant: TritonVariant) -> None:
    if not variant.dynamic_batching:
        return
    config.dynamic_batching.max_queue_delay_microseconds = int(variant.max_queue_delay_us)
    config.dynamic_batching.preferred_batch_size.extend(int(n) for n in variant.preferred_batch_sizes)


def _native(config: mc.ModelConfig, variant: TritonVariant) -> None:
    kind = mc.ModelInstanceGroup.KIND_CPU if variant.accelerator == "cpu" else mc.ModelInstanceGroup.KIND_GPU
    config.instance_group.add(count=variant.instance_count, kind=kind)
    if variant.ort_threads:
        config.parameters["intra_op_thread_count"].string_value = str(variant.ort_threads)
    if variant.accelerator == "tensorrt":
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
        accelerator.parameters["precision_mode"] = "FP16" if variant.fp16 else "FP32"
        accelerator.parameters["max_workspace_size_bytes"] = str(1 << 30)
        if variant.engine_cache_dir:
            accelerator.parameters["trt_engine_cache_enable"] = "1"
            accelerator.parameters["trt_engine_cache_path"] = variant.engine_cache_dir


def _python_backend(config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path) -> None:
    config.ClearField("platform")
    config.backend = "python"
    kind = mc.ModelInstanceGroup.KIND_CPU if variant.accelerator == "cpu" else mc.ModelInstanceGroup.KIND_GPU
    config.instance_group.add(count=variant.instance_count, kind=kind)
    config.parameters["onnx_path"].string_value = str(onnx_path.resolve())
    config.parameters["ort_providers"].string_value = json.dumps(ORT_PROVIDERS[variant.accelerator])
    config.parameters["ort_threads"].string_value = str(variant.ort_threads or 0)


def render_repository(config_text: str, onnx_path: Path, dest: Path, variant: TritonVariant) -> Path:
    """Write `<dest>/<model>/` for `variant` from the canonical `config.pbtxt` text; returns `dest`."""
    config = text_format.Parse(config_text, mc.ModelConfig())
    model_name = config.name
    config.ClearField("instance_group")
    _batching(config, variant)
    version_dir = dest / model_name / "1"
    if version_dir.parent.exists():
        shutil.rmtree(version_dir.parent)
    version_dir.mkdir(parents=True)
    if variant.server_kind == "native":
        _native(config, variant)
        (version_dir / "model.onnx").symlink_to(onnx_path.resolve())
    else:
        _python_backend(config, variant, onnx_path)
        shutil.copy(PYTHON_MODEL_FILE, version_dir / "model.py")
    write_config(config, dest / model_name / "config.pbtxt")
    return dest

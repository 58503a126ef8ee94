"""Rendering the served repository for each Triton variant, from the checked-in config.pbtxt."""

from __future__ import annotations

import json
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serving.triton.repository import TritonVariant, read_config, render_repository
from tests.conftest import REPO

SOURCE = (REPO / "model_repository" / "resnet18" / "config.pbtxt").read_text()


def _render(tmp_path: Path, variant: TritonVariant) -> mc.ModelConfig:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"onnx")
    render_repository(SOURCE, onnx, tmp_path / "repo", variant)
    return read_config(tmp_path / "repo" / "resnet18" / "config.pbtxt")


def test_bundled_server_gets_the_python_backend_running_ort(tmp_path: Path) -> None:
    config = _render(tmp_path, TritonVariant("bundled", "cpu", instance_count=2, ort_threads=2))
    assert config.backend == "python" and not config.platform
    assert json.loads(config.parameters["ort_providers"].string_value) == ["CPUExecutionProvider"]
    assert config.parameters["ort_threads"].string_value == "2"
    assert config.instance_group[0].count == 2 and config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert (tmp_path / "repo" / "resnet18" / "1" / "model.py").exists()


def test_native_tensorrt_variant_caches_engines(tmp_path: Path) -> None:
    config = _render(tmp_path, TritonVariant("native", "tensorrt", fp16=True, engine_cache_dir="/cache/trt"))
    assert config.platform == "onnxruntime_onnx"
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    parameters = dict(accelerator.parameters)
    assert parameters["precision_mode"] == "FP16"
    assert (parameters["trt_engine_cache_enable"], parameters["trt_engine_cache_path"]) == ("1", "/cache/trt")
    assert (tmp_path / "repo" / "resnet18" / "1" / "model.onnx").is_symlink()


def test_native_cpu_variant_has_no_accelerator(tmp_path: Path) -> None:
    config = _render(tmp_path, TritonVariant("native", "cpu"))
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator

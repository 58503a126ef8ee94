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


def test_dynamic_batching_is_rendered_for_both_server_kinds(tmp_path: Path) -> None:
    for kind in ("bundled", "native"):
        (tmp_path / kind).mkdir()
        config = _render(tmp_path / kind, TritonVariant(kind, "cpu", dynamic_batching=True, max_queue_delay_us=1500,
                                                        preferred_batch_sizes=(4, 8)))
        assert config.HasField("dynamic_batching")
        assert config.dynamic_batching.max_queue_delay_microseconds == 1500
        assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    (tmp_path / "off").mkdir()
    assert not _render(tmp_path / "off", TritonVariant("bundled", "cpu")).HasField("dynamic_batching")


def test_jpeg_ensemble_chains_the_preprocess_model_to_the_classifier(tmp_path: Path) -> None:
    from serving.triton.ensemble import render_jpeg_ensemble

    classifier = _render(tmp_path, TritonVariant("native", "cuda"))
    names = render_jpeg_ensemble(classifier, tmp_path / "repo", preprocess_instances=3)
    assert names == ["resnet18_preprocess", "resnet18_jpeg"]
    preprocess = read_config(tmp_path / "repo" / "resnet18_preprocess" / "config.pbtxt")
    ensemble = read_config(tmp_path / "repo" / "resnet18_jpeg" / "config.pbtxt")
    # Python backend preprocessing on the CPU, whatever serves the classifier (native ORT here).
    assert preprocess.backend == "python" and preprocess.instance_group[0].count == 3
    assert preprocess.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert (preprocess.input[0].data_type, list(preprocess.input[0].dims)) == (mc.TYPE_STRING, [1])
    assert (preprocess.output[0].name, list(preprocess.output[0].dims)) == ("input", [3, 224, 224])
    # Triton refuses an ensemble whose max_batch_size exceeds a member's; the version folder must exist.
    assert ensemble.platform == "ensemble"
    assert ensemble.max_batch_size == preprocess.max_batch_size == classifier.max_batch_size
    assert (tmp_path / "repo" / "resnet18_jpeg" / "1").is_dir()
    first, second = ensemble.ensemble_scheduling.step
    assert (first.model_name, dict(first.input_map), dict(first.output_map)) == (
        "resnet18_preprocess", {"jpeg": "jpeg"}, {"input": "preprocessed"})
    assert (second.model_name, dict(second.input_map), dict(second.output_map)) == (
        "resnet18", {"input": "preprocessed"}, {"logits": "logits"})
    assert (ensemble.output[0].name, list(ensemble.output[0].dims)) == ("logits", [1000])
    version_dir = tmp_path / "repo" / "resnet18_preprocess" / "1"
    assert {p.name for p in version_dir.iterdir()} == {"model.py", "tierbench_images.py"}

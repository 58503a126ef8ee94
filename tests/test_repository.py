"""Rendering the served repository for each Triton variant, from the canonical config (checked in for the built-in
models, generated from the ONNX file for any other)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serving.paths import REPO_ROOT
from serving.triton.installation import INSTALLATIONS, TritonServerKind
from serving.triton.repository import TritonVariant, read_config, render_repository
from serving.triton.server import TritonServer
from serving.workloads.image.preprocessing import DEFAULT_PREPROCESSING

SOURCE = read_config(REPO_ROOT / "model_repository" / "resnet18" / "config.pbtxt")


# Each kind of server as the factory would build it, without looking for one on this machine.
SERVERS = {kind: cls(Path("tritonserver"), Path("backends")) for kind, cls in INSTALLATIONS.items()}


def _render(tmp_path: Path, kind: str, variant: TritonVariant) -> mc.ModelConfig:
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"onnx")
    render_repository(SOURCE, onnx, tmp_path / "repo", variant, SERVERS[TritonServerKind(kind)])
    return read_config(tmp_path / "repo" / "resnet18" / "config.pbtxt")


def test_bundled_server_gets_the_python_backend_running_ort(tmp_path: Path) -> None:
    config = _render(tmp_path, "bundled", TritonVariant("cpu", instance_count=2, ort_threads=2))
    assert config.backend == "python" and not config.platform
    assert json.loads(config.parameters["ort_providers"].string_value) == ["CPUExecutionProvider"]
    assert config.parameters["ort_threads"].string_value == "2"
    assert config.instance_group[0].count == 2 and config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert (tmp_path / "repo" / "resnet18" / "1" / "model.py").exists()


def test_native_tensorrt_variant_caches_engines(tmp_path: Path) -> None:
    config = _render(tmp_path, "native", TritonVariant("tensorrt", fp16=True, engine_cache_dir="/cache/trt"))
    assert config.platform == "onnxruntime_onnx"
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    parameters = dict(accelerator.parameters)
    assert parameters["precision_mode"] == "FP16"
    assert (parameters["trt_engine_cache_enable"], parameters["trt_engine_cache_path"]) == ("1", "/cache/trt")
    assert (tmp_path / "repo" / "resnet18" / "1" / "model.onnx").is_symlink()


def test_tensorrt_int8_reads_the_qdq_files_own_scales_on_both_server_kinds(tmp_path: Path) -> None:
    """Explicit INT8: the precision switched on, and no calibration table (one beside Q/DQ nodes fails the session)."""
    variant = TritonVariant("tensorrt", int8=True)
    (tmp_path / "b").mkdir()
    (accelerator,) = _render(tmp_path, "native", variant).optimization \
        .execution_accelerators.gpu_execution_accelerator
    assert accelerator.parameters["precision_mode"] == "INT8"
    assert not any("calibration" in key for key in accelerator.parameters)
    options = json.loads(_render(tmp_path / "b", "bundled", variant).parameters["ort_provider_options"].string_value)
    trt = options["TensorrtExecutionProvider"]
    assert trt["trt_int8_enable"] is True and trt["trt_fp16_enable"] is False
    assert not any("calibration" in key for key in trt)


def test_native_cpu_variant_has_no_accelerator(tmp_path: Path) -> None:
    config = _render(tmp_path, "native", TritonVariant("cpu"))
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator


def _parameters(accelerator: mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator) -> dict[str, str]:
    return dict(accelerator.parameters)


def test_native_cuda_variant_is_a_gpu_instance_with_the_cuda_ep(tmp_path: Path) -> None:
    config = _render(tmp_path, "native", TritonVariant("cuda", instance_count=2))
    assert config.platform == "onnxruntime_onnx"
    assert [(g.kind, g.count) for g in config.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 2)]
    # The onnxruntime backend runs KIND_GPU instances on the CUDA EP; TensorRT would be an accelerator entry.
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator


def test_native_tensorrt_fp32_has_cache_timing_cache_and_one_profile(tmp_path: Path) -> None:
    variant = TritonVariant("tensorrt", engine_cache_dir="/c/trt/resnet18/gpu/key", trt_profile=(1, 8, 32))
    (accelerator,) = _render(tmp_path, "native", variant).optimization.execution_accelerators.gpu_execution_accelerator
    assert _parameters(accelerator) == {
        "precision_mode": "FP32",
        "max_workspace_size_bytes": str(1 << 30),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/c/trt/resnet18/gpu/key",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/c/trt/resnet18/gpu/key",
        "trt_profile_min_shapes": "input:1x3x224x224",
        "trt_profile_opt_shapes": "input:8x3x224x224",
        "trt_profile_max_shapes": "input:32x3x224x224",
    }


def test_tensorrt_without_a_cache_dir_leaves_the_cache_off(tmp_path: Path) -> None:
    (accelerator,) = _render(tmp_path, "native", TritonVariant("tensorrt")).optimization \
        .execution_accelerators.gpu_execution_accelerator
    assert not any(key.startswith(("trt_engine_cache", "trt_timing_cache")) for key in accelerator.parameters)


def test_bundled_tensorrt_passes_the_same_options_to_ort_in_the_python_backend(tmp_path: Path) -> None:
    variant = TritonVariant("tensorrt", fp16=True, engine_cache_dir="/c/key", trt_profile=(1, 4, 32))
    config = _render(tmp_path, "bundled", variant)
    assert config.backend == "python"
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert json.loads(config.parameters["ort_providers"].string_value) == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    options = json.loads(config.parameters["ort_provider_options"].string_value)
    assert options == {"TensorrtExecutionProvider": {
        "trt_fp16_enable": True,
        "trt_int8_enable": False,
        "trt_max_workspace_size": 1 << 30,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": "/c/key",
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": "/c/key",
        "trt_profile_min_shapes": "input:1x3x224x224",
        "trt_profile_opt_shapes": "input:4x3x224x224",
        "trt_profile_max_shapes": "input:32x3x224x224",
    }}


def test_bundled_cuda_variant_runs_gpu_instances_on_the_cuda_ep(tmp_path: Path) -> None:
    config = _render(tmp_path, "bundled", TritonVariant("cuda"))
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert json.loads(config.parameters["ort_providers"].string_value) == ["CUDAExecutionProvider",
                                                                           "CPUExecutionProvider"]
    assert json.loads(config.parameters["ort_provider_options"].string_value) == {}


def test_bundled_cuda_variant_passes_its_buckets_and_cuda_options_to_the_python_backend(tmp_path: Path) -> None:
    variant = TritonVariant("cuda", batch_buckets=(1, 2, 4, 8, 16, 32),
                            cuda_options=(("cudnn_conv_algo_search", "HEURISTIC"),))
    config = _render(tmp_path, "bundled", variant)
    assert json.loads(config.parameters["batch_buckets"].string_value) == [1, 2, 4, 8, 16, 32]
    assert json.loads(config.parameters["ort_provider_options"].string_value) == {
        "CUDAExecutionProvider": {"cudnn_conv_algo_search": "HEURISTIC"}}


@pytest.mark.parametrize("setting", [{"batch_buckets": (8, 32)}, {"cuda_options": (("gpu_mem_limit", "1"),)}])
def test_the_native_backend_refuses_what_only_the_python_backend_does(tmp_path: Path, setting: dict) -> None:
    with pytest.raises(ValueError, match="server: bundled"):
        _render(tmp_path, "native", TritonVariant("cuda", **setting))


def test_the_python_backends_shared_memory_is_one_flag_per_setting(tmp_path: Path) -> None:
    def flags(**kwargs) -> list[str]:
        server = TritonServer(SERVERS[TritonServerKind.BUNDLED], tmp_path, "resnet18", tmp_path / "log", **kwargs)
        return server.python_backend_flags()

    prefix = flags()
    assert len(prefix) == 1 and prefix[0].startswith("--backend-config=python,shm-region-prefix-name=")
    sized = flags(python_shm_mib=64)
    assert sized[1:] == ["--backend-config=python,shm-default-byte-size=67108864",
                         "--backend-config=python,shm-growth-byte-size=67108864"]


@pytest.mark.parametrize("server_kind", ["native", "bundled"])
def test_warmup_runs_each_batch_size_once_before_ready(tmp_path: Path, server_kind: str) -> None:
    config = _render(tmp_path, server_kind, TritonVariant("tensorrt", warmup_batch_sizes=(8, 1, 8, 64)))
    warmups = [(w.name, w.batch_size) for w in config.model_warmup]
    assert warmups == [("batch1", 1), ("batch8", 8)]  # deduplicated, sorted, none above max_batch_size (32)
    sample = config.model_warmup[0].inputs["input"]
    assert (sample.data_type, list(sample.dims), sample.zero_data) == (mc.TYPE_FP32, [3, 224, 224], True)


def test_dynamic_batching_is_rendered_for_both_server_kinds(tmp_path: Path) -> None:
    for kind in ("bundled", "native"):
        (tmp_path / kind).mkdir()
        config = _render(tmp_path / kind, kind, TritonVariant("cpu", dynamic_batching=True, max_queue_delay_us=1500,
                                                        preferred_batch_sizes=(4, 8)))
        assert config.HasField("dynamic_batching")
        assert config.dynamic_batching.max_queue_delay_microseconds == 1500
        assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    (tmp_path / "off").mkdir()
    assert not _render(tmp_path / "off", "bundled", TritonVariant("cpu")).HasField("dynamic_batching")


def test_a_queue_limit_and_timeout_shed_load_for_both_server_kinds(tmp_path: Path) -> None:
    for kind in ("native", "bundled"):
        (tmp_path / kind).mkdir()
        config = _render(tmp_path / kind, kind, TritonVariant("cpu", dynamic_batching=True, max_queue_size=4,
                                                              queue_timeout_us=20_000))
        policy = config.dynamic_batching.default_queue_policy
        assert (policy.max_queue_size, policy.default_timeout_microseconds) == (4, 20_000), kind
        assert policy.timeout_action == mc.ModelQueuePolicy.REJECT and not policy.allow_timeout_override
    (tmp_path / "unlimited").mkdir()
    unlimited = _render(tmp_path / "unlimited", "bundled", TritonVariant("cpu", dynamic_batching=True))
    assert not unlimited.dynamic_batching.HasField("default_queue_policy")


def test_a_max_batch_size_setting_bounds_the_classifier_and_its_warmup(tmp_path: Path) -> None:
    config = _render(tmp_path, "native", TritonVariant("cpu", dynamic_batching=True, max_batch_size=8,
                                                       warmup_batch_sizes=(1, 8, 16)))
    assert config.max_batch_size == 8 and [w.batch_size for w in config.model_warmup] == [1, 8]
    (tmp_path / "default").mkdir()
    assert _render(tmp_path / "default", "native", TritonVariant("cpu")).max_batch_size == SOURCE.max_batch_size == 32


def test_jpeg_ensemble_chains_the_preprocess_model_to_the_classifier(tmp_path: Path) -> None:
    from serving.triton.ensemble import render_jpeg_ensemble

    classifier = _render(tmp_path, "native", TritonVariant("cuda"))
    names = render_jpeg_ensemble(classifier, tmp_path / "repo", preprocess_instances=3,
                                 preprocessing=DEFAULT_PREPROCESSING)
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


def test_one_factory_builds_the_native_or_the_bundled_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import serving.triton.installation as installation

    assert installation.installation_kind("auto", native_on_path=True) is installation.NativeTriton
    assert installation.installation_kind("bundled", native_on_path=True) is installation.BundledTriton
    assert installation.installation_kind("auto", native_on_path=False) is installation.BundledTriton
    bundled = installation.find_installation("auto")  # no tritonserver on this machine's PATH
    assert isinstance(bundled, installation.BundledTriton) and bundled.binary.is_file()
    assert (bundled.server_mode, bundled.uses_node_onnxruntime) == ("triton_python_backend", True)
    monkeypatch.setattr(installation.shutil, "which", lambda name: None)
    with pytest.raises(installation.TritonNotFoundError, match="server=native but no `tritonserver`"):
        installation.find_installation("native")


def test_the_checked_in_configs_are_what_the_server_generates_from_the_onnx_file(tmp_path: Path) -> None:
    """One definition: `classifier_config` writes what model_repository/ holds for NVIDIA's container, for every
    built-in model."""
    from experiments.config.compose import load_config
    from serving.export import export_onnx
    from serving.triton.repository import classifier_config

    for name in ("resnet18", "tiny"):
        model = load_config([f"model={name}"]).model
        onnx = export_onnx(model, tmp_path).onnx_path if name == "tiny" else _exported_resnet_stand_in(tmp_path, model)
        generated = classifier_config(model.name, Path(onnx), model.max_batch_size, list(model.input_shape),
                                      [model.num_classes])
        assert generated == read_config(REPO_ROOT / "model_repository" / name / "config.pbtxt"), name


def _exported_resnet_stand_in(tmp_path: Path, model: object) -> str:
    """An ONNX file with the exporter's tensor names (exporting resnet18 itself would take seconds for nothing)."""
    from experiments.config.compose import load_config
    from serving.export import export_onnx

    return export_onnx(load_config(["model=tiny"]).model, tmp_path / "stand_in").onnx_path

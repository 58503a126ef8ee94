"""On a real NVIDIA GPU: a tiny sweep over every GPU variant, the TensorRT engine cache across a restart, and
NVML telemetry. Marked `gpu` (skipped where nvidia-smi finds no GPU) and `slow` (real servers).

TensorRT needs more than a GPU: NVIDIA's Triton container (native backends), or `pip install -e '.[gpu-cu12]'` /
`'.[gpu-cu13]'` (onnxruntime-gpu and TensorRT 10 for the driver's CUDA); without either the TensorRT parts skip and
say what is missing.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from tests import helpers
from tests.conftest import has_gpu
from tests.helpers import store_overrides, store_uri
from tests.processes import server_processes, wait_for_no_new_processes

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SWEEP_ID = "gpu-test"
BATCHES = (1, 4)


def tensorrt_unavailable_reason() -> str | None:
    """Why Triton's TensorRT EP cannot run on this machine; None when it can."""
    if shutil.which("tritonserver"):
        return None  # NVIDIA's container: the native onnxruntime backend carries TensorRT
    import onnxruntime

    from serving.triton.accelerators import ort_tensorrt_missing_libs

    if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():
        return (f"onnxruntime {onnxruntime.__version__} here lacks TensorrtExecutionProvider "
                f"(has {onnxruntime.get_available_providers()}): pip install -e '.[gpu-cu12]' or '.[gpu-cu13]'")
    missing = ort_tensorrt_missing_libs()
    if missing:
        return (f"ONNX Runtime's TensorRT provider cannot load {', '.join(missing)}: pip install -e "
                "'.[gpu-cu12]' or '.[gpu-cu13]'")
    return None


# Only asked on a GPU machine: elsewhere the `gpu` marker skips first, with its own reason.
TRT_REASON = tensorrt_unavailable_reason() if has_gpu() else None
BACKENDS = ["pytorch", "pytorch_fp16", "pytorch_compile", "triton_onnx"] + (
    ["triton_trt", "triton_trt_fp16"] if TRT_REASON is None else [])
MATRIX = [f"experiment.backends=[{','.join(BACKENDS)}]", "experiment.protocols=[http,grpc]",
          "experiment.input_formats=[tensor]", f"experiment.batch_sizes=[{','.join(map(str, BATCHES))}]",
          "experiment.concurrency=[1,4]"]


@pytest.fixture(scope="module")
def gpu_sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list]]:
    from experiments.run.sweep import run_sweep

    tmp = tmp_path_factory.mktemp("gpu-sweep")
    cfg = load_config([
        *store_overrides(tmp, SWEEP_ID), *MATRIX, "experiment.window_s=2.0", "experiment.warmup_s=0.5",
        "experiment.warmup_requests=5",
        f"++backends.triton_trt.engine_cache_dir={tmp / 'trt'}",
        f"++backends.triton_trt_fp16.engine_cache_dir={tmp / 'trt'}",
    ])
    before = server_processes()
    code = run_sweep(cfg)
    assert not wait_for_no_new_processes(before), "the sweep left processes running"
    yield code, helpers.runs(store_uri(tmp), sweep_id=SWEEP_ID)


def _ok(runs: list) -> list:
    """The measured trials, some of every variant's: a test looping over them must not pass on a sweep that measured
    none."""
    ok = [r for r in runs if r.data.tags["status"] == "ok"]
    assert {r.data.params["backend_variant"] for r in ok} == set(BACKENDS), "no trial of some variant was measured"
    return ok


def test_every_gpu_variant_runs_on_the_gpu(gpu_sweep) -> None:
    from experiments.plan import plan_trials

    code, runs = gpu_sweep
    assert len(runs) == sum(len(group.trials) for group in plan_trials(load_config(MATRIX))), "a trial per planned one"
    for run in runs:
        status, why = run.data.tags["status"], (run.info.run_name, run.data.tags.get("reason"))
        if status == "skipped":  # the only skip a GPU node may have: a Serve deployment without a gRPC ingress
            assert run.data.params["backend"] == "pytorch" and run.data.params["protocol"] == "grpc", why
        else:
            assert status == "ok", why
    assert code == 0
    for run in _ok(runs):
        params = run.data.params
        assert not params["gpu_name"].startswith("CPU:") and params["driver_version"] and params["cuda_version"]
        if params["backend"] == "pytorch":
            assert params["device"] == "cuda"
        else:
            expected = {"triton_onnx": "CUDAExecutionProvider", "triton_trt": "TensorrtExecutionProvider"}
            assert params["execution_provider"] == expected[params["backend"]]


def test_variants_run_in_their_precision_and_compile_before_measuring(gpu_sweep) -> None:
    _, runs = gpu_sweep
    by_variant = {r.data.params["backend_variant"]: r for r in _ok(runs)}
    assert by_variant["pytorch"].data.params["torch_dtype"] == "float32"
    assert by_variant["pytorch_fp16"].data.params["torch_dtype"] == "float16"
    compiled = by_variant["pytorch_compile"]
    assert compiled.data.params["torch_compile"] == "True" and compiled.data.metrics["torch_compile_s"] > 0
    if TRT_REASON is None:
        for variant, precision in (("triton_trt", "fp32"), ("triton_trt_fp16", "fp16")):
            params, metrics = by_variant[variant].data.params, by_variant[variant].data.metrics
            assert params["trt_precision"] == precision
            assert params["trt_engine_cache"] in ("built", "hit")
            assert ("trt_engine_build_s" in metrics) == (params["trt_engine_cache"] == "built")


def test_gpu_telemetry_is_present_and_sane(gpu_sweep) -> None:
    _, runs = gpu_sweep
    for run in _ok(runs):
        m, batch = run.data.metrics, int(run.data.params["batch_size"])
        assert 0 <= m["gpu_util_pct"] <= 100, run.info.run_name
        assert 0 < m["gpu_power_w"] < 1500 and m["gpu_mem_used_mb"] > 0 and m["gpu_energy_j"] > 0
        assert m["gpu_telemetry_samples"] >= 10
        images = m["request_count"] * batch
        assert m["energy_per_image_j"] == pytest.approx(m["gpu_energy_j"] / images, rel=1e-6)
        # The energy counter and the mean sampled power describe the same span: the windows the figures come from
        # (the stability rule's last few, not one window_s: first light on an H200 caught this test taking one).
        span_s = m["request_count"] / m["requests_s"]
        assert m["gpu_energy_j"] == pytest.approx(m["gpu_power_w"] * span_s, rel=0.35)


@pytest.mark.skipif(TRT_REASON is not None, reason=TRT_REASON or "")
def test_a_restart_with_a_warm_engine_cache_loads_instead_of_rebuilding(tmp_path: Path) -> None:
    import numpy as np
    import ray
    import tritonclient.http as httpclient

    from experiments.cluster.connection import ray_cluster
    from experiments.cluster.tiers import placement_options
    from experiments.run.server_group import build_backend
    from serving.probe import describe_node
    from serving.triton.accelerators import engine_files

    cfg = load_config(["experiment.batch_sizes=[1,4]", f"++backends.triton_trt.engine_cache_dir={tmp_path}"])
    before = server_processes()
    with ray_cluster(cfg.cluster, "local"):
        options = placement_options("local")
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(), timeout=120)
        starts = []
        for _ in range(2):
            backend = build_backend(cfg, "triton_trt", node, options)
            try:
                handle = backend.start()
                client = httpclient.InferenceServerClient(handle.urls["http"])
                tensor = httpclient.InferInput("input", [1, 3, 224, 224], "FP32")
                tensor.set_data_from_numpy(np.zeros((1, 3, 224, 224), dtype=np.float32), binary_data=True)
                logits = client.infer(cfg.model.name, [tensor]).as_numpy("logits")
                assert logits.shape == (1, 1000)
                cache_dir = Path(handle.params["trt_engine_cache_dir"])
                starts.append((handle.params["trt_engine_cache"], dict(handle.metrics), engine_files(cache_dir)))
            finally:
                backend.stop()
            time.sleep(1)
    assert not wait_for_no_new_processes(before)
    (first_status, first_metrics, first_files), (second_status, second_metrics, second_files) = starts
    assert first_status == "built" and "trt_engine_build_s" in first_metrics and first_files
    assert second_status == "hit" and "trt_engine_load_s" in second_metrics
    assert second_files == first_files, "the restart rewrote engine files"


def test_nvml_sampler_sees_the_gpu_work() -> None:
    import torch

    from experiments.measure.telemetry import NodeSampler

    sampler = NodeSampler(None, 20.0)
    try:
        description = sampler.describe()
        assert description["names"] and description["driver_version"]
        x = torch.randn(4096, 4096, device="cuda")
        time.sleep(0.5)
        start = time.time()
        while time.time() - start < 2.0:
            x = (x @ x).tanh()
        torch.cuda.synchronize()
        end = time.time()
        metrics = sampler.window(start, end)
    finally:
        sampler.stop()
    assert metrics["gpu_util_pct"] > 10 and metrics["gpu_power_w"] > 0 and metrics["gpu_energy_j"] > 0
    assert metrics["gpu_mem_used_mb"] > 64  # the 64 MiB tensor at least

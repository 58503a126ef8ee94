"""GPU settings checked without a GPU: what each backend asks of Ray, which trials a node skips and why,
what a server start reports about TensorRT engines, where engines are cached and how a cache hit is told."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from serving.backend import BackendContext, formable_batches
from serving.node import NodeInfo
from serving.ray_serve.backend import RayServeTorchBackend
from serving.ray_serve.settings import RayServeTorchSettings
from serving.triton.accelerators import (
    BUILT,
    HIT,
    NO_ENGINE,
    cache_status,
    engine_cache_dir,
    engine_cache_key,
    engine_files,
    missing_libraries,
    ort_tensorrt_missing_libs,
    slug,
    tensorrt_library_dirs,
)
from serving.triton.backend import TritonBackend
from serving.triton.facts import OnnxRuntimeFacts, TritonFacts
from serving.triton.installation import BundledTriton, NativeTriton
from serving.triton.settings import TritonSettings
from tests.helpers import CPU_NODE, GPU_NODE


def _context(node: NodeInfo, name: str = "triton_trt", batches: tuple[int, ...] = (1, 8)) -> BackendContext:
    return BackendContext(name=name, model=load_config().model, node=node,
                          ray_options={"resources": {"tier_rtx4090": 0.001}}, warmup_batch_sizes=batches)


def _triton(node: NodeInfo, **settings) -> TritonBackend:
    return TritonBackend(_context(node), TritonSettings(**settings))


# --- Triton -------------------------------------------------------------------------------------------------

def test_tensorrt_on_a_cpu_node_is_skipped_because_there_is_no_gpu() -> None:
    reason = _triton(CPU_NODE, accelerator="tensorrt").unsupported_reason("grpc", "tensor")
    assert "needs an NVIDIA GPU" in reason and "cpu-box" in reason


def test_tensorrt_without_the_provider_names_what_to_install() -> None:
    node = GPU_NODE.with_facts(OnnxRuntimeFacts(providers=("CPUExecutionProvider",)))
    reason = _triton(node, accelerator="tensorrt").unsupported_reason("http", "tensor")
    assert "lacks TensorrtExecutionProvider" in reason and "tierbench[gpu-cu13]" in reason


def test_tensorrt_with_its_libraries_missing_names_them() -> None:
    node = GPU_NODE.with_facts(replace(GPU_NODE.facts(OnnxRuntimeFacts),
                                       trt_missing_libs=("libnvinfer.so.10", "libnvonnxparser.so.10")))
    reason = _triton(node, accelerator="tensorrt").unsupported_reason("http", "tensor")
    assert "libnvinfer.so.10, libnvonnxparser.so.10" in reason and "tierbench[gpu-cu13]" in reason
    cuda12 = replace(node, driver_version="550.54", cuda_version="12.4")
    assert "tierbench[gpu-cu12]" in _triton(cuda12, accelerator="tensorrt").unsupported_reason("http", "tensor")


def test_native_triton_brings_its_own_tensorrt() -> None:
    node = GPU_NODE.with_facts(OnnxRuntimeFacts(trt_missing_libs=("libnvinfer.so.10",)), TritonFacts(native=True))
    assert _triton(node, accelerator="tensorrt").unsupported_reason("grpc", "tensor") is None


def test_gpu_node_with_everything_runs_tensorrt_and_cuda() -> None:
    for accelerator in ("tensorrt", "cuda"):
        assert _triton(GPU_NODE, accelerator=accelerator).unsupported_reason("grpc", "tensor") is None


def test_cuda_ep_falls_back_to_cpu_without_a_gpu_and_asks_no_gpu_of_ray() -> None:
    backend = _triton(CPU_NODE, accelerator="cuda")
    assert backend.accelerator == "cpu" and backend.unsupported_reason("http", "tensor") is None
    assert "num_gpus" not in backend.actor_options()


def test_host_actor_holds_a_gpu_fraction_only_where_ray_schedules_gpus() -> None:
    assert _triton(GPU_NODE, accelerator="tensorrt", num_gpus=0.25).actor_options() == {
        "num_cpus": 0.01, "resources": {"tier_rtx4090": 0.001}, "num_gpus": 0.25}
    no_ray_gpus = replace(GPU_NODE, ray_gpus=0.0)
    assert "num_gpus" not in _triton(no_ray_gpus, accelerator="tensorrt").actor_options()


def test_tensorrt_profile_covers_every_batch_and_is_tuned_for_the_largest_measured() -> None:
    assert _triton(GPU_NODE, accelerator="tensorrt").trt_profile() == (1, 8, 32)
    assert _triton(GPU_NODE, accelerator="tensorrt", trt_opt_batch_size=4).trt_profile() == (1, 4, 32)
    variant = _triton(GPU_NODE, accelerator="tensorrt", fp16=True).variant()
    assert variant.engine_cache and variant.fp16 and variant.warmup_batch_sizes == (1, 8)
    assert _triton(GPU_NODE, accelerator="tensorrt", warmup=False).variant().warmup_batch_sizes == ()
    assert _triton(GPU_NODE, accelerator="cuda").variant().engine_cache is False
    bounded = _triton(GPU_NODE, accelerator="tensorrt", dynamic_batching=True, max_batch_size=16)
    assert bounded.trt_profile() == (1, 8, 16) and bounded.variant().max_batch_size == 16
    assert bounded.max_request_batch == 16, "the cross-check sends no larger batch"
    assert bounded.batching_params()["server_max_batch_size"] == 16
    assert _triton(GPU_NODE, accelerator="tensorrt").variant().max_batch_size == 32, "the model's"


def test_formable_batches_are_every_sum_of_request_sizes_up_to_the_largest() -> None:
    assert formable_batches((8,), 32) == (8, 16, 24, 32)
    assert formable_batches((1, 8), 6) == (1, 2, 3, 4, 5, 6)
    assert formable_batches((3, 5), 11) == (3, 5, 6, 8, 9, 10, 11)
    assert formable_batches((), 8) == ()


def test_a_gpu_batcher_warms_every_batch_it_can_form_a_cpu_only_the_requests() -> None:
    """On a GPU each new forward-pass shape's first run searches cuDNN's algorithms: a server that merges requests
    warms up every size it can form, so none of those searches lands in a measurement window."""
    gpu = TritonBackend(_context(GPU_NODE, "triton_onnx_dynbatch", (8,)),
                        TritonSettings(dynamic_batching=True, max_queue_delay_us=500))
    assert gpu.variant().warmup_batch_sizes == (8, 16, 24, 32)
    assert _triton(GPU_NODE, accelerator="cuda").variant().warmup_batch_sizes == (1, 8)  # no batcher
    cpu = TritonBackend(_context(CPU_NODE, "triton_onnx_dynbatch", (8,)), TritonSettings(dynamic_batching=True))
    assert cpu.variant().warmup_batch_sizes == (8,)
    serve = RayServeTorchBackend(_context(GPU_NODE, "pytorch_batched", (1,)),
                                 RayServeTorchSettings(batching=True, max_batch_size=4, max_ongoing_requests=8))
    assert serve.warmup_batch_sizes() == (1, 2, 3, 4)
    assert serve._app_args()["warmup_batch_sizes"] == [1, 2, 3, 4]
    plain = RayServeTorchBackend(_context(GPU_NODE, "pytorch", (1, 8)), RayServeTorchSettings())
    assert plain.warmup_batch_sizes() == (1, 8)


def test_a_cuda_batcher_gets_one_onnx_runtime_session_per_power_of_two_bucket() -> None:
    """On the CUDA EP a session whose input shape changes pays 40-240 ms (cuDNN's plans): the bundled server's Python
    backend keeps a session per bucket where the batcher forms changing sizes, and none where sizes never change."""
    def buckets(node=GPU_NODE, name="triton_onnx_dynbatch", **settings) -> tuple[int, ...]:
        return TritonBackend(_context(node, name, (8,)), TritonSettings(**settings)).variant().batch_buckets

    assert buckets(dynamic_batching=True) == (1, 2, 4, 8, 16, 32)
    assert buckets(dynamic_batching=True, max_batch_size=24) == (1, 2, 4, 8, 16, 24), "the largest batch is one"
    assert buckets(dynamic_batching=True, batch_buckets=[8, 16]) == (8, 16, 32)
    assert buckets(dynamic_batching=True, batch_buckets=[]) == (), "[]: one session for every shape"
    assert buckets() == (), "no batcher: a trial's requests never change shape"
    assert buckets(CPU_NODE, dynamic_batching=True) == (), "the CPU EP does not pay for a change of shape"
    assert buckets(dynamic_batching=True, accelerator="tensorrt") == ()
    native = GPU_NODE.with_facts(TritonFacts(native=True, backends=("onnxruntime",)))
    assert buckets(native, dynamic_batching=True) == (), "NVIDIA's native backend keeps its one session"


def test_the_python_backends_sessions_options_and_shared_memory_are_checked_with_their_keys() -> None:
    model = load_config().model
    (problem,) = TritonSettings(dynamic_batching=True, batch_buckets=[8, 64]).check("dyn", model, {})
    assert problem.startswith("backends.dyn.batch_buckets=[8, 64] is not allowed: each must be in 1..")
    (problem,) = TritonSettings(server="native", batch_buckets=[8]).check("dyn", model, {})
    assert "server: bundled" in problem
    (problem,) = TritonSettings(accelerator="cpu", cuda_options={"cudnn_conv_algo_search": "HEURISTIC"}).check(
        "cpu", model, {})
    assert problem.startswith("backends.cpu.cuda_options=") and "accelerator cuda or tensorrt" in problem
    (problem,) = TritonSettings(python_shm_mib=0).check("t", model, {})
    assert problem.startswith("backends.t.python_shm_mib=0 is not allowed: a positive integer, or null")
    assert TritonSettings(python_shm_mib=64, cuda_options={"cudnn_conv_algo_search": "HEURISTIC"},
                          batch_buckets=[]).check("t", model, {}) == []


def test_fp16_on_any_provider_and_int8_with_fp16_refused_with_the_key() -> None:
    """FP16 is TensorRT's kernels or, on ONNX Runtime's own providers, the converted file; INT8 and FP16 exclude."""
    model = load_config().model
    for accelerator in ("cpu", "cuda", "tensorrt"):
        assert TritonSettings(accelerator=accelerator, fp16=True).check("t", model, {}) == [], accelerator
    assert TritonSettings(accelerator="tensorrt", int8=True).check("t", model, {}) == []
    (problem,) = TritonSettings(fp16=True, int8=True).check("t", model, {})
    assert problem.startswith("backends.t.int8=True is not allowed: INT8 and FP16 are two precisions")


def _start_info(cache: dict | None) -> dict:
    info = {"export": {"max_abs_diff": 1e-5}, "ready_s": 42.0, "gpu_ids": [0], "node_id": "n1", "hostname": "gpu-box",
            "preprocess_instances": 0}
    if cache is not None:
        info["engine_cache"] = cache
    return info


@pytest.mark.parametrize("status,metric", [(BUILT, "trt_engine_build_s"), (HIT, "trt_engine_load_s")])
def test_start_reports_whether_the_engine_was_built_or_loaded(status: str, metric: str) -> None:
    backend = _triton(GPU_NODE, accelerator="tensorrt", fp16=True)
    params, metrics = backend._start_facts(_start_info({"dir": "/c/k", "status": status, "files": 1}))
    assert params["trt_engine_cache"] == status and params["trt_precision"] == "fp16"
    assert params["execution_provider"] == "TensorrtExecutionProvider" and params["server_gpu_ids"] == "0"
    assert metrics == {"server_ready_s": 42.0, metric: 42.0}


def test_without_a_cache_every_start_counts_as_a_build() -> None:
    params, metrics = _triton(GPU_NODE, accelerator="tensorrt", engine_cache=False)._start_facts(_start_info(None))
    assert params["trt_engine_cache"] == "off" and metrics["trt_engine_build_s"] == 42.0


# --- Ray Serve PyTorch --------------------------------------------------------------------------------------

def _torch(node: NodeInfo, **settings) -> RayServeTorchBackend:
    return RayServeTorchBackend(_context(node, name="pytorch_fp16"), RayServeTorchSettings(**settings))


def test_half_precision_is_skipped_on_a_node_without_cuda() -> None:
    reason = _torch(CPU_NODE, half=True).unsupported_reason("http", "tensor")
    assert "half precision (fp16)" in reason and "needs a CUDA GPU" in reason and "cpu-box" in reason
    assert _torch(GPU_NODE, half=True).unsupported_reason("http", "tensor") is None


def test_half_precision_is_cross_checked_with_the_fp16_tolerance() -> None:
    assert _torch(GPU_NODE, half=True).numerics == "fp16"
    assert _torch(GPU_NODE).numerics == "fp32"


def test_replicas_hold_a_gpu_fraction_on_gpu_nodes_only() -> None:
    assert _torch(GPU_NODE, replica_num_gpus=0.25).actor_options()["num_gpus"] == 0.25
    assert _torch(GPU_NODE).device == "cuda"
    assert "num_gpus" not in _torch(CPU_NODE).actor_options()
    assert _torch(CPU_NODE).device == "cpu"


def test_compile_variant_reports_its_compile_cost_as_a_metric() -> None:
    backend = _torch(GPU_NODE, compile=True)
    params, metrics = backend._start_facts({"dtype": "float32", "torch_compile": True, "gpu_ids": [0],
                                            "warmup_s": 30.0, "warmup_first_call_s": 20.0, "torch_compile_s": 25.0})
    assert params["torch_compile"] and params["torch_compile_mode"] == "default" and params["replica_num_gpus"] == 0.5
    assert metrics == {"server_warmup_s": 30.0, "server_warmup_first_call_s": 20.0, "torch_compile_s": 25.0}


def test_gpu_variants_are_entries_of_their_contract_backend() -> None:
    cfg = load_config()
    settings = {name: cfg.backends[name] for name in cfg.backends}
    assert settings["pytorch_fp16"].family == "pytorch" and settings["pytorch_fp16"].half
    assert settings["pytorch_compile"].family == "pytorch" and settings["pytorch_compile"].compile
    assert settings["triton_trt_fp16"].family == "triton_trt" and settings["triton_trt_fp16"].fp16
    assert settings["triton_trt"].engine_cache and settings["triton_onnx"].accelerator == "cuda"
    assert settings["triton_onnx"].family == "triton_onnx"


# --- engine cache ------------------------------------------------------------------------------------------

def test_engine_cache_is_per_model_gpu_and_engine_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    key = engine_cache_key("ort1.31.1-trt10.16.1.11", "fp16", (1, 8, 32), "01234567")
    assert key == "ort1.31.1-trt10.16.1.11-fp16-b1-8-32-01234567"
    assert engine_cache_dir(None, "resnet18", "NVIDIA GeForce RTX 4090", key) == (
        tmp_path / "tierbench" / "trt" / "resnet18" / "nvidia-geforce-rtx-4090" / key)
    assert engine_cache_dir("/data/trt", "resnet18", "NVIDIA A100-SXM4-80GB", key) == Path(
        "/data/trt/resnet18/nvidia-a100-sxm4-80gb") / key
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_engines_of_another_runtime_never_share_a_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_SERVER_VERSION", "2.59.0")
    assert NativeTriton.runtime_tag() == "native2.59.0"
    assert BundledTriton.runtime_tag().startswith("ort") and "-trt" in BundledTriton.runtime_tag()


def test_cache_status_tells_a_hit_from_a_build(tmp_path: Path) -> None:
    assert cache_status({}, engine_files(tmp_path)) == NO_ENGINE
    engine = tmp_path / "TensorrtExecutionProvider_TRTKernel_graph_main_123_0_sm89.engine"
    engine.write_bytes(b"x")
    built = engine_files(tmp_path)
    assert cache_status({}, built) == BUILT
    assert cache_status(built, engine_files(tmp_path)) == HIT
    engine.write_bytes(b"rebuilt")
    os.utime(engine, ns=(built[engine.name] + 10**9, built[engine.name] + 10**9))
    assert cache_status(built, engine_files(tmp_path)) == BUILT


# --- TensorRT libraries ------------------------------------------------------------------------------------

def test_cpu_onnxruntime_has_no_tensorrt_provider_library() -> None:
    import onnxruntime

    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here: its TensorRT provider library exists")
    assert ort_tensorrt_missing_libs() == ("libonnxruntime_providers_tensorrt.so",)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build two tiny shared libraries")
def test_missing_libraries_names_what_the_loader_cannot_find(tmp_path: Path) -> None:
    (tmp_path / "dep.c").write_text("int dep(void) { return 1; }\n")
    (tmp_path / "user.c").write_text("int dep(void); int user(void) { return dep(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libtbdep.so.7", "-o", "libtbdep.so.7", "dep.c"],
                   cwd=tmp_path, check=True)
    (tmp_path / "libtbdep.so").symlink_to("libtbdep.so.7")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libtbuser.so", "user.c", "-L.", "-ltbdep"], cwd=tmp_path,
                   check=True)
    user = tmp_path / "libtbuser.so"
    assert missing_libraries(user, [str(tmp_path)]) == ()
    assert missing_libraries(user, []) == ("libtbdep.so.7",)


def test_tensorrt_wheel_libraries_are_found_on_sys_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    libs = tmp_path / "tensorrt_libs"
    libs.mkdir()
    (libs / "libnvinfer.so.10").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert str(libs) in tensorrt_library_dirs()


def test_gpu_only_variants_on_a_cpu_node_are_skipped_with_reasons_before_any_server_starts() -> None:
    from experiments.plan import plan_trials
    from experiments.run.server_group import ServerGroup

    cfg = load_config(["experiment.backends=[pytorch_fp16,triton_trt,triton_trt_fp16]",
                          "experiment.protocols=[http]", "experiment.input_formats=[tensor]"])
    records = []
    for group in plan_trials(cfg):
        # No client pool: nothing may be measured (or started) for trials the node can't run.
        ServerGroup(cfg, group, CPU_NODE, {}, None, lambda record, logs: records.append(record),
                    lambda name, text: None).run(group.trials)
    trials = 3 * 3  # variants x the default's axes (b1c1, b8c1, b1c4)
    assert len(records) == trials and all(r.status == "skipped" and not r.metrics for r in records)
    reasons = {r.trial.variant: r.reason for r in records}
    assert reasons["pytorch_fp16"].startswith("half precision (fp16) in PyTorch needs a CUDA GPU")
    assert reasons["triton_trt"] == reasons["triton_trt_fp16"] == (
        "the TensorRT execution provider needs an NVIDIA GPU; node cpu-box has none (CPU: Some CPU) "
        "(docs/troubleshooting.md#skipped-no-gpu)")
    assert all("driver_version" not in r.params for r in records)


def test_the_routers_backoff_reaches_the_deployment_and_its_serve_config() -> None:
    """`router_max_backoff_s` is Serve's `request_router_config.max_backoff_s`, in the options the sweep deploys with
    and in the serve_config.yaml it exports (which Ray's own schema accepts); unset, Serve keeps its default."""
    import yaml
    from ray.serve.config import RequestRouterConfig
    from ray.serve.schema import ServeDeploySchema

    backend = _torch(CPU_NODE, router_max_backoff_s=0.05)
    assert backend._deployment_options({})["request_router_config"] == {"max_backoff_s": 0.05}
    assert "request_router_config" not in _torch(CPU_NODE)._deployment_options({})
    config = yaml.safe_load(backend.deploy_files({})["serve_config.yaml"])
    (deployment,) = ServeDeploySchema.model_validate(config).applications[0].deployments
    assert RequestRouterConfig(**deployment.request_router_config).max_backoff_s == 0.05
    facts = {"dtype": "float32", "torch_compile": False}
    assert backend._start_facts(facts)[0]["router_max_backoff_s"] == 0.05  # the trial says which ran
    assert "router_max_backoff_s" not in _torch(CPU_NODE)._start_facts(facts)[0]


def test_a_config_measured_without_the_proxy_says_how_to_deploy_it_so() -> None:
    """Direct ingress (no Serve proxy) is a switch of the Serve instance, not of the config: the exported file names it,
    since behind the proxy the same config pays the proxy's time per request."""
    import yaml

    direct = _torch(CPU_NODE, direct_ingress=True).deploy_files({})["serve_config.yaml"]
    assert "Measured with Serve's direct ingress" in direct and "RAY_SERVE_ENABLE_DIRECT_INGRESS=1" in direct
    assert "MIN_DRAINING" not in direct, "the sweep's short drain is not advice for a deployment"
    proxied = _torch(CPU_NODE).deploy_files({})["serve_config.yaml"]
    assert "direct ingress" not in proxied
    assert yaml.safe_load(direct) == yaml.safe_load(proxied), "the same application either way"


def test_a_config_measured_through_haproxy_says_how_to_deploy_it_so() -> None:
    """HAProxy in place of Serve's proxy is a switch of the Serve instance too: the exported file names it."""
    import yaml

    through = _torch(CPU_NODE, haproxy=True).deploy_files({})["serve_config.yaml"]
    assert "Measured through Serve's HAProxy ingress" in through and "RAY_SERVE_ENABLE_HA_PROXY=1" in through
    proxied = _torch(CPU_NODE).deploy_files({})["serve_config.yaml"]
    assert "HAProxy" not in proxied
    assert yaml.safe_load(through) == yaml.safe_load(proxied), "the same application either way"

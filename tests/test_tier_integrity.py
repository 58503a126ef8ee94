"""A tier is what it says: on a GPU tier no server computes on the CPU, whether the node lacks the GPU, its torch
cannot see it, its ONNX Runtime cannot load a GPU provider, or a started server reports the CPU. Checked without a
GPU: real backends judging NodeInfo facts, and a ServerGroup whose server start reports the CPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from experiments.config.compose import load_config
from experiments.plan import plan_trials
from experiments.results.records import Status, TrialRecord
from experiments.run.server_group import ServerGroup, build_backend
from serving.backend import ServerHandle
from serving.node import NodeInfo
from serving.paths import REPO_ROOT
from serving.pytorch.facts import TorchFacts
from serving.triton.facts import OnnxRuntimeFacts, TritonFacts
from serving.triton.installation import INSTALLATIONS, TritonServerKind
from serving.triton.repository import TritonVariant, instances_on_gpu, read_config, render_repository
from tests.stand_in_group import StandInClients, run_stand_in_group

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
A100_NODE = NodeInfo("a100-box", "10.0.0.3", "n2", "Some CPU", 16, gpu_names=("NVIDIA A100-SXM4-80GB",),
                     driver_version="550.54.15", cuda_version="12.4", ray_gpus=1.0).with_facts(
    TorchFacts(version="2.6.0a0+ecf3bae40a", cuda_build="12.8", cuda=True),
    OnnxRuntimeFacts(version="1.26.0", providers=GPU_PROVIDERS, loaded=GPU_PROVIDERS))
CPU_NODE = NodeInfo("cpu-box", "127.0.0.1", "n0", "Some CPU", 2,
                    gpu_problem="NVML: NVML Shared Library Not Found").with_facts(
    OnnxRuntimeFacts(providers=("CPUExecutionProvider",)))


def _backend(tier: str, variant: str, node: NodeInfo, emulated: bool = False) -> Any:
    return build_backend(load_config([f"gpu={tier}"]), variant, node, {}, emulated)


def test_a_gpu_tier_node_without_a_gpu_skips_every_variant_instead_of_falling_back_to_the_cpu() -> None:
    for variant in ("triton_onnx", "pytorch", "pytorch_batched"):
        backend = _backend("a100", variant, CPU_NODE)
        reason = backend.unsupported_reason("grpc", "tensor")
        assert reason is not None and "tier a100 is a GPU tier" in reason and "no NVIDIA GPU" in reason, variant
        assert "NVML Shared Library Not Found" in reason
    assert _backend("a100", "triton_onnx", CPU_NODE).accelerator == "cuda", "no silent CPU execution provider"


def test_the_local_tier_and_emulated_clusters_keep_running_on_the_cpu() -> None:
    local = _backend("local", "triton_onnx", CPU_NODE)
    assert local.accelerator == "cpu" and local.unsupported_reason("grpc", "tensor") is None
    assert _backend("local", "pytorch", CPU_NODE).unsupported_reason("http", "jpeg") is None
    emulated = _backend("a100", "triton_onnx", CPU_NODE, emulated=True)
    assert emulated.accelerator == "cpu" and emulated.unsupported_reason("grpc", "tensor") is None


def test_a_gpu_node_whose_torch_does_not_see_the_gpu_skips_pytorch_on_a_gpu_tier() -> None:
    cpu_torch = A100_NODE.with_facts(TorchFacts(cuda=False, version="2.14.1+cu130", cuda_build="13.0",
                                                problem="The NVIDIA driver on your system is too old (found version "
                                                        "12040)"))
    reason = _backend("a100", "pytorch", cpu_torch).unsupported_reason("http", "tensor")
    assert "torch 2.14.1+cu130" in reason and "built for CUDA 13.0" in reason and "does not see" in reason
    assert "driver 550.54.15, CUDA 12.4" in reason and "too old" in reason
    cpu_build = cpu_torch.with_facts(replace(cpu_torch.facts(TorchFacts), cuda_build=None, problem=None))
    assert "a CPU-only build" in _backend("a100", "pytorch", cpu_build).unsupported_reason("http", "tensor")
    assert _backend("a100", "pytorch", A100_NODE).unsupported_reason("http", "tensor") is None
    assert _backend("a100", "triton_onnx", cpu_torch).unsupported_reason("grpc", "tensor") is None, \
        "Triton does not need torch's CUDA"


def test_a_gpu_node_whose_onnxruntime_cannot_load_the_cuda_provider_skips_triton_on_a_gpu_tier() -> None:
    ort = A100_NODE.facts(OnnxRuntimeFacts)
    listed_not_loaded = A100_NODE.with_facts(replace(ort, loaded=("CPUExecutionProvider",), problems=(
        "CUDAExecutionProvider: did not load: the session fell back to ['CPUExecutionProvider']",)))
    reason = _backend("a100", "triton_onnx", listed_not_loaded).unsupported_reason("grpc", "tensor")
    assert "lists but cannot load CUDAExecutionProvider" in reason and "fell back" in reason
    assert "tierbench[gpu-cu12]" in reason, "the extra for the driver's CUDA 12.4"
    cpu_wheel = A100_NODE.with_facts(replace(ort, providers=("CPUExecutionProvider",),
                                             loaded=("CPUExecutionProvider",)))
    assert "lacks CUDAExecutionProvider" in _backend("a100", "triton_onnx", cpu_wheel).unsupported_reason("http",
                                                                                                         "tensor")
    native = cpu_wheel.with_facts(TritonFacts(native=True, backends=("onnxruntime", "python")))
    assert _backend("a100", "triton_onnx", native).unsupported_reason("http", "tensor") is None, \
        "NVIDIA's container brings its own ONNX Runtime"
    no_ort_backend = native.with_facts(TritonFacts(native=True, backends=("python",)))
    assert "has no onnxruntime backend" in _backend("a100", "triton_onnx", no_ort_backend).unsupported_reason(
        "http", "tensor")


def test_no_triton_at_all_is_a_skip_with_the_reason() -> None:
    node = CPU_NODE.with_facts(TritonFacts(bundled_problem="nvidia-pytriton is not installed"))
    reason = _backend("local", "triton_onnx", node).unsupported_reason("grpc", "tensor")
    assert "no Triton on node cpu-box" in reason and "nvidia-pytriton is not installed" in reason


def test_servers_report_whether_they_compute_on_the_gpu(tmp_path: Path) -> None:
    config = read_config(REPO_ROOT / "model_repository" / "resnet18" / "config.pbtxt")
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"")
    for accelerator, on_gpu in (("cuda", True), ("tensorrt", True), ("cpu", False)):
        for kind in ("bundled", "native"):
            server = INSTALLATIONS[TritonServerKind(kind)](Path("tritonserver"), Path("backends"))
            out = render_repository(config, onnx, tmp_path / kind / accelerator, TritonVariant(accelerator), server)
            assert instances_on_gpu((out / "resnet18" / "config.pbtxt").read_text()) is on_gpu, (kind, accelerator)


class _Finished:
    def __init__(self) -> None:
        self.records: list[TrialRecord] = []

    def __call__(self, record: TrialRecord, logs: dict[str, str]) -> None:
        self.records.append(record)


def test_a_server_that_starts_on_the_cpu_under_a_gpu_tier_fails_its_trials_once_without_a_retry() -> None:
    cfg = load_config(["gpu=a100", "experiment.backends=[triton_onnx]", "experiment.protocols=[grpc]",
                          "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]",
                          "experiment.concurrency=[1,2]"])
    (group,) = plan_trials(cfg)
    finished = _Finished()
    server = ServerGroup(cfg, group, A100_NODE, {}, clients=None, finish=finished,
                         save_server_file=lambda name, text: None)
    calls = {"start": 0, "stop": 0}

    def start() -> ServerHandle:  # the server process stands in here: it came up on the CPU execution provider
        calls["start"] += 1
        return ServerHandle("triton_python_backend", {}, params={"execution_provider": "CPUExecutionProvider"},
                            on_gpu=False)

    def stop() -> dict[str, str]:
        calls["stop"] += 1
        return {}

    server.backend.start, server.backend.stop = start, stop
    server.run(group.trials)
    assert calls["start"] == 1 and calls["stop"] >= 1, "stopped, and not started again (idempotent stop)"
    assert [r.status for r in finished.records] == [Status.FAILED, Status.FAILED]
    reason = finished.records[0].reason
    assert "reports running on the CPU (CPUExecutionProvider)" in reason and "tier a100 is a GPU tier" in reason
    assert not any(r.metrics for r in finished.records), "nothing measured"
    assert Status.SKIPPED not in {r.status for r in finished.records}


@pytest.mark.parametrize(("errors", "measured_again"), [
    ("other: InferenceServerException: [500] in ensemble 'resnet18_jpeg', Stub process 'resnet18_preprocess_0_1' is "
     "not healthy.", True),
    ("http_503: HTTP 503 from the server: Exceeds maximum queue size", False)])
def test_a_trial_answered_with_errors_is_measured_again_only_when_they_say_the_server_broke(
        monkeypatch, errors: str, measured_again: bool) -> None:
    """A Python-backend stub that missed its health check broke a part of the server: measured again on a fresh one.
    A server that shed the load answered it: that is its result."""
    finished, calls = run_stand_in_group(monkeypatch, [], failing={1}, answered_errors=errors)
    if measured_again:
        failed, retried = finished.records
        assert failed.tags["retried"] == "true" and retried.status == Status.OK and calls["start"] == 2
        assert retried.tags["earlier_failure"].startswith("50.0% of the requests failed")
    else:
        (kept,) = finished.records
        assert kept.status == Status.FAILED and "retried" not in kept.tags and calls["start"] == 1


def test_a_trial_whose_server_failed_under_it_is_measured_again_on_a_fresh_server(monkeypatch) -> None:
    clients = StandInClients()
    finished, calls = run_stand_in_group(monkeypatch, [], failing={1}, clients=clients)
    failed, retried = finished.records
    assert failed.status == Status.FAILED and failed.tags["retried"] == "true", "the failed attempt stays logged"
    assert retried.status == Status.OK and retried.tags["attempt"] == "2"
    assert "is not healthy" in retried.tags["earlier_failure"] and retried.key == failed.key
    assert calls["start"] == 2 and clients.restarts == 1, "a fresh server and fresh clients for the retry"


def test_retries_are_bounded_and_zero_turns_them_off(monkeypatch) -> None:
    finished, calls = run_stand_in_group(monkeypatch, ["experiment.trial_retries=1"], failing={1, 2, 3, 4, 5})
    assert [r.status for r in finished.records] == [Status.FAILED, Status.FAILED] and calls["measure"] == 2
    assert "retried" not in finished.records[-1].tags, "the last attempt is the trial's verdict"
    finished, calls = run_stand_in_group(monkeypatch, ["experiment.trial_retries=0"], failing={1})
    assert [r.status for r in finished.records] == [Status.FAILED] and calls["measure"] == 1

"""The Python-backend model (what the bundled Triton runs) outside Triton, with a stand-in for Triton's utils
module: the providers it asks ONNX Runtime for, and its refusal to serve on a provider it did not ask for."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from serving.triton.repository import PYTHON_MODEL_FILE
from tests.helpers import fake_triton_utils


@pytest.fixture
def model_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_triton_utils())
    spec = importlib.util.spec_from_file_location("tierbench_python_backend_model", PYTHON_MODEL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def doubling_onnx(tmp_path: Path) -> Path:
    """y = 2x over a dynamic batch: the smallest real model with the project's tensor names."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    graph = helper.make_graph([helper.make_node("Mul", ["input", "two"], ["logits"])], "double", [x], [y], [two])
    path = tmp_path / "double.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _args(onnx_path: Path, providers: list[str], options: dict | None = None, device: str = "0",
          buckets: list[int] | None = None) -> dict:
    config = {"input": [{"name": "input"}], "output": [{"name": "logits"}], "parameters": {
        "onnx_path": {"string_value": str(onnx_path)},
        "ort_providers": {"string_value": json.dumps(providers)},
        "ort_provider_options": {"string_value": json.dumps(options or {})},
        "ort_threads": {"string_value": "1"}}}
    if buckets is not None:
        config["parameters"]["batch_buckets"] = {"string_value": json.dumps(buckets)}
    return {"model_config": json.dumps(config), "model_instance_device_id": device, "model_name": "double",
            "model_version": "1", "model_instance_name": "double_0_0"}


def test_cpu_provider_serves_the_onnx_model(model_module: types.ModuleType, doubling_onnx: Path) -> None:
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"]))
    (response,) = model.execute([{"input": np.ones((2, 3), dtype=np.float32)}])
    np.testing.assert_array_equal(response.output_tensors[0].as_numpy(), np.full((2, 3), 2.0, dtype=np.float32))


def test_gpu_providers_run_on_the_instance_device(model_module: types.ModuleType) -> None:
    providers = model_module.session_providers(
        ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
        {"TensorrtExecutionProvider": {"trt_fp16_enable": True}}, device_id=3)
    assert providers == [("TensorrtExecutionProvider", {"trt_fp16_enable": True, "device_id": 3}),
                         ("CUDAExecutionProvider", {"device_id": 3}), "CPUExecutionProvider"]


@pytest.mark.filterwarnings("ignore:Specified provider")
@pytest.mark.skipif("TensorrtExecutionProvider" in ort.get_available_providers(),
                    reason="onnxruntime-gpu here has the TensorRT provider: no fallback to provoke")
def test_a_provider_onnxruntime_cannot_use_fails_the_load_instead_of_falling_back(
        model_module: types.ModuleType, doubling_onnx: Path) -> None:
    model = model_module.TritonPythonModel()
    names = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(RuntimeError, match="could not use TensorrtExecutionProvider"):
        model.initialize(_args(doubling_onnx, names, {"TensorrtExecutionProvider": {"trt_fp16_enable": True}}))


def test_buckets_run_each_batch_padded_by_its_own_session(model_module: types.ModuleType, doubling_onnx: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of 3 runs as 4 rows on the bucket-4 session and answers its 3; merged requests are split back."""
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"], buckets=[4, 2]))
    assert sorted(model.sessions) == [2, 4] and model.sessions[2] is not model.sessions[4]
    shapes: list[tuple[int, tuple[int, ...]]] = []
    for size, session in model.sessions.items():
        run = session.run
        monkeypatch.setattr(session, "run", lambda out, feeds, run=run, size=size: (
            shapes.append((size, feeds["input"].shape)), run(out, feeds))[1], raising=False)
    first = np.arange(6, dtype=np.float32).reshape(2, 3)
    second = np.full((1, 3), 5.0, dtype=np.float32)
    responses = model.execute([{"input": first}, {"input": second}])
    assert shapes == [(4, (4, 3))], "3 rows padded up to the bucket of 4, on its session"
    np.testing.assert_array_equal(responses[0].output_tensors[0].as_numpy(), first * 2)
    np.testing.assert_array_equal(responses[1].output_tensors[0].as_numpy(), second * 2)
    (exact,) = model.execute([{"input": first}])
    assert shapes[-1] == (2, (2, 3)) and exact.output_tensors[0].as_numpy().shape == (2, 3)


def test_without_buckets_merged_requests_run_as_one_batch_and_split_back(model_module: types.ModuleType,
                                                                        doubling_onnx: Path) -> None:
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"]))
    first, second = np.ones((2, 3), dtype=np.float32), np.full((3, 3), 4.0, dtype=np.float32)
    one, two = model.execute([{"input": first}, {"input": second}])
    np.testing.assert_array_equal(one.output_tensors[0].as_numpy(), first * 2)
    np.testing.assert_array_equal(two.output_tensors[0].as_numpy(), second * 2)


def test_each_execute_counts_its_parts_per_request_where_the_host_reads_them(
        model_module: types.ModuleType, doubling_onnx: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A pass of 2 requests counts 2 requests and each part's time twice (Triton counts its own durations per
    request); the totals reach the file at most every FLUSH_EVERY_S, all parts together, and the host's reader sums
    them for the model."""
    from serving.triton import backend_counters

    assert model_module.COUNTERS_ENV == backend_counters.ENV  # the two ends of one protocol
    monkeypatch.setenv(backend_counters.ENV, str(tmp_path))
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"]))
    assert backend_counters.read(tmp_path, "double")[backend_counters.REQUESTS] == 0  # there from the start
    two = [{"input": np.ones((2, 3), dtype=np.float32)}, {"input": np.ones((1, 3), dtype=np.float32)}]
    model.times.flushed = 0.0  # the last write long ago: this pass is written at once
    model.execute(two)
    read = backend_counters.read(tmp_path, "double")
    assert read[backend_counters.REQUESTS] == 2 and all(read[c] > 0 for c in backend_counters.BREAKDOWN.values())
    monkeypatch.setattr(model_module, "FLUSH_EVERY_S", 3600.0)
    model.execute(two)
    assert backend_counters.read(tmp_path, "double") == read  # summed here, not written yet
    monkeypatch.setattr(model_module, "FLUSH_EVERY_S", 0.0)
    model.execute(two[:1])
    assert backend_counters.read(tmp_path, "double")[backend_counters.REQUESTS] == 5
    assert backend_counters.read(tmp_path, "another_model") == {}


def test_without_the_folder_nothing_is_written_and_a_failed_write_stops_the_counting_never_the_requests(
        model_module: types.ModuleType, doubling_onnx: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from serving.triton import backend_counters

    monkeypatch.delenv(backend_counters.ENV, raising=False)
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"]))
    assert model.times.path is None
    monkeypatch.setenv(backend_counters.ENV, str(tmp_path / "gone"))  # a folder that is not there
    model = model_module.TritonPythonModel()
    model.initialize(_args(doubling_onnx, ["CPUExecutionProvider"]))
    assert model.times.path is None  # its first write failed: counting stopped
    (response,) = model.execute([{"input": np.ones((1, 3), dtype=np.float32)}])
    np.testing.assert_array_equal(response.output_tensors[0].as_numpy(), np.full((1, 3), 2.0, dtype=np.float32))

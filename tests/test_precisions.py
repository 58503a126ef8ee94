"""The lower-precision files ONNX Runtime and TensorRT serve (serving/triton/quantize.py), built from a small convnet's
FP32 export without a server: FP16 keeps the requests' FP32 inputs and the logits within FP16's rounding; INT8 for
TensorRT has the zero points TensorRT's explicit INT8 requires; each file is built once and reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, numpy_helper

from serving.triton.quantize import fp16_onnx, int8_qdq
from serving.workloads.image.corpus import InputSource
from serving.workloads.image.preprocessing import decode_and_preprocess
from tests import labelled_task


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "colours.onnx"
    torch.manual_seed(0)
    torch.onnx.export(labelled_task.ColourNet().eval(), torch.randn(1, 3, labelled_task.SIZE, labelled_task.SIZE),
                      str(path), input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
    return path


def _logits(path: Path, batch: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": batch})[0]


def _batch(count: int = 16) -> np.ndarray:
    images, _ = labelled_task.dataset(count, seed=5)
    return decode_and_preprocess(images, labelled_task.PREPROCESSING)


def test_fp16_computes_in_half_precision_behind_fp32_inputs_and_outputs(export: Path) -> None:
    converted = fp16_onnx(export)
    model = onnx.load(str(converted))
    assert {i.type.tensor_type.elem_type for i in [*model.graph.input, *model.graph.output]} == {TensorProto.FLOAT}
    weights = [numpy_helper.to_array(w) for w in model.graph.initializer if w.dims]
    assert weights and all(w.dtype == np.float16 for w in weights if w.ndim > 1), "the weights are float16"
    batch = _batch()
    fp32, fp16 = _logits(export, batch), _logits(converted, batch)
    assert fp16.dtype == np.float32 and np.abs(fp16 - fp32).max() <= 1e-2 * max(1.0, np.abs(fp32).max())
    built = converted.stat().st_mtime_ns
    assert fp16_onnx(export) == converted and converted.stat().st_mtime_ns == built, "built once, then reused"


def _activation_zero_points(path: Path) -> list[int]:
    """The zero points of the QuantizeLinear nodes that quantise activations (weights are initializers)."""
    model = onnx.load(str(path))
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weights = set(initializers)
    points = []
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in weights and len(node.input) > 2:
            points += initializers[node.input[2]].ravel().tolist()
    return points


def test_int8_for_tensorrt_has_symmetric_activations_and_its_own_file(
        export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_CACHE", str(tmp_path / "cache"))
    folder, _, _ = labelled_task.labelled_folder(tmp_path / "images", count=8)
    source = InputSource(source=str(folder))
    onnxruntime_file = int8_qdq(export, "input", labelled_task.PREPROCESSING, source, images=8)
    tensorrt_file = int8_qdq(export, "input", labelled_task.PREPROCESSING, source, images=8, symmetric=True)
    assert onnxruntime_file != tensorrt_file, "an engine cache or a server never mixes them up"
    symmetric, asymmetric = _activation_zero_points(tensorrt_file), _activation_zero_points(onnxruntime_file)
    assert symmetric and set(symmetric) == {0}, "TensorRT's explicit INT8 takes a zero point of 0 only"
    assert any(point != 0 for point in asymmetric), "ReLU outputs use the whole signed range on ONNX Runtime"
    batch = _batch()
    top1 = _logits(export, batch).argmax(1)
    for path in (onnxruntime_file, tensorrt_file):
        assert (_logits(path, batch).argmax(1) == top1).mean() >= 0.75, path.name

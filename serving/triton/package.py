"""Triton serving the model's ONNX export through ONNX Runtime (CUDA or TensorRT execution provider), NVIDIA's own
server or the one bundled in nvidia-pytriton: its registry entry (serving/registry.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from serving.model_config import ModelConfig
from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.runtime import Engine
from serving.triton.facts import OnnxRuntimeFacts, TritonFacts
from serving.triton.inprocess import OnnxCaller
from serving.triton.settings import TritonSettings


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    ort, triton = node.facts(OnnxRuntimeFacts), node.facts(TritonFacts)
    loaded = ", ".join(ort.usable) or "none"
    ort_detail = f"sessions load: {loaded}" + "".join(f"; {p}" for p in ort.problems)
    if triton.native:
        server = DoctorRow("Triton", "native", f"{shutil.which('tritonserver')}, backends: "
                                               f"{', '.join(triton.backends) or 'none'}")
    elif triton.bundled:
        server = DoctorRow("Triton", "bundled", f"{triton.bundled} (Python backend running ONNX Runtime)")
    else:
        server = DoctorRow("Triton", "none", triton.bundled_problem or "no tritonserver on PATH")
    return [DoctorRow("ONNX Runtime", ort.version or "missing", ort_detail), server]


def exported(model: ModelConfig, onnx_path: Path, repository: Path) -> list[Path]:
    """The model's `config.pbtxt` beside its ONNX export (protobuf and tritonclient load only then)."""
    from serving.triton.repository import export_config

    return export_config(model, onnx_path, repository)


PACKAGE = BackendPackage(name="triton", settings=TritonSettings,
                         process_names=("tritonserver", "triton_python_backend_stub"),
                         facts=(OnnxRuntimeFacts, TritonFacts), doctor_rows=doctor_rows,
                         runtime_callers={Engine.ONNXRUNTIME: OnnxCaller}, exported=exported)

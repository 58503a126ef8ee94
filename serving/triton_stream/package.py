"""Triton streaming a language model's tokens (a decoupled Python-backend model running transformers), NVIDIA's own
server or the one bundled in nvidia-pytriton: its registry entry (serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.pytorch.facts import TorchFacts
from serving.triton_stream.facts import TransformersFacts
from serving.triton_stream.settings import TritonStreamSettings
from serving.tritonserver.facts import TritonFacts


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    transformers, triton = node.facts(TransformersFacts), node.facts(TritonFacts)
    if triton.native:
        server = "NVIDIA's tritonserver on PATH"
    elif triton.bundled:
        server = f"bundled: {triton.bundled}"
    else:
        server = triton.bundled_problem or "no tritonserver"
    return [DoctorRow("Triton streaming (transformers)", transformers.version or "missing",
                      f"{transformers.problem or 'decoupled Python-backend model'}; {server}")]


PACKAGE = BackendPackage(name="triton_stream", settings=TritonStreamSettings,
                         process_names=("tritonserver", "triton_python_backend_stub"),
                         facts=(TritonFacts, TorchFacts, TransformersFacts), doctor_rows=doctor_rows,
                         extra="generative")

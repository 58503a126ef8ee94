"""transformers behind Ray Serve, answering the OpenAI API: its registry entry (serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.pytorch.facts import TorchFacts, torch_row
from serving.serve_transformers.settings import ServeTransformersSettings


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    return [torch_row(node)]


PACKAGE = BackendPackage(name="serve_transformers", settings=ServeTransformersSettings,
                         process_names=("ServeReplica", "ServeController"),  # Ray actors named after Serve's classes
                         facts=(TorchFacts,), doctor_rows=doctor_rows, extra="generative")

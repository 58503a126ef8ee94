"""The plain FastAPI + PyTorch service: its registry entry (serving/registry.py)."""

from __future__ import annotations

from serving.fastapi.facts import FastApiFacts
from serving.fastapi.settings import FastApiSettings
from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.pytorch.facts import TorchFacts, torch_row
from serving.pytorch.inprocess import TorchCaller
from serving.runtime import Engine


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    facts = node.facts(FastApiFacts)
    if facts.problem or not facts.fastapi:
        return [torch_row(node), DoctorRow("FastAPI", "missing", facts.problem or "not probed")]
    return [torch_row(node), DoctorRow("FastAPI", facts.fastapi, f"uvicorn {facts.uvicorn} ({facts.loop} loop, "
                                                                  f"{facts.http} parser)")]


PACKAGE = BackendPackage(name="fastapi", settings=FastApiSettings,
                         process_names=("serving.fastapi.app",),  # uvicorn serving the app module
                         facts=(TorchFacts, FastApiFacts), doctor_rows=doctor_rows,
                         runtime_callers={Engine.TORCH: TorchCaller})

"""PyTorch behind TorchServe (its Java frontend's REST and gRPC APIs, tierbench's handler in its Python workers): its
registry entry (serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.pytorch.facts import TorchFacts, torch_row
from serving.pytorch.inprocess import TorchCaller
from serving.runtime import Engine
from serving.torchserve.facts import TorchServeFacts
from serving.torchserve.settings import TorchServeSettings


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    facts = node.facts(TorchServeFacts)
    if facts.problem:
        server = DoctorRow("TorchServe", facts.version or "missing", facts.problem)
    else:
        server = DoctorRow("TorchServe", facts.version or "not probed",
                           f"Java {facts.java_version} ({facts.java_path}), torch-model-archiver "
                           f"{facts.archiver_version}")
    return [torch_row(node), server]


PACKAGE = BackendPackage(name="torchserve", settings=TorchServeSettings,
                         # its launcher, its Java frontend, its Python model workers
                         process_names=("ts.model_server", "org.pytorch.serve", "model_service_worker"),
                         facts=(TorchFacts, TorchServeFacts), doctor_rows=doctor_rows,
                         runtime_callers={Engine.TORCH: TorchCaller})

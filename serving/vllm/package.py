"""vLLM's own server (`vllm serve`): its registry entry (serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.vllm.settings import VllmSettings
from serving.vllm_facts import VllmFacts, vllm_row


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    return [vllm_row(node)]


PACKAGE = BackendPackage(name="vllm", settings=VllmSettings,
                         # its API server (`vllm serve ...`), its engine core and workers (VLLM::EngineCore,
                         # VLLM::Worker_TP<n>: vLLM names them with setproctitle)
                         process_names=("vllm serve", "VLLM::"),
                         facts=(VllmFacts,), doctor_rows=doctor_rows, extra="vllm")

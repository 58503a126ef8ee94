"""Ray Serve LLM (vLLM inside Serve replicas, behind Serve LLM's OpenAI-compatible ingress): its registry entry
(serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.serve_llm.settings import ServeLlmSettings
from serving.vllm_facts import VllmFacts, vllm_row


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    return [vllm_row(node)]


PACKAGE = BackendPackage(name="serve_llm", settings=ServeLlmSettings,
                         # Serve's replicas and controller (Ray actors named after Serve's classes), and the vLLM engine
                         # core and workers a replica starts (VLLM::EngineCore, VLLM::Worker_TP<n>)
                         process_names=("ServeReplica", "ServeController", "VLLM::"),
                         facts=(VllmFacts,), doctor_rows=doctor_rows, extra="vllm")

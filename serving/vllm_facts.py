"""vLLM on a node: whether this interpreter can import it (found, not imported: importing vLLM takes seconds and
initialises CUDA), its version and its `vllm` command. Both servers that run vLLM decide by these
(`NodeInfo.facts(VllmFacts)`), and by the node's NVIDIA GPU: vLLM's CPU build is not what a GPU tier prices, so a node
without one is skipped, saying so, never measured on its CPU."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from serving.node import NodeInfo
    from serving.package import DoctorRow

INSTALL = "pip install 'tierbench[vllm]' (docs/offline-nodes.md: the generative wheelhouse)"


def vllm_command() -> str | None:
    """The `vllm` command of this interpreter's environment (beside it), else on PATH; None when there is none."""
    beside = Path(sys.executable).parent / "vllm"
    return str(beside) if beside.is_file() else shutil.which("vllm")


@dataclass(frozen=True)
class VllmFacts:
    """The defaults mean: not probed (vLLM is then trusted to be there)."""

    KEY: ClassVar[str] = "vllm"

    version: str = ""
    command: str = ""  # the `vllm` command `vllm serve` runs as
    problem: str | None = None  # why vLLM cannot run here

    @classmethod
    def probe(cls) -> VllmFacts:
        if find_spec("vllm") is None:
            return cls(problem=f"vLLM is not installed ({INSTALL})")
        try:
            found = version("vllm")
        except PackageNotFoundError:
            found = ""
        command = vllm_command()
        if command is None:
            return cls(found, problem=f"vLLM {found} imports, but its `vllm` command is not beside "
                                      f"{sys.executable} nor on PATH (reinstall it: {INSTALL})")
        return cls(found, command)


def vllm_reason(node: NodeInfo, gpus_needed: int, what: str) -> str | None:
    """Why `what` (a vLLM server) cannot run on `node`: no vLLM, no NVIDIA GPU, fewer GPUs than one engine splits the
    model over. None when it can."""
    problem = node.facts(VllmFacts).problem
    if problem:
        return f"{what} cannot start on node {node.hostname}: {problem}"
    if not node.has_gpu:
        return (f"{what} needs an NVIDIA GPU and node {node.hostname} has none ({node.gpu_problem or node.gpu_name}): "
                "vLLM's CPU build is not what a GPU tier prices, so it is not measured here")
    if gpus_needed > len(node.gpu_names):
        return (f"{what} splits the model over tensor_parallel_size={gpus_needed} GPUs and node {node.hostname} has "
                f"{len(node.gpu_names)} ({', '.join(node.gpu_names)}): lower tensor_parallel_size, or measure a tier "
                "with more GPUs per node")
    return None


def vllm_row(node: NodeInfo) -> DoctorRow:
    """The doctor's row for vLLM, which both vLLM servers share."""
    from serving.package import DoctorRow

    facts = node.facts(VllmFacts)
    if facts.problem:
        return DoctorRow("vLLM", facts.version or "missing", facts.problem)
    return DoctorRow("vLLM", facts.version or "not probed", facts.command or "")

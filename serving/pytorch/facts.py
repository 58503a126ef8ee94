"""torch on a node: its version, the CUDA it was built for, and whether it sees the GPU (and if a CUDA build does not,
torch's own reason). Every backend that runs the model in PyTorch decides by these (`NodeInfo.facts(TorchFacts)`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from serving.node import NodeInfo
    from serving.package import DoctorRow


@dataclass(frozen=True)
class TorchFacts:
    """The defaults mean: torch was not probed (or is missing)."""

    KEY: ClassVar[str] = "torch"

    version: str = ""
    cuda_build: str | None = None  # torch.version.cuda: the CUDA torch was built for (None: a CPU build)
    cuda: bool = False  # torch sees a CUDA GPU
    problem: str | None = None  # why a CUDA build of torch does not see the GPU (torch's own warning)

    @classmethod
    def probe(cls) -> TorchFacts:
        try:
            import torch
        except ImportError as exc:
            return cls(problem=f"torch is not installed ({exc})")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sees_gpu = bool(torch.cuda.is_available())
        from serving.node import nvml_gpus

        problem = None
        if torch.version.cuda and not sees_gpu and nvml_gpus().names:  # a GPU it cannot use (none: nothing to explain)
            problem = (str(caught[-1].message).strip().splitlines()[0] if caught
                       else "torch.cuda.is_available() is False")
        return cls(torch.__version__, torch.version.cuda, sees_gpu, problem)

    @property
    def device(self) -> str:
        """Where a torch server on this node computes: cuda when torch sees a GPU, else cpu."""
        return "cuda" if self.cuda else "cpu"

    def describe(self, node: NodeInfo) -> str:
        """The doctor's detail: the build, and whether it sees the GPU (why not, on a GPU node)."""
        build = f"built for CUDA {self.cuda_build}" if self.cuda_build else "CPU-only build"
        sees = "sees the GPU" if self.cuda else "does not see a GPU"
        why = f": {self.problem}" if self.problem and node.has_gpu else ""
        return f"{build}; {sees}{why}"

    def gpu_tier_reason(self, node: NodeInfo, tier: str, what: str) -> str | None:
        """Why `what` (a torch server) would compute on the CPU of a node of GPU tier `tier`: a CPU build, or a CUDA
        build the driver cannot run. None when torch sees the GPU."""
        if self.cuda:
            return None
        build = f"built for CUDA {self.cuda_build}" if self.cuda_build else "a CPU-only build"
        why = f": {self.problem}" if self.problem else ""
        return (f"torch {self.version or '(unknown version)'} on node {node.hostname} ({build}) does not see its GPU "
                f"{node.gpu_name} (driver {node.driver_version}, CUDA {node.cuda_version}){why}; tier {tier} is a GPU "
                f"tier, so {what} would measure the CPU. Install a torch built for the driver's CUDA (or use the "
                "image's own torch)")


def torch_row(node: NodeInfo) -> DoctorRow:
    """The doctor's row for torch, which every PyTorch server shares."""
    from serving.package import DoctorRow

    torch = node.facts(TorchFacts)
    return DoctorRow("torch", torch.version or "missing", torch.describe(node))

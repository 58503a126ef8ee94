"""Settings of `serving.vllm.backend.VllmBackend` (entries of conf/backends/vllm.yaml): vLLM's engine settings
(`serving.vllm_engine`) and the share of the node's GPUs Ray gives the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.vllm_engine import VllmEngineSettings

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches
    from serving.workloads.generative.model import LanguageModelConfig


@dataclass
class VllmSettings(VllmEngineSettings):
    """`vllm serve` on the tier's node: one engine, its GPUs those Ray gives its host."""

    _target_: str = "serving.vllm.backend.VllmBackend"
    # The GPUs asked of Ray where it schedules them (Ray pins the server to them); null: tensor_parallel_size whole
    # GPUs. A share below 1 lets servers share a card: gpu_memory_utilization must then fit within it.
    num_gpus: float | None = None

    server_mode_hint: ClassVar[str] = "vllm"
    searchable: ClassVar[tuple[str, ...]] = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")

    @property
    def family(self) -> str:
        return "vllm"

    @property
    def gpu_share(self) -> float:
        """What the server asks of Ray: `num_gpus`, else one whole GPU per tensor-parallel rank."""
        return float(self.tensor_parallel_size if self.num_gpus is None else self.num_gpus)

    def gpu_ask(self) -> tuple[str, float] | None:
        return "num_gpus", self.gpu_share

    def check(self, name: str, model: LanguageModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        share = self.num_gpus
        if share is None:
            return problems
        if share < 0:
            problems.append(self.refuse(name, "num_gpus", "a share of a GPU >= 0 (0: ask Ray for none), or null for "
                                                          "tensor_parallel_size whole GPUs"))
        elif self.tensor_parallel_size != 1 and share != self.tensor_parallel_size:
            problems.append(self.refuse(name, "num_gpus", f"tensor_parallel_size={self.tensor_parallel_size} whole "
                                                          "GPUs (each rank takes one), or null"))
        elif 0 < share < 1 and self.gpu_memory_utilization > share:
            problems.append(self.refuse(name, "gpu_memory_utilization",
                                        f"at most num_gpus={share:g}: vLLM takes this share of the card's memory, and "
                                        "the servers sharing the card would not fit beside each other"))
        return problems

"""Settings of `serving.serve_llm.backend.ServeLlmBackend` (entries of conf/backends/serve_llm.yaml): vLLM's engine
settings (`serving.vllm_engine`, Serve LLM's `engine_kwargs`), how many replicas run (fixed, or autoscaled) and what
each engine rank asks of Ray."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.settings import is_positive_int
from serving.vllm_engine import VllmEngineSettings

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches
    from serving.workloads.generative.model import LanguageModelConfig


@dataclass
class ServeLlmSettings(VllmEngineSettings):
    """Serve LLM's `LLMConfig`: one vLLM engine per replica, its ranks in a placement group of their own."""

    _target_: str = "serving.serve_llm.backend.ServeLlmBackend"
    num_replicas: int = 1  # replicas, each a whole engine (autoscaling: false)
    autoscaling: bool = False  # Serve scales the replicas between min_replicas and max_replicas by load
    min_replicas: int = 1  # (autoscaling) never below: a replica started mid-window would be measured cold
    max_replicas: int = 1  # (autoscaling)
    target_ongoing_requests: float | None = None  # (autoscaling) requests per replica Serve aims at; null: Serve's
    max_ongoing_requests: int | None = None  # requests a replica takes at once before Serve queues; null: Serve LLM's
    num_gpus: float = 1.0  # each engine rank's share of a GPU (one rank per GPU with tensor_parallel_size > 1)
    accelerator_type: str | None = None  # e.g. H100: only nodes Ray labels with it (null: any GPU of the tier's node)

    server_mode_hint: ClassVar[str] = "serve_llm"
    searchable: ClassVar[tuple[str, ...]] = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                                             "num_replicas")
    switched_by: ClassVar[dict[str, str]] = {"min_replicas": "autoscaling", "max_replicas": "autoscaling",
                                             "target_ongoing_requests": "autoscaling"}

    @property
    def family(self) -> str:
        return "serve_llm"

    @property
    def most_replicas(self) -> int:
        return self.max_replicas if self.autoscaling else self.num_replicas

    def gpu_ask(self) -> tuple[str, float] | None:
        """Every rank of every replica the app may run (servers sharing a card must fit on it)."""
        return "num_gpus", float(self.num_gpus) * self.tensor_parallel_size * self.most_replicas

    def check(self, name: str, model: LanguageModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        for key in ("num_replicas", "min_replicas", "max_replicas"):
            if not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "a positive integer (a replica scaled to zero would start cold "
                                                       "inside a window)"))
        if self.max_ongoing_requests is not None and not is_positive_int(self.max_ongoing_requests):
            problems.append(self.refuse(name, "max_ongoing_requests", "a positive integer, or null"))
        if self.target_ongoing_requests is not None and self.target_ongoing_requests <= 0:
            problems.append(self.refuse(name, "target_ongoing_requests", "requests per replica > 0, or null"))
        problems += self.refuse_switched_off(name)
        if self.autoscaling:
            if self.num_replicas != 1:
                problems.append(self.refuse(name, "num_replicas", "left out with autoscaling: true (Serve scales "
                                                                  "between min_replicas and max_replicas)"))
            if is_positive_int(self.min_replicas) and is_positive_int(self.max_replicas) \
                    and self.min_replicas > self.max_replicas:
                problems.append(self.refuse(name, "min_replicas", f"at most max_replicas={self.max_replicas}"))
        if not 0 < self.num_gpus <= 1:
            problems.append(self.refuse(name, "num_gpus", "a share of one GPU in (0, 1] per engine rank: vLLM runs on "
                                                          "a GPU"))
        elif self.num_gpus < 1 and self.tensor_parallel_size != 1:
            problems.append(self.refuse(name, "num_gpus", f"1 with tensor_parallel_size={self.tensor_parallel_size}: "
                                                          "each rank takes a whole GPU"))
        elif self.num_gpus < 1 and self.gpu_memory_utilization > self.num_gpus:
            problems.append(self.refuse(name, "gpu_memory_utilization",
                                        f"at most num_gpus={self.num_gpus:g}: vLLM takes this share of the card's "
                                        "memory, and the engines sharing the card would not fit beside each other"))
        return problems

"""Settings of `serving.serve_transformers.backend.ServeTransformersBackend` (entries of
conf/backends/serve_transformers.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from serving.generation.settings import LanguageServerSettings
from serving.settings import is_positive_int

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches

DTYPES = ("auto", "float32", "float16", "bfloat16")
BATCHERS = ("serve", "when_free")


@dataclass
class ServeTransformersSettings(LanguageServerSettings):
    """transformers' `generate` in Ray Serve replicas, answering the OpenAI API and streaming every token. With
    `max_batch_size` > 1, Serve's `@serve.batch` merges the requests that queue within `batch_wait_timeout_s` into
    one `generate` (static batching: a request arriving while a batch generates waits for the next one); with
    `batcher: when_free`, a generate takes every request that queued while the last one ran."""

    _target_: str = "serving.serve_transformers.backend.ServeTransformersBackend"
    num_replicas: int = 1
    max_batch_size: int = 8  # conversations one generate runs at once (1: each alone)
    batch_wait_timeout_s: float = 0.01  # how long a batch waits to fill after its first request
    # serve: Serve's @serve.batch, which closes a batch when its wait ends even while a generate runs | when_free: a
    # generate takes every conversation that queued while the last one ran (serving/serve_transformers/when_free.py)
    batcher: str = "serve"
    max_ongoing_requests: int = 64  # per replica, queued batches included
    dtype: str = "auto"  # auto (float32 on a CPU, bfloat16 on a GPU) | float32 | float16 | bfloat16
    torch_threads: int | None = None  # intra-op threads of each replica (null: torch's default)
    replica_num_cpus: float = 1.0  # asked of Ray per replica
    replica_num_gpus: float = 0.5  # asked of Ray per replica where it schedules GPUs

    server_mode_hint: ClassVar[str] = "serve_transformers"
    searchable: ClassVar[tuple[str, ...]] = ("max_batch_size", "batch_wait_timeout_s", "batcher", "num_replicas")

    @property
    def family(self) -> str:
        return "serve_transformers"

    def gpu_ask(self) -> tuple[str, float] | None:
        return "replica_num_gpus", float(self.replica_num_gpus) * self.num_replicas

    def check(self, name: str, model: Any, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        for key in ("num_replicas", "max_batch_size", "max_ongoing_requests"):
            if not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "an integer >= 1"))
        if not problems and self.max_ongoing_requests < self.max_batch_size:
            problems.append(self.refuse(name, "max_ongoing_requests", f"at least max_batch_size={self.max_batch_size}: "
                                                                      "a replica never holds a full batch otherwise"))
        if not (isinstance(self.batch_wait_timeout_s, int | float) and self.batch_wait_timeout_s >= 0):
            problems.append(self.refuse(name, "batch_wait_timeout_s", "seconds >= 0"))
        if self.batcher not in BATCHERS:
            problems.append(self.refuse(name, "batcher", f"one of {list(BATCHERS)}"))
        if self.dtype not in DTYPES:
            problems.append(self.refuse(name, "dtype", f"one of {list(DTYPES)}"))
        if self.torch_threads is not None and not is_positive_int(self.torch_threads):
            problems.append(self.refuse(name, "torch_threads", "an integer >= 1, or null for torch's default"))
        for key in ("replica_num_cpus", "replica_num_gpus"):
            if not (isinstance(getattr(self, key), int | float) and getattr(self, key) >= 0):
                problems.append(self.refuse(name, key, "a share >= 0"))
        return problems

"""Settings of `serving.triton_stream.backend.TritonStreamBackend` (entries of conf/backends/triton_stream.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from serving.generation.settings import LanguageServerSettings
from serving.settings import is_positive_int
from serving.tritonserver.installation import TRITON_SERVER_CHOICES

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches

DTYPES = ("auto", "float32", "float16", "bfloat16")
DEVICES = ("auto", "cuda", "cpu")


@dataclass
class TritonStreamSettings(LanguageServerSettings):
    """Triton running the model with transformers in a decoupled Python-backend model: one response per generated
    token, streamed by Triton's generate endpoint (`/v2/models/<model>/generate_stream`, server-sent events). Triton's
    dynamic batcher hands the requests that queue within `batch_wait_ms`, up to `max_batch_size`, to one generate
    (static batching: a request arriving while a batch generates waits for the next)."""

    _target_: str = "serving.triton_stream.backend.TritonStreamBackend"
    # Which Triton: auto (NVIDIA's `tritonserver` on PATH where the node has one, else the one bundled in
    # nvidia-pytriton) | native | bundled. Both run the model with the node's torch and transformers
    server: str = "auto"
    instances: int = 1  # model instances (each its own Python process holding a copy of the model)
    max_batch_size: int = 8  # requests one generate runs together (1: each alone)
    batch_wait_ms: float = 10.0  # how long a batch's first request waits for others (max_batch_size > 1)
    dtype: str = "auto"  # auto (float32 on a CPU, bfloat16 on a GPU) | float32 | float16 | bfloat16
    device: str = "auto"  # auto (the GPU where the node has one) | cuda | cpu
    num_gpus: float = 0.5  # asked of Ray on nodes where it schedules GPUs (pins the server to one GPU)

    server_mode_hint: ClassVar[str] = "triton_stream"
    searchable: ClassVar[tuple[str, ...]] = ("max_batch_size", "batch_wait_ms", "instances")

    @property
    def family(self) -> str:
        return "triton_stream"

    def gpu_ask(self) -> tuple[str, float] | None:
        return None if self.device == "cpu" else ("num_gpus", float(self.num_gpus))

    def check(self, name: str, model: Any, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if self.server not in TRITON_SERVER_CHOICES:
            problems.append(self.refuse(name, "server", f"one of {list(map(str, TRITON_SERVER_CHOICES))} (auto: "
                                                        "NVIDIA's tritonserver where the node has it, else the "
                                                        "bundled one)"))
        for key in ("instances", "max_batch_size"):
            if not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "an integer >= 1"))
        if not (isinstance(self.batch_wait_ms, int | float) and not isinstance(self.batch_wait_ms, bool)
                and self.batch_wait_ms >= 0):
            problems.append(self.refuse(name, "batch_wait_ms", "milliseconds >= 0"))
        if self.dtype not in DTYPES:
            problems.append(self.refuse(name, "dtype", f"one of {list(DTYPES)}"))
        if self.device not in DEVICES:
            problems.append(self.refuse(name, "device", f"one of {list(DEVICES)} (auto: the GPU where the node has "
                                                        "one)"))
        if not (isinstance(self.num_gpus, int | float) and self.num_gpus >= 0):
            problems.append(self.refuse(name, "num_gpus", "a share of a GPU >= 0 (0: ask Ray for none)"))
        return problems

"""Settings of `serving.fastapi.backend.FastApiBackend` (entries `fastapi*` of conf/backends/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.pytorch.settings import TorchSettings
from serving.settings import is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches


@dataclass
class FastApiSettings(TorchSettings):
    """uvicorn + FastAPI + PyTorch: worker processes (each with the model, like replicas); how the model runs is the
    base's. No server-side batching: a plain service runs each request's batch as it comes."""

    _target_: str = "serving.fastapi.backend.FastApiBackend"
    workers: int = 1  # uvicorn worker processes, each loading the model (uvicorn --workers)
    num_gpus: float = 0.5  # asked of Ray on nodes where it schedules GPUs (pins the service to one GPU)

    server_mode_hint: ClassVar[str] = "fastapi"
    searchable: ClassVar[tuple[str, ...]] = ("workers", "torch_threads")

    @property
    def family(self) -> str:
        return "fastapi"

    def gpu_ask(self) -> tuple[str, float] | None:
        return "num_gpus", float(self.num_gpus)

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if not is_positive_int(self.workers):
            problems.append(self.refuse(name, "workers", "a positive integer (uvicorn worker processes)"))
        if self.num_gpus < 0:
            problems.append(self.refuse(name, "num_gpus", "a share of a GPU >= 0 (0: ask Ray for none)"))
        return problems

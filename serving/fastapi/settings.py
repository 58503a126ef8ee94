"""Settings of `serving.fastapi.backend.FastApiBackend` (entries `fastapi*` of conf/backends/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.pytorch.settings import TorchSettings
from serving.settings import OneGpuServerSettings, is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches


@dataclass
class FastApiSettings(TorchSettings, OneGpuServerSettings):
    """uvicorn + FastAPI + PyTorch: worker processes (each with the model, like replicas); how the model runs is the
    base's. No server-side batching: a plain service runs each request's batch as it comes."""

    _target_: str = "serving.fastapi.backend.FastApiBackend"
    workers: int = 1  # uvicorn worker processes, each loading the model (uvicorn --workers)

    server_mode_hint: ClassVar[str] = "fastapi"
    searchable: ClassVar[tuple[str, ...]] = ("workers", "torch_threads")

    @property
    def family(self) -> str:
        return "fastapi"

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if not is_positive_int(self.workers):
            problems.append(self.refuse(name, "workers", "a positive integer (uvicorn worker processes)"))
        return problems

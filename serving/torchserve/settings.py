"""Settings of `serving.torchserve.backend.TorchServeBackend` (entries `torchserve*` of conf/backends/): how TorchServe
takes requests (workers, its request batcher, queue, timeouts); how the model runs is the PyTorch base's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from serving.pytorch.settings import TorchSettings
from serving.settings import OneGpuServerSettings, is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches


@dataclass
class TorchServeSettings(TorchSettings, OneGpuServerSettings):
    """PyTorch in TorchServe's model workers, each a Python process holding the model."""

    _target_: str = "serving.torchserve.backend.TorchServeBackend"
    workers: int = 1  # model workers (minWorkers = maxWorkers): Python processes, each with its own copy of the model
    # TorchServe's batchSize: REQUESTS (not images) the frontend merges into one handler call; the handler runs one
    # forward pass over all their images. 1: no server-side batching.
    batch_size: int = 1
    # maxBatchDelay: how long a batch waits for more requests (ms). TorchServe stores 0 as unset, i.e. 100 ms.
    max_batch_delay_ms: int = 5
    job_queue_size: int = 100  # requests queued per model before TorchServe answers 503
    response_timeout_s: int = 120  # a worker that answers no request for this long is restarted

    server_mode_hint: ClassVar[str] = "torchserve"
    searchable: ClassVar[tuple[str, ...]] = ("workers", "batch_size", "max_batch_delay_ms", "job_queue_size",
                                             "torch_threads")

    @property
    def family(self) -> str:
        """Its own family, not `pytorch` (Ray Serve's): the server in front of the same model is what differs."""
        return "torchserve"

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        for key in ("workers", "batch_size", "job_queue_size", "response_timeout_s"):
            if not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "a positive integer"))
        delay = self.max_batch_delay_ms
        if delay == 0:
            problems.append(self.refuse(name, "max_batch_delay_ms", "TorchServe stores maxBatchDelay 0 as unset and "
                                                                    "waits its default 100 ms; use 1 or more"))
        elif not is_positive_int(delay):
            problems.append(self.refuse(name, "max_batch_delay_ms", "a whole number of milliseconds >= 1"))
        return problems

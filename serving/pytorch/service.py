"""The model answering image requests in PyTorch, whichever server carries them (the Ray Serve replica, the FastAPI
service): requests decoded (Open Inference Protocol tensors, JPEG files, base64 JPEGs in JSON), JPEGs preprocessed
with the one definition every JPEG path shares (`serving.workloads.image.preprocessing`), the model run, and the
server's own time reported.

Inference runs on one worker thread, like one Triton model instance; decoding runs beside it on the default executor.
A server-side batcher (Ray Serve's `@serve.batch`, or `WhenFreeBatcher`) is plugged in as `batcher`: it merges
concurrent requests and calls `forward` once for all of them, counting images (not requests) as Triton's dynamic
batcher does.

Server-Timing (`timing`): the service's own time per request (ms): its preprocessing, its wait for its forward pass
(`queue`: in the batcher, then for the inference thread, as a Triton request waits in its queue for an instance) and
that pass (`infer`); and the images of the pass it rode in (`batch;desc=N`: more than its own when a batcher merged
it with others).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from serving.oip import protocol as oip


class Pass(NamedTuple):
    """A request's rows of a forward pass, the images that pass ran and when the inference thread started it
    (`time.perf_counter`): what its Server-Timing splits into queue and inference."""

    logits: np.ndarray
    images: int
    started: float


# Merges a request's batch with others' and returns its part of the forward pass.
Batcher = Callable[[np.ndarray], Awaitable[Pass]]


class ImageService:
    def __init__(self, model: dict[str, Any], device: str = "cpu", torch_threads: int | None = None,
                 options: dict[str, Any] | None = None, warmup_batch_sizes: tuple[int, ...] = (),
                 server_name: str = oip.SERVER_NAME, server_version: str = "") -> None:
        import torch

        from serving.model_config import ModelConfig
        from serving.models import preprocessing
        from serving.pytorch.runner import TorchOptions, TorchRunner

        # Ray sets OMP_NUM_THREADS=1 in workers with fractional CPUs; a server owns the node's cores like a Triton
        # instance does, unless torch_threads says otherwise.
        torch.set_num_threads(torch_threads or os.cpu_count() or 1)
        self.model_cfg = ModelConfig.from_dict(model)
        self.runner = TorchRunner(self.model_cfg, device, TorchOptions(**(options or {})))
        self.input_shape = tuple(self.model_cfg.input_shape)
        self.preprocessing = preprocessing(self.model_cfg)  # the model's own (model.preprocess)
        # The OIP models by name: `<model>` (tensor input) and `<model>_jpeg`
        self.oip = oip.OipModels(oip.model_signatures(self.model_cfg).values(), server_name, server_version)
        self._infer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infer")
        # Compiled and warmed up for every measured batch size, on the serving thread, before the server is ready.
        self._infer_thread.submit(self.runner.warm_up, tuple(warmup_batch_sizes)).result()
        self.batcher: Batcher | None = None
        self.max_batch_size = 0  # the batcher's, in images

    async def forward(self, batch: np.ndarray) -> Pass:
        """One forward pass on the inference thread."""
        return await asyncio.get_running_loop().run_in_executor(self._infer_thread, self._infer, batch)

    def _infer(self, batch: np.ndarray) -> Pass:
        started = time.perf_counter()
        return Pass(self.runner.infer(batch), len(batch), started)

    async def logits(self, batch: np.ndarray) -> Pass:
        """The request's logits, the images of the forward pass that computed them and when it started."""
        # A request already larger than a server batch runs alone, as Triton runs an oversized request.
        if self.batcher is not None and len(batch) <= self.max_batch_size:
            return await self.batcher(batch)
        return await self.forward(batch)

    async def preprocessed(self, jpegs: list[bytes]) -> np.ndarray:
        from serving.workloads.image.preprocessing import decode_and_preprocess

        return await asyncio.get_running_loop().run_in_executor(None, decode_and_preprocess, jpegs,
                                                                self.preprocessing)

    async def images(self, jpegs: list[bytes]) -> tuple[np.ndarray, str]:
        """Encoded images' logits, and the Server-Timing."""
        started = time.perf_counter()
        batch = await self.preprocessed(jpegs)
        preprocessed = time.perf_counter()
        ran = await self.logits(batch)
        return ran.logits, timing(started, preprocessed, time.perf_counter(), ran.images, ran.started)

    async def tensor(self, batch: np.ndarray) -> tuple[np.ndarray, str]:
        """A float32 batch's logits, and the Server-Timing."""
        started = time.perf_counter()
        ran = await self.logits(batch)
        return ran.logits, timing(started, started, time.perf_counter(), ran.images, ran.started)

    async def oip_infer(self, model: oip.ModelSignature, request: oip.InferRequest) -> tuple[np.ndarray, str]:
        """An OIP request's logits and its Server-Timing; OipError for a request the protocol refuses."""
        batch = model.batch(request)
        if model.datatype != oip.BYTES:
            return await self.tensor(batch)
        try:
            return await self.images(batch)
        except (OSError, ValueError) as exc:  # PIL: UnidentifiedImageError is an OSError
            raise oip.OipError(f"input '{model.input_name}': cannot decode an image: {exc}") from None


def timing(started: float, preprocessed: float, done: float, executed: int, computing: float | None = None) -> str:
    """Server-Timing: the service's own time (ms) and the images of the forward pass the request rode in; with
    `computing` (when that pass started), the wait before it (`queue`) apart from the pass (`infer`)."""
    waited = "" if computing is None else f"queue;dur={(computing - preprocessed) * 1e3:.3f}, "
    return (f"preprocess;dur={(preprocessed - started) * 1e3:.3f}, {waited}"
            f"infer;dur={(done - (preprocessed if computing is None else computing)) * 1e3:.3f}, "
            f"batch;desc={executed}")

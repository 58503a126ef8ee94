"""Ray Serve deployment: an image classifier in PyTorch behind Serve's HTTP and gRPC ingresses.

Accepts a batch of JPEGs (decoded and preprocessed in the replica with `serving.images`, the definition every
JPEG path shares) or a raw float32 tensor; a batch of n images is one request. Replies with float32 logits.
HTTP: `__call__` (wire format in serving/clients/ray_serve_http.py); gRPC: `Classify` (the proxy calls the
method named like the RPC, serving/ray_serve/proto/classifier.proto).
Inference runs on one worker thread, like one Triton model instance; decoding runs beside it. With
`batching`, Serve's `@serve.batch` merges concurrent requests into one forward pass, counting images (not
requests) against `max_batch_size` as Triton's dynamic batcher does.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from serving.clients.ray_serve_http import JPEG_CONTENT_TYPE, LENGTHS_HEADER, TENSOR_CONTENT_TYPE, TIMING_HEADER


def split_jpegs(body: bytes, lengths_header: str) -> list[bytes]:
    lengths = [int(n) for n in lengths_header.split(",") if n]
    if sum(lengths) != len(body):
        raise ValueError(f"{LENGTHS_HEADER} sums to {sum(lengths)} bytes but the body has {len(body)}")
    offsets = np.cumsum([0, *lengths])
    return [body[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def images_in(batches: list[np.ndarray]) -> int:
    """`@serve.batch`'s batch size: images, summed over the queued requests."""
    return sum(len(batch) for batch in batches)


@serve.deployment
class TorchImageClassifier:
    def __init__(self, model: dict[str, Any], device: str = "cpu", torch_threads: int | None = None,
                 options: dict[str, Any] | None = None, warmup_batch_sizes: tuple[int, ...] = (),
                 batching: dict[str, Any] | None = None) -> None:
        import torch
        from omegaconf import OmegaConf

        from serving.models import preprocessing
        from serving.ray_serve.torch_runner import TorchOptions, TorchRunner

        # Ray sets OMP_NUM_THREADS=1 in workers with fractional CPUs; a replica owns the node's cores like a
        # Triton instance does, unless torch_threads says otherwise.
        torch.set_num_threads(torch_threads or os.cpu_count() or 1)
        self.model_cfg = OmegaConf.create(model)
        self.runner = TorchRunner(self.model_cfg, device, TorchOptions(**(options or {})))
        self.input_shape = tuple(self.model_cfg.input_shape)
        self.preprocessing = preprocessing(self.model_cfg)  # the model's own (model.preprocess)
        self._infer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infer")
        # Compiled and warmed up for every measured batch size, on the serving thread, before the replica is ready.
        self._infer_thread.submit(self.runner.warm_up, tuple(warmup_batch_sizes)).result()
        self.max_batch_size = 0
        self._batched = None
        if batching:
            self.max_batch_size = int(batching["max_batch_size"])
            self._batched = serve.batch(max_batch_size=self.max_batch_size,
                                        batch_wait_timeout_s=float(batching["batch_wait_timeout_s"]),
                                        batch_size_fn=images_in)(self._infer_many)

    def info(self) -> dict[str, Any]:
        """How this replica runs (device, dtype, compile) and what its warm-up cost; where it runs."""
        import ray

        context = ray.get_runtime_context()
        gpu_ids = [int(i) for i in context.get_accelerator_ids().get("GPU", [])]
        return {**self.runner.info, "node_id": context.get_node_id(), "gpu_ids": gpu_ids}

    def where(self) -> dict[str, str]:
        """The Ray node and host this replica runs on (recorded with every trial)."""
        from serving.node import current_location

        return current_location()

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        return self.runner.infer(batch)

    async def _infer_many(self, batches: list[np.ndarray]) -> list[tuple[np.ndarray, int]]:
        """One forward pass for the requests `@serve.batch` queued together; each gets its rows back, and the
        number of images that pass ran (what Triton's statistics call an execution's batch)."""
        merged = batches[0] if len(batches) == 1 else np.concatenate(batches)
        logits = await asyncio.get_running_loop().run_in_executor(self._infer_thread, self._infer, merged)
        return [(part, len(merged)) for part in np.split(logits, np.cumsum([len(b) for b in batches])[:-1])]

    async def _logits(self, batch: np.ndarray) -> tuple[np.ndarray, int]:
        """The request's logits and the images of the forward pass that computed them."""
        # A request already larger than a server batch runs alone, as Triton runs an oversized request.
        if self._batched is not None and len(batch) <= self.max_batch_size:
            return await self._batched(batch)
        logits = await asyncio.get_running_loop().run_in_executor(self._infer_thread, self._infer, batch)
        return logits, len(batch)

    async def _preprocessed(self, jpegs: list[bytes]) -> np.ndarray:
        from serving.images import decode_and_preprocess

        return await asyncio.get_running_loop().run_in_executor(None, decode_and_preprocess, jpegs,
                                                                self.preprocessing)

    async def __call__(self, request: Request) -> Response:
        body = await request.body()
        content_type = request.headers.get("content-type", "")
        started = time.perf_counter()
        try:
            if content_type.startswith(JPEG_CONTENT_TYPE):
                batch = await self._preprocessed(split_jpegs(body, request.headers.get(LENGTHS_HEADER, "")))
            elif content_type.startswith(TENSOR_CONTENT_TYPE):
                batch = np.frombuffer(body, dtype=np.float32).reshape(-1, *self.input_shape)
            else:
                return Response(f"unsupported Content-Type {content_type!r}: send {JPEG_CONTENT_TYPE} "
                                f"(with {LENGTHS_HEADER}) or {TENSOR_CONTENT_TYPE}", status_code=415)
        except ValueError as exc:
            return Response(f"bad request body: {exc}", status_code=400)
        preprocessed = time.perf_counter()
        logits, executed = await self._logits(batch)
        timing = _timing(started, preprocessed, time.perf_counter(), executed)
        return Response(logits.tobytes(), media_type=TENSOR_CONTENT_TYPE, headers={TIMING_HEADER: timing})

    async def Classify(self, request: Any) -> Any:  # noqa: N802 - named like the RPC, as Serve's proxy requires
        from serving.ray_serve.proto import classifier_pb2

        started = time.perf_counter()
        if request.jpegs:
            batch = await self._preprocessed(list(request.jpegs))
        else:
            shape = tuple(request.shape) or (-1, *self.input_shape)
            batch = np.frombuffer(request.tensor, dtype=np.float32).reshape(shape)
        preprocessed = time.perf_counter()
        logits, executed = await self._logits(batch)
        return classifier_pb2.ClassifyResponse(
            logits=logits.tobytes(), shape=list(logits.shape),
            server_timing=_timing(started, preprocessed, time.perf_counter(), executed))


def _timing(started: float, preprocessed: float, done: float, executed: int) -> str:
    """Server-Timing: the replica's own time (ms), and the images of the forward pass the request rode in."""
    return (f"preprocess;dur={(preprocessed - started) * 1e3:.3f}, infer;dur={(done - preprocessed) * 1e3:.3f}, "
            f"batch;desc={executed}")


APP_BUILDER = "serving.ray_serve.deployment:app_builder"


def app_builder(args: dict[str, Any]) -> Any:
    """The application a Serve config's `import_path` names (`APP_BUILDER`): the classifier built with `args` (the
    constructor's arguments, as `RayServeTorchBackend.deploy_files` writes them); the config's `deployments` entry
    sets replicas and resources."""
    return TorchImageClassifier.bind(**args)

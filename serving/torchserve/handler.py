"""tierbench's TorchServe handler: the model built from the config shipped in the .mar, warmed up for every measured
batch size before the worker reports ready, and every handler call (TorchServe's batch: up to batchSize REQUESTS,
each carrying one or more images) run as ONE forward pass over all its images, split back per request.

TorchServe loads this file in its own Python worker (`ts.model_loader`): it must define exactly one class and no
module-level `handle` (which would be taken as a function entry point). The worker runs the interpreter that
started TorchServe, with tierbench on its path, so everything else comes from `serving.*`.

Failures: a request the handler cannot read is answered 400 (over REST; TorchServe's gRPC drops per-request
statuses, so a gRPC client sees the JSON error as its prediction) and the rest of its batch is served. Anything
raised out of `handle` (the forward pass) fails every request of the batch: TorchServe answers them all 503
(`Prediction failed`; gRPC: UNAVAILABLE), or 507 when the message mentions CUDA.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from serving.clients.base import TIMING_HEADER
from serving.pytorch.service import timing
from serving.torchserve.config import HANDLER_CONFIG
from serving.torchserve.payloads import BadRequest, decode, encode, error_body
from serving.torchserve_metrics import FORWARD_PASSES, IMAGES_SERVED, REQUESTS_REJECTED, REQUESTS_SERVED
from serving.workloads.image.formats import InputFormat

BAD_REQUEST = 400


def worker_device(requested: str, gpu_id: Any) -> str:
    """cuda:<the GPU TorchServe gave this worker> when the handler is asked for CUDA and torch sees it, else cpu.
    TorchServe numbers the GPUs it sees (CUDA_VISIBLE_DEVICES: the one Ray gave) from 0, as torch does; no number
    (it found none itself): torch's current GPU."""
    import torch

    if requested != "cuda" or not torch.cuda.is_available():
        return "cpu"
    return "cuda" if gpu_id is None or int(gpu_id) < 0 else f"cuda:{int(gpu_id)}"


class TierbenchHandler:
    def __init__(self) -> None:
        self.runner: Any = None
        self.input_shape: tuple[int, ...] = ()
        self.preprocessing: Any = None

    def initialize(self, context: Any) -> None:
        """Build, warm up and report (device, dtype, warm-up seconds) before TorchServe marks the worker READY."""
        import torch

        from serving.model_config import ModelConfig
        from serving.models import preprocessing
        from serving.pytorch.runner import TorchOptions, TorchRunner

        properties = context.system_properties
        config = json.loads((Path(properties["model_dir"]) / HANDLER_CONFIG).read_text())
        # A worker owns the node's cores, as a Triton instance or a Serve replica does, unless torch_threads says.
        torch.set_num_threads(config["torch_threads"] or os.cpu_count() or 1)
        model_cfg = ModelConfig.from_dict(config["model"])
        device = worker_device(config["device"], properties.get("gpu_id"))
        self.runner = TorchRunner(model_cfg, device, TorchOptions(**config["options"]))
        self.input_shape = tuple(int(d) for d in model_cfg.input_shape)
        self.preprocessing = preprocessing(model_cfg)
        self.runner.warm_up(tuple(config["warmup_batch_sizes"]))  # on the thread that serves
        if config.get("report_dir"):
            report = {**self.runner.info, "pid": os.getpid(), "gpu_id": properties.get("gpu_id"),
                      "torch_threads": torch.get_num_threads()}
            Path(config["report_dir"], f"worker-{os.getpid()}.json").write_text(json.dumps(report))

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[bytes]:
        """One answer per request of the batch, in order; the Server-Timing: this call's decoding, its forward pass,
        and the images of that pass (`batch;desc=N`, more than the request's own when TorchServe merged requests)."""
        started = time.perf_counter()
        decoded: list[tuple[InputFormat, np.ndarray] | BadRequest] = []
        for request in data:
            try:
                decoded.append(decode(request, self.input_shape, self.preprocessing))
            except BadRequest as exc:
                decoded.append(exc)
        batches = [item[1] for item in decoded if not isinstance(item, BadRequest)]
        preprocessed = time.perf_counter()
        images = sum(len(batch) for batch in batches)
        outputs = self.runner.infer(batches[0] if len(batches) == 1 else np.concatenate(batches)) if batches else None
        server_timing = timing(started, preprocessed, time.perf_counter(), images)
        answers, offset = [], 0
        for index, item in enumerate(decoded):
            if isinstance(item, BadRequest):
                context.set_response_status(BAD_REQUEST, "Bad Request", idx=index)
                context.set_response_content_type(index, "application/json")
                answers.append(error_body(BAD_REQUEST, str(item)))
                continue
            kind, batch = item
            body, content_type = encode(outputs[offset:offset + len(batch)], kind)
            offset += len(batch)
            context.set_response_content_type(index, content_type)
            context.set_response_header(index, TIMING_HEADER, server_timing)
            answers.append(body)
        self._count(context.metrics, images, len(batches), len(decoded) - len(batches))
        return answers

    @staticmethod
    def _count(metrics: Any, images: int, served: int, rejected: int) -> None:
        """The handler's counters (declared in the metrics config, so they reach the metrics endpoint)."""
        if images:
            metrics.add_counter(IMAGES_SERVED, images, None, [])
            metrics.add_counter(FORWARD_PASSES, 1, None, [])
        if served:
            metrics.add_counter(REQUESTS_SERVED, served, None, [])
        if rejected:
            metrics.add_counter(REQUESTS_REJECTED, rejected, None, [])

"""PyTorch timed in-process (`serving.inprocess`): the runtime the PyTorch servers (Ray Serve, FastAPI, TorchServe)
run the model in, through the same `TorchRunner`, with no server around it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from serving.inprocess import ROUND_TRIP, RuntimeCaller

if TYPE_CHECKING:
    import numpy as np

    from serving.model_config import ModelConfig
    from serving.runtime import Runtime


class TorchCaller(RuntimeCaller):
    def __init__(self, model_cfg: ModelConfig, runtime: Runtime, engine_cache_dir: str | None = None) -> None:
        self.model_cfg, self.runtime = model_cfg, runtime  # PyTorch keeps no engine cache

    def setup(self) -> None:
        import torch

        from serving.pytorch.runner import TorchOptions, TorchRunner

        torch.set_num_threads(self.runtime.threads or os.cpu_count() or 1)
        options = TorchOptions(half=self.runtime.precision == "fp16", bf16=self.runtime.precision == "bf16",
                               compile=self.runtime.compile,
                               compile_mode=self.runtime.compile_mode, channels_last=self.runtime.channels_last)
        self.torch = torch
        self.runner = TorchRunner(self.model_cfg, self.runtime.device, options)

    def call(self, batch: np.ndarray, mode: str) -> Callable[[], Any]:
        torch, runner = self.torch, self.runner
        if mode == ROUND_TRIP:
            return lambda: runner.infer(batch)
        resident = runner.to_device(torch.from_numpy(batch))

        def run_resident() -> None:
            with torch.inference_mode():
                runner.model(resident)
            torch.cuda.synchronize(runner.device)

        return run_resident

    def versions(self) -> dict[str, str]:
        torch = self.torch
        out = {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda or "")}
        if self.runtime.on_gpu:
            out["cudnn"] = str(torch.backends.cudnn.version())
            out["device_name"] = torch.cuda.get_device_name(self.runner.device)
        return out

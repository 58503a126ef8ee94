"""The model as every PyTorch server runs it (Ray Serve's replica, the FastAPI service, TorchServe's workers): on its
device, in its precision, optionally compiled, and warmed up for every batch size the experiment measures before the
server reports ready.

Warm-up is where the one-off costs land (torch.compile's graph capture and code generation, cuDNN's
algorithm search with `cudnn.benchmark`, CUDA context and allocator growth), so none of them leak into a
measurement window. Their durations are kept in `info` and logged with the trial.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from serving.model_config import ModelConfig


@dataclass(frozen=True)
class TorchOptions:
    """How a PyTorch server runs the model (the `pytorch*`, `fastapi*` and `torchserve*` entries of conf/backends)."""

    half: bool = False  # float16 weights and inputs (CUDA only); logits come back as float32
    bf16: bool = False  # bfloat16 weights and inputs (CUDA, or a CPU: fast with AVX-512 BF16 or AMX); float32 logits
    compile: bool = False  # torch.compile the model
    compile_mode: str | None = None  # torch.compile mode: null (default), reduce-overhead, max-autotune
    compile_dynamic: bool | None = None  # torch.compile dynamic shapes: null lets torch decide
    compile_backend: str = "inductor"  # torch.compile backend (e.g. cudagraphs; eager only traces, for tests)
    cudnn_benchmark: bool = True  # let cuDNN pick the fastest convolution per input shape (CUDA only)
    channels_last: bool = False  # NHWC memory layout for weights and inputs (tensor-core convolutions on GPUs)

    def unsupported_reason(self, device: str) -> str | None:
        if self.half and device != "cuda":
            return ("half precision (fp16) in PyTorch needs a CUDA GPU: CPU kernels for float16 convolutions are slow "
                    "(docs/troubleshooting.md#skipped-no-gpu)")
        return None


class TorchRunner:
    """A model ready to serve: built, moved to its device, cast and (lazily) compiled; `warm_up` makes it ready."""

    def __init__(self, model_cfg: ModelConfig, device: str, options: TorchOptions) -> None:
        import torch

        from serving.models import build_model, model_file

        reason = options.unsupported_reason(device)
        if reason:
            raise ValueError(reason)
        self.options = options
        self.device = torch.device(device)
        self.dtype = torch.float16 if options.half else torch.bfloat16 if options.bf16 else torch.float32
        self.input_shape = tuple(model_cfg.input_shape)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = options.cudnn_benchmark
        model = build_model(model_cfg).to(self.device, dtype=self.dtype)
        self.memory_format = torch.channels_last if options.channels_last else torch.contiguous_format
        if options.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if options.compile:
            model = torch.compile(model, backend=options.compile_backend, mode=options.compile_mode,
                                  dynamic=options.compile_dynamic)
        self.model = model
        self.info: dict[str, Any] = {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                                     "torch_compile": options.compile, "channels_last": options.channels_last,
                                     "torch_version": torch.__version__, "model_file": model_file(model_cfg) or ""}
        if self.device.type == "cuda":
            self.info["cuda_device_name"] = torch.cuda.get_device_name(self.device)

    def to_device(self, batch: Any) -> Any:
        """A float32 NCHW tensor as the model takes it: on its device, in its precision and memory layout."""
        return batch.to(self.device, dtype=self.dtype).contiguous(memory_format=self.memory_format)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """float32 NCHW in, float32 logits out, whatever precision the model runs in."""
        import torch

        with torch.inference_mode():
            inputs = self.to_device(torch.from_numpy(batch))
            logits = self.model(inputs)
        return logits.float().cpu().numpy()

    def warm_up(self, batch_sizes: tuple[int, ...]) -> dict[str, float]:
        """Run every batch size twice; the first pass of each carries its compile / autotune cost.

        Call it from the thread that will serve (CUDA graphs recorded by torch.compile are per thread)."""
        started = time.perf_counter()
        first_s = {}
        for batch in sorted(set(batch_sizes)):
            zeros = np.zeros((batch, *self.input_shape), dtype=np.float32)
            t0 = time.perf_counter()
            self.infer(zeros)
            first_s[batch] = time.perf_counter() - t0
            self.infer(zeros)
        out = {"warmup_s": time.perf_counter() - started}
        if first_s:
            out["warmup_first_call_s"] = max(first_s.values())
        if self.options.compile:
            # Compilation happens inside the first call per shape (graph capture, codegen): its sum is the
            # compile cost, an upper bound that includes one inference each.
            out["torch_compile_s"] = sum(first_s.values())
        self.info.update(out)
        return out

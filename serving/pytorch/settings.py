"""The settings every PyTorch server shares: how the model runs (precision, torch.compile, cuDNN autotuning, torch's
threads). Ray Serve's, FastAPI's and TorchServe's settings extend them with how each server takes requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from serving.pytorch.runner import TorchOptions
from serving.runtime import Engine, Runtime
from serving.settings import BackendSettings, is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class TorchSettings(BackendSettings):
    """How the model runs in PyTorch, whichever server runs it."""

    torch_threads: int | None = None  # null: all the node's cores (Ray would otherwise leave torch 1 thread)
    half: bool = False  # float16 weights and inputs (CUDA only; skipped with the reason elsewhere)
    bf16: bool = False  # bfloat16 weights and inputs (GPU or CPU); its accuracy is held to experiment.accuracy
    compile: bool = False  # torch.compile, compiled during warm-up
    compile_mode: str | None = None  # null (default) | reduce-overhead | max-autotune | max-autotune-no-cudagraphs
    compile_dynamic: bool | None = None  # torch.compile dynamic shapes: null lets torch decide
    compile_backend: str = "inductor"  # torch.compile backend
    cudnn_benchmark: bool = True  # cuDNN picks the fastest kernels per batch size during warm-up (CUDA only)
    channels_last: bool = False  # NHWC memory layout: tensor-core convolutions on GPUs (same arithmetic)

    def torch_options(self) -> TorchOptions:
        return TorchOptions(half=self.half, bf16=self.bf16, compile=self.compile, compile_mode=self.compile_mode,
                            compile_dynamic=self.compile_dynamic, compile_backend=self.compile_backend,
                            cudnn_benchmark=self.cudnn_benchmark, channels_last=self.channels_last)

    def runtime(self, device: str) -> Runtime:
        """What computes the model in a server with these settings on a node where torch runs on `device`."""
        return Runtime(Engine.TORCH, device, self.precision, compile=self.compile,
                       compile_mode=self.compile_mode, channels_last=self.channels_last, threads=self.torch_threads)

    @property
    def precision(self) -> str:
        """fp16 | bf16 | fp32: what the model computes in (the cross-check's tolerance, the ceiling's runtime)."""
        return "fp16" if self.half else "bf16" if self.bf16 else "fp32"

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if self.half and self.bf16:
            problems.append(self.refuse(name, "bf16", "FP16 and BF16 are two precisions: set one of half and bf16"))
        if not (self.torch_threads is None or is_positive_int(self.torch_threads)):
            problems.append(self.refuse(name, "torch_threads", "a positive integer, or null (all the node's cores)"))
        if self.compile_mode is not None and self.compile_mode not in COMPILE_MODES:
            problems.append(self.refuse(name, "compile_mode", f"choose from {list(COMPILE_MODES)}, or null"))
        problems += self.refuse_unless(name, "compile", [k for k in ("compile_mode", "compile_dynamic")
                                                         if getattr(self, k) is not None])
        return problems

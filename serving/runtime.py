"""What computes a model inside a server: the runtime (PyTorch or ONNX Runtime), the device, the precision and the
few settings that change its speed (compile, memory layout, provider, threads). Every backend says which runtime its
server runs (`Backend.runtime`), so the GPU's own ceiling is measured for exactly that runtime
(`serving.inprocess`, `experiments.measure.ceiling`) and each served figure is set against it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Engine(StrEnum):
    TORCH = "torch"
    ONNXRUNTIME = "onnxruntime"


@dataclass(frozen=True)
class Runtime:
    """One runtime of the model as a server runs it; `key` names it in trial params and the ceiling's records."""

    engine: str  # Engine
    device: str  # cuda | cpu: where the model computes
    precision: str = "fp32"  # fp32 | fp16 | bf16 | int8
    provider: str | None = None  # onnxruntime: the execution provider asked first (its fallbacks follow)
    compile: bool = False  # torch: torch.compile
    compile_mode: str | None = None  # torch: torch.compile's mode (null: its default)
    channels_last: bool = False  # torch: NHWC memory layout (faster convolutions on tensor cores)
    threads: int | None = None  # intra-op threads (null: the runtime's default, all cores)

    @property
    def key(self) -> str:
        """`torch/cuda/fp16+channels_last`, `onnxruntime/CUDAExecutionProvider/fp32`: stable, one per runtime."""
        where = self.provider if self.engine == Engine.ONNXRUNTIME and self.provider else self.device
        extras = []
        if self.compile:
            extras.append(f"compile-{self.compile_mode}" if self.compile_mode else "compile")
        if self.channels_last:
            extras.append("channels_last")
        if self.threads:
            extras.append(f"threads-{self.threads}")
        return "+".join([f"{self.engine}/{where}/{self.precision}", *extras])

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Runtime:
        return Runtime(**data)

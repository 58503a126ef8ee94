"""What a node offers Triton: the ONNX Runtime providers that really load in a session, what its TensorRT provider
cannot load, and which Triton can serve (NVIDIA's own on PATH, or the one bundled in nvidia-pytriton). Probed on the
node itself (`serving.probe.describe_node`); the Triton backend decides by them (`NodeInfo.facts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from serving.tritonserver.facts import TritonFacts

__all__ = ["OnnxRuntimeFacts", "TritonFacts"]  # TritonFacts: shared by every backend running a Triton


@dataclass(frozen=True)
class OnnxRuntimeFacts:
    """The defaults mean: not probed (or onnxruntime missing)."""

    KEY: ClassVar[str] = "onnxruntime"

    version: str = ""
    providers: tuple[str, ...] = ()  # what onnxruntime lists as available
    # Providers a session really got (serving.triton.ort_probe); None: not probed, the listed ones are trusted.
    loaded: tuple[str, ...] | None = None
    problems: tuple[str, ...] = ()  # why a listed provider did not load (ONNX Runtime's own words)
    # Libraries ONNX Runtime's TensorRT provider cannot load here (checked when onnxruntime lists the provider)
    trt_missing_libs: tuple[str, ...] = ()

    @property
    def usable(self) -> tuple[str, ...]:
        """The providers a server can count on: those that loaded in a session when probed."""
        return self.providers if self.loaded is None else self.loaded

    @classmethod
    def probe(cls) -> OnnxRuntimeFacts:
        from serving.triton.accelerators import ort_tensorrt_missing_libs
        from serving.triton.ort_probe import probe_providers

        ort = probe_providers()
        providers = tuple(ort["available"])
        return cls(version=ort["version"], providers=providers, loaded=tuple(ort["loaded"]),
                   problems=tuple(f"{k}: {v}" for k, v in ort["errors"].items()),
                   trt_missing_libs=ort_tensorrt_missing_libs() if "TensorrtExecutionProvider" in providers else ())

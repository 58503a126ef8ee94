"""The `tritonserver` a node runs, two ways, built by one factory (`find_installation`, as Model Analyzer's
TritonServerFactory builds its local or Docker server):

- `NativeTriton`: NVIDIA's container, `tritonserver` on PATH with its native ONNX Runtime and TensorRT backends;
- `BundledTriton`: the server in the nvidia-pytriton wheel, running the same ONNX file through the Python backend
  with the node's onnxruntime (made runnable as `serving.tritonserver.installation` says).

Both start, stop and log the same way (`serving.tritonserver.server`, which every backend running a Triton shares);
they differ in where the binary is, how the classifier is served (what `render_repository` writes) and which runtime
builds TensorRT engines.
"""

from __future__ import annotations

import os
import re
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from serving.tritonserver.installation import (
    AUTO,
    NO_TRITON_DOCS,
    TritonBinary,
    TritonNotFoundError,
    TritonServerKind,
    bundled_binary,
    bundled_description,
    bundled_problem,
    bundled_stub,
    native_backends,
    native_binary,
)

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

    from serving.triton.repository import TritonVariant

__all__ = ["NO_TRITON_DOCS", "TritonNotFoundError", "native_backends"]  # re-exported: where the image backend's code
# and tests have always found them


@dataclass(frozen=True)
class TritonInstallation(TritonBinary, ABC):
    """A runnable `tritonserver` (`serving.tritonserver`): its binary, backends and environment, and what it serves
    the model with."""

    kind: ClassVar[TritonServerKind]
    server_mode: ClassVar[str]  # the trial param `server_mode`
    label: ClassVar[str]  # how runners.doctor names it
    # Whether it runs ONNX Runtime from the node's onnxruntime package (whose providers the node must have).
    uses_node_onnxruntime: ClassVar[bool]

    @classmethod
    @abstractmethod
    def unavailable_reason(cls, facts: Any, hostname: str, preference: str) -> str | None:
        """Why this server cannot serve the classifier on node `hostname`, whose `TritonFacts` (its own description)
        are `facts`, asked by the driver for the setting `server=preference`; None when it can."""

    @classmethod
    @abstractmethod
    def discover(cls) -> TritonInstallation:
        """This node's installation of this kind; TritonNotFoundError when it has none."""

    @classmethod
    @abstractmethod
    def runtime_tag(cls) -> str:
        """The ONNX Runtime + TensorRT build that serves, as far as this node can tell: TensorRT engines built by
        one never load in another (part of the engine cache key)."""

    @abstractmethod
    def serve_classifier(self, config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path,
                         version_dir: Path) -> None:
        """Make the classifier's `config` and version folder serve `onnx_path` the way this server runs it."""


@dataclass(frozen=True)
class NativeTriton(TritonInstallation):
    kind: ClassVar[TritonServerKind] = TritonServerKind.NATIVE
    server_mode: ClassVar[str] = "triton_native"
    label: ClassVar[str] = "native Triton"
    uses_node_onnxruntime: ClassVar[bool] = False

    @classmethod
    def unavailable_reason(cls, facts: Any, hostname: str, preference: str) -> str | None:
        if facts.backends and "onnxruntime" not in facts.backends:
            return (f"the tritonserver on node {hostname} has no onnxruntime backend (backends: "
                    f"{list(facts.backends)}); use NVIDIA's Triton container")
        return None

    @classmethod
    def discover(cls) -> NativeTriton:
        found = native_binary()
        return cls(found.binary, found.backend_directory, env=found.env)

    @classmethod
    def runtime_tag(cls) -> str:
        """NVIDIA's container names its Triton release, which pins both."""
        return f"native{os.environ.get('TRITON_SERVER_VERSION', '')}"

    def serve_classifier(self, config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path,
                         version_dir: Path) -> None:
        from serving.triton.repository import native_onnxruntime

        native_onnxruntime(config, variant)
        (version_dir / "model.onnx").symlink_to(onnx_path.resolve())


@dataclass(frozen=True)
class BundledTriton(TritonInstallation):
    kind: ClassVar[TritonServerKind] = TritonServerKind.BUNDLED
    server_mode: ClassVar[str] = "triton_python_backend"
    label: ClassVar[str] = "bundled Triton (Python backend)"
    uses_node_onnxruntime: ClassVar[bool] = True

    @classmethod
    def unavailable_reason(cls, facts: Any, hostname: str, preference: str) -> str | None:
        if preference == TritonServerKind.NATIVE:  # wanted the node's own, which it lacks
            return (f"server=native but node {hostname} has no tritonserver on PATH: run NVIDIA's Triton "
                    f"container there, or server=auto for the bundled server ({NO_TRITON_DOCS})")
        if facts.bundled_problem:
            return (f"no Triton on node {hostname}: no tritonserver on PATH, and {facts.bundled_problem} "
                    f"({NO_TRITON_DOCS})")
        return None

    @classmethod
    def stub(cls) -> tuple[Path, Path]:
        """nvidia-pytriton's folder and its Python-backend stub for the running Python (TritonNotFoundError if none)."""
        return bundled_stub()

    @classmethod
    def problem(cls) -> str | None:
        """Why the bundled server cannot run here; None when it can (checked without copying it)."""
        return bundled_problem()

    @classmethod
    def description(cls) -> str:
        """`nvidia-pytriton 0.7.0, Python-backend stub for 3.11`: what the bundled server is (assumes it exists)."""
        return bundled_description()

    @classmethod
    def discover(cls) -> BundledTriton:
        found = bundled_binary()
        return cls(found.binary, found.backend_directory, env=found.env)

    @classmethod
    def runtime_tag(cls) -> str:
        """The installed onnxruntime-gpu and TensorRT wheels."""
        ort = next((d.version for d in metadata.distributions() if (d.metadata["Name"] or "").lower().startswith(
            "onnxruntime")), "unknown")
        trt = next((d.version for d in metadata.distributions() if re.fullmatch(
            r"tensorrt[-_]cu\d+[-_]libs", (d.metadata["Name"] or "").lower())), "system")
        return f"ort{ort}-trt{trt}"

    def serve_classifier(self, config: mc.ModelConfig, variant: TritonVariant, onnx_path: Path,
                         version_dir: Path) -> None:
        from serving.triton.repository import PYTHON_MODEL_FILE, python_backend_onnxruntime

        python_backend_onnxruntime(config, variant, onnx_path)
        shutil.copy(PYTHON_MODEL_FILE, version_dir / "model.py")


INSTALLATIONS: dict[TritonServerKind, type[TritonInstallation]] = {
    TritonServerKind.NATIVE: NativeTriton, TritonServerKind.BUNDLED: BundledTriton}


def installation_kind(preference: str, native_on_path: bool) -> type[TritonInstallation]:
    """Which server a node runs for the setting `server` (auto | native | bundled): the native one where the
    node has it and it is wanted, else the bundled one. The driver asks it from the node's description."""
    native = native_on_path and preference in (AUTO, TritonServerKind.NATIVE)
    return INSTALLATIONS[TritonServerKind.NATIVE if native else TritonServerKind.BUNDLED]


def find_installation(preference: str = AUTO) -> TritonInstallation:
    """This node's installation for `preference` (the factory); TritonNotFoundError when it has none."""
    native_on_path = shutil.which("tritonserver") is not None
    if preference == TritonServerKind.NATIVE and not native_on_path:
        raise TritonNotFoundError("server=native but no `tritonserver` on PATH; use NVIDIA's Triton container or "
                                  "server=auto to fall back to the server bundled in nvidia-pytriton "
                                  f"({NO_TRITON_DOCS})")
    return installation_kind(preference, native_on_path).discover()


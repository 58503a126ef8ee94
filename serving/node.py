"""What a node really has: GPUs (NVML via nvidia-smi), CPU model, ONNX Runtime providers, a native Triton.

Runs on the node itself (inside a Ray task placed there); the result travels back to the driver.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeInfo:
    hostname: str
    ip: str
    ray_node_id: str
    cpu_model: str
    cpu_count: int
    gpu_names: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    ort_providers: tuple[str, ...] = ()
    native_triton: bool = False
    torch_cuda: bool = False
    ray_gpus: float = 0.0  # GPUs Ray schedules on this node (fractional `num_gpus` asks need them)
    # Libraries ONNX Runtime's TensorRT provider cannot load here (checked when onnxruntime lists the provider)
    trt_missing_libs: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_names)

    @property
    def gpu_name(self) -> str:
        """The GPU's name, or the CPU model when the node has no GPU."""
        return self.gpu_names[0] if self.gpu_names else f"CPU: {self.cpu_model}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_smi() -> tuple[tuple[str, ...], str | None, str | None]:
    """GPU names, driver version and CUDA version from nvidia-smi (NVML); empty without a GPU."""
    if not shutil.which("nvidia-smi"):
        return (), None, None
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return (), None, None
    gpus = tuple(line.split(",")[0].strip() for line in names if line.strip())
    driver = names[0].split(",")[1].strip() if names and "," in names[0] else None
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    return gpus, driver, cuda.group(1) if cuda else None


def ort_providers() -> tuple[str, ...]:
    try:
        import onnxruntime
    except ImportError:
        return ()
    return tuple(onnxruntime.get_available_providers())


def ray_node_gpus(node_id: str) -> float:
    """The `GPU` resource Ray gives this node (0 outside Ray or where Ray detected none)."""
    try:
        import ray

        if not node_id or not ray.is_initialized():
            return 0.0
        return float(next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id), 0.0))
    except Exception:  # noqa: BLE001 - a fact for scheduling, not worth failing a sweep over
        return 0.0


def current_location() -> dict[str, str]:
    """The Ray node and host the calling process runs on: what every actor's `where` reports."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname()}


def describe_node() -> NodeInfo:
    from serving.accelerators import ort_tensorrt_missing_libs

    gpus, driver, cuda = nvidia_smi()
    try:
        import ray

        node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:  # pragma: no cover
        node_id = ""
    try:
        import torch

        torch_cuda = bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        torch_cuda = False
    hostname = socket.gethostname()
    providers = ort_providers()
    trt_missing = ort_tensorrt_missing_libs() if "TensorrtExecutionProvider" in providers else ()
    try:
        import ray.util

        ip = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray
        ip = "127.0.0.1"
    return NodeInfo(
        hostname=hostname,
        ip=ip,
        ray_node_id=node_id,
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpu_names=gpus,
        driver_version=driver,
        cuda_version=cuda,
        ort_providers=providers,
        native_triton=shutil.which("tritonserver") is not None,
        torch_cuda=torch_cuda,
        ray_gpus=ray_node_gpus(node_id),
        trt_missing_libs=trt_missing,
    )

"""What a node really has: GPUs, driver and CUDA (NVML), the Python stack (Python, Ray, torch and the CUDA it was
built for), the ONNX Runtime providers that load in a session, and which Triton can serve (native or bundled).

`describe_node()` runs on the node itself (inside a Ray task placed there, or `python -m runners.doctor`); the
result travels back to the driver. Backends decide what they can run from it (`Backend.unsupported_reason`).
"""

from __future__ import annotations

import os
import platform
import socket
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInventory:
    """The NVIDIA GPUs NVML sees, with the driver and the newest CUDA it supports; `problem` says why none."""

    names: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class NodeInfo:
    hostname: str
    ip: str
    ray_node_id: str
    cpu_model: str
    cpu_count: int
    gpu_names: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None  # the newest CUDA the driver supports (NVML)
    ort_providers: tuple[str, ...] = ()  # what onnxruntime lists as available
    native_triton: bool = False
    torch_cuda: bool = False  # torch sees a CUDA GPU
    ray_gpus: float = 0.0  # GPUs Ray schedules on this node (fractional `num_gpus` asks need them)
    # Libraries ONNX Runtime's TensorRT provider cannot load here (checked when onnxruntime lists the provider)
    trt_missing_libs: tuple[str, ...] = ()
    # Providers a session really got (serving.ort_probe); None: not probed, the listed ones are trusted.
    ort_loaded: tuple[str, ...] | None = None
    ort_version: str = ""
    ort_problems: tuple[str, ...] = ()  # why a listed provider did not load (ONNX Runtime's own words)
    gpu_problem: str | None = None  # why NVML found no GPU
    python_version: str = ""
    ray_version: str = ""
    torch_version: str = ""
    torch_cuda_build: str | None = None  # torch.version.cuda: the CUDA torch was built for (None: a CPU build)
    torch_problem: str | None = None  # why a CUDA build of torch does not see the GPU (torch's own warning)
    triton_backends: tuple[str, ...] = ()  # backends of the native tritonserver (NVIDIA's container)
    bundled_triton: str = ""  # the server bundled in nvidia-pytriton, when it can run here
    bundled_triton_problem: str | None = None  # why it cannot (None: it can, or not probed)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_names)

    @property
    def gpu_name(self) -> str:
        """The GPU's name, or the CPU model when the node has no GPU."""
        return self.gpu_names[0] if self.gpu_names else f"CPU: {self.cpu_model}"

    @property
    def ort_usable(self) -> tuple[str, ...]:
        """The ONNX Runtime providers a server can count on: those that loaded in a session when probed."""
        return self.ort_providers if self.ort_loaded is None else self.ort_loaded


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_gpus() -> GpuInventory:
    """GPU names, driver version and the driver's CUDA version from NVML (nvidia-ml-py, module pynvml)."""
    try:
        import pynvml
    except ImportError:
        return GpuInventory(problem="nvidia-ml-py (module pynvml) is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuInventory(problem=f"NVML: {exc} (no NVIDIA driver here)")
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = tuple(_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count))
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12060
        return GpuInventory(names, driver, f"{cuda // 1000}.{cuda % 1000 // 10}",
                            None if names else "NVML finds no GPU")
    except pynvml.NVMLError as exc:
        return GpuInventory(problem=f"NVML: {exc}")
    finally:
        pynvml.nvmlShutdown()


def torch_facts() -> tuple[str, str | None, bool, str | None]:
    """torch's version, the CUDA it was built for, whether it sees a GPU and, if a CUDA build does not, why."""
    try:
        import torch
    except ImportError as exc:
        return "", None, False, f"torch is not installed ({exc})"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sees_gpu = bool(torch.cuda.is_available())
    problem = None
    if torch.version.cuda and not sees_gpu:
        problem = str(caught[-1].message).strip().splitlines()[0] if caught else "torch.cuda.is_available() is False"
    return torch.__version__, torch.version.cuda, sees_gpu, problem


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
    import ray

    from serving.accelerators import ort_tensorrt_missing_libs
    from serving.ort_probe import probe_providers
    from serving.triton.installation import BundledTriton, native_backends

    gpus = nvml_gpus()
    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    torch_version, torch_cuda_build, torch_cuda, torch_problem = torch_facts()
    ort = probe_providers()
    providers = tuple(ort["available"])
    trt_missing = ort_tensorrt_missing_libs() if "TensorrtExecutionProvider" in providers else ()
    try:
        import ray.util

        ip = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray
        ip = "127.0.0.1"
    native = native_backends()
    bundled = BundledTriton.problem()
    return NodeInfo(
        hostname=socket.gethostname(),
        ip=ip,
        ray_node_id=node_id,
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpu_names=gpus.names,
        driver_version=gpus.driver_version,
        cuda_version=gpus.cuda_version,
        gpu_problem=gpus.problem,
        ort_providers=providers,
        ort_loaded=tuple(ort["loaded"]),
        ort_version=ort["version"],
        ort_problems=tuple(f"{k}: {v}" for k, v in ort["errors"].items()),
        native_triton=native is not None,
        triton_backends=native or (),
        bundled_triton="" if bundled else BundledTriton.description(),
        bundled_triton_problem=bundled,
        torch_cuda=torch_cuda,
        torch_version=torch_version,
        torch_cuda_build=torch_cuda_build,
        torch_problem=torch_problem if gpus.names else None,
        python_version=platform.python_version(),
        ray_version=ray.__version__,
        ray_gpus=ray_node_gpus(node_id),
        trt_missing_libs=trt_missing,
    )

"""GPU-side facts shared by the servers: where TensorRT engines are cached on a node, whether a server start
built its engines or reused them, and which libraries ONNX Runtime's TensorRT provider cannot load there.

Without an engine cache every server start rebuilds the TensorRT engine during its first requests (the
study's 1,170 ms "GPU compute"); with it, the first start builds and later starts load the engine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from serving.paths import cache_root

ENGINE_SUFFIX = ".engine"
HIT, BUILT, NO_ENGINE = "hit", "built", "none"


def slug(text: str) -> str:
    """`NVIDIA GeForce RTX 4090` -> `nvidia-geforce-rtx-4090`: safe in paths and on every filesystem."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def engine_cache_key(runtime: str, precision: str, profile: tuple[int, int, int], fingerprint: str) -> str:
    """What an engine depends on beyond the GPU: the runtime that builds it (`TritonInstallation.runtime_tag`),
    precision (fp32 | fp16 | int8), batch profile and the model file served. TensorRT engines are not portable across
    any of these."""
    low, opt, high = profile
    return f"{runtime}-{precision}-b{low}-{opt}-{high}-{fingerprint}"


def engine_cache_dir(root: str | None, model: str, gpu_name: str, key: str) -> Path:
    """`<root>/<model>/<gpu-name-slug>/<key>/`; root defaults to `~/.cache/tierbench/trt` on the server's node."""
    base = Path(root).expanduser() if root else cache_root() / "trt"
    return base / slug(model) / slug(gpu_name) / key


def engine_files(directory: Path) -> dict[str, int]:
    """Engine files in `directory` with their modification times (ns): a snapshot to compare."""
    if not directory.is_dir():
        return {}
    return {p.name: p.stat().st_mtime_ns for p in directory.rglob(f"*{ENGINE_SUFFIX}")}


def cache_status(before: dict[str, int], after: dict[str, int]) -> str:
    """`hit` when the start found its engines and wrote none, `built` when it wrote some, `none` when no
    engine exists after the start (TensorRT was not engaged)."""
    if not after:
        return NO_ENGINE
    return HIT if after == before else BUILT


def tensorrt_library_dirs() -> list[str]:
    """Folders of TensorRT's pip wheels (`tensorrt_libs`, in site-packages), which are not on the loader's path
    by default; matched by the libraries they hold, whatever the CUDA suffix of the package."""
    found = {str(lib.parent) for entry in sys.path if entry and Path(entry).is_dir()
             for lib in Path(entry).glob("tensorrt*libs/libnvinfer.so.*")}
    return sorted(found)


def nvidia_library_dirs() -> list[str]:
    """`lib` folders of NVIDIA's pip wheels (CUDA runtime, cuBLAS, cuDNN: what torch installs)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(str(p) for root in spec.submodule_search_locations for p in Path(root).glob("**/lib") if p.is_dir())


def ort_tensorrt_provider() -> Path | None:
    """ONNX Runtime's TensorRT provider library, when the installed onnxruntime has one (onnxruntime-gpu)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "capi" / "libonnxruntime_providers_tensorrt.so"
    return path if path.exists() else None


def missing_libraries(library: Path, extra_dirs: list[str]) -> tuple[str, ...]:
    """Shared libraries `library` needs that the loader cannot find, with `extra_dirs` on its path (ldd)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([*extra_dirs, env.get("LD_LIBRARY_PATH", "")]).strip(":")
    try:
        out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=30, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted({line.split()[0] for line in out.splitlines() if "not found" in line}))


def ort_tensorrt_missing_libs() -> tuple[str, ...]:
    """What keeps ONNX Runtime's TensorRT provider from loading here (e.g. `libnvinfer.so.10`); empty when
    nothing is missing. ONNX Runtime lists the provider as available even when TensorRT itself is absent."""
    provider = ort_tensorrt_provider()
    if provider is None:
        return ("libonnxruntime_providers_tensorrt.so",)
    return missing_libraries(provider, tensorrt_library_dirs() + nvidia_library_dirs())


def gpu_extra(cuda_version: str | None) -> str:
    """The tierbench extra whose ONNX Runtime and TensorRT builds match a driver supporting `cuda_version`
    (NVML's figure: the newest CUDA the driver runs): `gpu-cu13` from CUDA 13, else `gpu-cu12`."""
    try:
        major = int(str(cuda_version).split(".")[0])
    except ValueError:
        major = 0
    return "gpu-cu13" if major >= 13 else "gpu-cu12"

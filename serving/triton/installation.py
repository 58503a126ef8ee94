"""Find a `tritonserver` to run: NVIDIA's (on PATH, native backends) or the one bundled in nvidia-pytriton.

The bundled binary cannot run in place: like pytriton (`pytriton/triton.py`), we copy it once to a cache
folder without the per-Python stubs, put the stub of the running Python into `backends/python/`, and run it
with `LD_LIBRARY_PATH` covering the wheel's libraries (the copy breaks the binary's RPATH) and the running
interpreter's `libpython` first (else the stub links the system's libpython3.11 against another stdlib).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


class TritonNotFoundError(RuntimeError):
    pass


@dataclass(frozen=True)
class TritonInstallation:
    kind: str  # "native" | "bundled"
    binary: Path
    backend_directory: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def server_mode(self) -> str:
        return "triton_native" if self.kind == "native" else "triton_python_backend"


def find_installation(preference: str = "auto") -> TritonInstallation:
    """`preference`: auto (native when on PATH, else bundled) | native | bundled."""
    native = shutil.which("tritonserver")
    if preference in ("auto", "native") and native:
        binary = Path(native).resolve()
        backends = Path(os.environ.get("TRITON_BACKEND_DIRECTORY", binary.parent.parent / "backends"))
        return TritonInstallation("native", binary, backends, env=dict(os.environ))
    if preference == "native":
        raise TritonNotFoundError(
            "serving.triton_server=native but no `tritonserver` on PATH; use NVIDIA's Triton container "
            "or serving.triton_server=auto to fall back to the server bundled in nvidia-pytriton"
        )
    return bundled_installation()


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tierbench"


def native_backends(preference: str = "auto") -> tuple[str, ...] | None:
    """The backends of the node's own `tritonserver` (NVIDIA's container), or None when it would not serve."""
    try:
        installation = find_installation(preference)
    except TritonNotFoundError:
        return None
    if installation.kind != "native":
        return None
    folder = installation.backend_directory
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_dir())) if folder.is_dir() else ()


def _bundled_stub() -> tuple[Path, Path]:
    """nvidia-pytriton's folder and its Python-backend stub for the running Python (TritonNotFoundError if none)."""
    try:
        import pytriton
    except ImportError as exc:
        raise TritonNotFoundError(
            "nvidia-pytriton is not installed (it carries the bundled tritonserver); install tierbench's "
            "dependencies, or run NVIDIA's Triton container (tritonserver on PATH)") from exc
    package_dir = Path(pytriton.__file__).parent
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = package_dir / "tritonserver" / "python_backend_stubs" / py_version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonNotFoundError(f"nvidia-pytriton {metadata.version('nvidia-pytriton')} has no Python backend "
                                  f"stub for Python {py_version}")
    return package_dir, stub


def bundled_problem() -> str | None:
    """Why the server bundled in nvidia-pytriton cannot run here; None when it can (checked without copying it)."""
    try:
        _bundled_stub()
    except TritonNotFoundError as exc:
        return str(exc)
    return None


def bundled_description() -> str:
    """`nvidia-pytriton 0.7.0, Python-backend stub for 3.11`: what the bundled server is (assumes it exists)."""
    return (f"nvidia-pytriton {metadata.version('nvidia-pytriton')}, Python-backend stub for "
            f"{sys.version_info.major}.{sys.version_info.minor}")


def bundled_installation() -> TritonInstallation:
    package_dir, stub = _bundled_stub()
    source = package_dir / "tritonserver"
    libs = package_dir.parent / "nvidia_pytriton.libs"
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"

    target = _cache_root() / f"tritonserver-pytriton{metadata.version('nvidia-pytriton')}-py{py_version}"
    _copy_once(source, target, stub)

    env = dict(os.environ)
    lib_dirs = [sysconfig.get_config_var("LIBDIR"), str(libs), env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = ":".join(d for d in lib_dirs if d)
    # The stub finds its Python (and so onnxruntime, numpy) from the first python3 on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return TritonInstallation("bundled", target / "bin" / "tritonserver", target / "backends", env=env)


def _copy_once(source: Path, target: Path, stub: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = target / ".complete"
        if done.exists():
            return
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("python_backend_stubs", "__pycache__"))
        shutil.copy(stub, target / "backends" / "python" / "triton_python_backend_stub")
        done.touch()

"""Where a node's `tritonserver` is and how it runs, whatever a backend serves with it:

- NVIDIA's container: `tritonserver` on PATH, with its native backends beside it;
- the server bundled in the nvidia-pytriton wheel (Python backend only). It cannot run in place: like pytriton
  (`pytriton/triton.py`), it is copied once to the node's cache without the per-Python stubs, the stub of the running
  Python put into `backends/python/`, and run with `LD_LIBRARY_PATH` covering the wheel's libraries (the copy breaks
  the binary's RPATH) and the running interpreter's `libpython` first (else the stub links the system's libpython3.11
  against another stdlib), PATH with the running Python's folder first (the stub finds its Python there).

A backend builds on `TritonBinary` (the image backend's installations add how they serve the classifier).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import metadata
from pathlib import Path

from serving.paths import cache_root

NO_TRITON_DOCS = "docs/troubleshooting.md#no-triton"  # what a node without a Triton can do
AUTO = "auto"


class TritonServerKind(StrEnum):
    """Which `tritonserver` serves: NVIDIA's own (on PATH in its container, native backends) or the one bundled in
    nvidia-pytriton (Python backend only)."""

    NATIVE = "native"
    BUNDLED = "bundled"


# A backend's setting `server`: which server a node runs; auto = the native one where the node has it
TRITON_SERVER_CHOICES = (AUTO, *TritonServerKind)


class TritonNotFoundError(RuntimeError):
    pass


@dataclass(frozen=True)
class TritonBinary:
    """A runnable `tritonserver`: its binary, its backends' folder and the environment it runs in."""

    binary: Path
    backend_directory: Path
    env: dict[str, str] = field(default_factory=dict)


def native_on_path() -> bool:
    """Whether the node has NVIDIA's `tritonserver` on PATH."""
    return shutil.which("tritonserver") is not None


def native_binary() -> TritonBinary:
    """NVIDIA's `tritonserver` on PATH; TritonNotFoundError when the node has none."""
    found = shutil.which("tritonserver")
    if not found:
        raise TritonNotFoundError(f"no `tritonserver` on PATH (NVIDIA's Triton container has one) ({NO_TRITON_DOCS})")
    binary = Path(found).resolve()
    backends = Path(os.environ.get("TRITON_BACKEND_DIRECTORY", binary.parent.parent / "backends"))
    return TritonBinary(binary, backends, env=dict(os.environ))


def native_backends() -> tuple[str, ...] | None:
    """The backends of the node's own `tritonserver` (NVIDIA's container); None when it has none."""
    try:
        folder = native_binary().backend_directory
    except TritonNotFoundError:
        return None
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_dir())) if folder.is_dir() else ()


def bundled_stub() -> tuple[Path, Path]:
    """nvidia-pytriton's folder and its Python-backend stub for the running Python (TritonNotFoundError if none)."""
    try:
        import pytriton
    except ImportError as exc:
        raise TritonNotFoundError(
            "nvidia-pytriton is not installed (it carries the bundled tritonserver); install tierbench's "
            f"dependencies, or run NVIDIA's Triton container (tritonserver on PATH) ({NO_TRITON_DOCS})") from exc
    package_dir = Path(pytriton.__file__).parent
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = package_dir / "tritonserver" / "python_backend_stubs" / py_version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonNotFoundError(f"nvidia-pytriton {metadata.version('nvidia-pytriton')} has no Python backend "
                                  f"stub for Python {py_version}")
    return package_dir, stub


def bundled_problem() -> str | None:
    """Why the bundled server cannot run here; None when it can (checked without copying it)."""
    try:
        bundled_stub()
    except TritonNotFoundError as exc:
        return str(exc)
    return None


def bundled_description() -> str:
    """`nvidia-pytriton 0.7.0, Python-backend stub for 3.11`: what the bundled server is (assumes it exists)."""
    return (f"nvidia-pytriton {metadata.version('nvidia-pytriton')}, Python-backend stub for "
            f"{sys.version_info.major}.{sys.version_info.minor}")


def bundled_binary() -> TritonBinary:
    """The bundled server, made runnable in the node's cache on first use; TritonNotFoundError when it cannot run."""
    package_dir, stub = bundled_stub()
    source = package_dir / "tritonserver"
    libs = package_dir.parent / "nvidia_pytriton.libs"
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = cache_root() / f"tritonserver-pytriton{metadata.version('nvidia-pytriton')}-py{py_version}"
    _copy_once(source, target, stub)
    env = dict(os.environ)
    lib_dirs = [sysconfig.get_config_var("LIBDIR"), str(libs), env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = ":".join(d for d in lib_dirs if d)
    # The stub finds its Python (and so what the models import) from the first python3 on PATH.
    env["PATH"] = python_first_on_path(env)
    return TritonBinary(target / "bin" / "tritonserver", target / "backends", env=env)


def python_first_on_path(env: dict[str, str]) -> str:
    """`env`'s PATH with the running Python's folder first: a Python-backend stub runs the first python3 there (its
    packages: the models' imports)."""
    return f"{Path(sys.executable).parent}:{env.get('PATH', '')}"


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


def find_binary(preference: str = AUTO) -> TritonBinary:
    """The node's server for the setting `server` (auto | native | bundled): NVIDIA's where the node has it and it is
    wanted, else the bundled one; TritonNotFoundError when there is none."""
    on_path = native_on_path()
    if preference == TritonServerKind.NATIVE and not on_path:
        raise TritonNotFoundError("server=native but no `tritonserver` on PATH; use NVIDIA's Triton container or "
                                  "server=auto to fall back to the server bundled in nvidia-pytriton "
                                  f"({NO_TRITON_DOCS})")
    if on_path and preference in (AUTO, TritonServerKind.NATIVE):
        return native_binary()
    return bundled_binary()

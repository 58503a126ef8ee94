"""Shared-memory transport for Triton clients on the server's machine: system (POSIX) and CUDA regions.

perf_analyzer's `--shared-memory=system|cuda`: the client writes the request's input once into a region the
server maps, registers it, and asks for the output in another region, so no tensor bytes cross the socket (the
request carries only the region names). Region names start with `tierbench_<pid>_` so regions a killed client
left behind can be found and removed.

tritonclient 2.51's own helpers (`tritonclient.utils.shared_memory` / `cuda_shared_memory`) need
`pkg_resources` (gone from setuptools >= 81) and `from cuda import cudart` (moved to `cuda.bindings` in
cuda-python 12.8+), so the regions are made here: system regions are files in /dev/shm (what `shm_open`
opens on Linux, where Triton runs), CUDA regions come from `cuda.bindings.runtime` IPC handles.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import itertools
import mmap
import os
import time
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
PREFIX = "tierbench_"
CUDA_IPC_HANDLE_SIZE = 64
UNREGISTER_PATIENCE_S = 2.0
_counter = itertools.count()


def region_name() -> str:
    """`tierbench_<pid>_<000042>`: of one width within a process, so requests naming regions are of one size (the
    compiled engine checks each response's size against the first's)."""
    return f"{PREFIX}{os.getpid()}_{next(_counter):06d}"


def remove_stale_regions() -> list[str]:
    """Remove system regions whose creating process is gone (a client killed before it closed)."""
    removed = []
    for path in SHM_DIR.glob(f"{PREFIX}*_*"):
        try:
            pid = int(path.name[len(PREFIX):].split("_")[0])
        except ValueError:
            continue
        if not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


class Region(ABC):
    """A shared-memory region of `byte_size` bytes that the server can map."""

    kind: str  # "system" | "cuda"

    def __init__(self, byte_size: int) -> None:
        self.name = region_name()
        self.byte_size = byte_size

    @abstractmethod
    def write(self, data: bytes | np.ndarray) -> None: ...

    @abstractmethod
    def read(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray: ...

    @abstractmethod
    async def register(self, client) -> None:
        """Register with the server through a tritonclient (http.aio or grpc.aio) client."""

    async def unregister(self, client) -> None:
        """Unregister from the server, waiting out Triton's "in use" refusal: since 2.50 the server counts the
        requests that reference a region and releases them after their responses are sent, so an unregister
        right after the last response can race the release. Any other error, or a region still held after
        `UNREGISTER_PATIENCE_S`, is raised."""
        call = (client.unregister_system_shared_memory if self.kind == "system"
                else client.unregister_cuda_shared_memory)
        deadline = time.monotonic() + UNREGISTER_PATIENCE_S
        while True:
            try:
                await call(self.name)
                return
            except Exception as exc:  # tritonclient raises InferenceServerException or transport errors
                if "in use" not in str(exc) or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.02)

    @abstractmethod
    def destroy(self) -> None: ...


class SystemRegion(Region):
    kind = "system"

    def __init__(self, byte_size: int) -> None:
        super().__init__(byte_size)
        self.key = f"/{self.name}"
        self.path = SHM_DIR / self.name
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, byte_size)
            self._map = mmap.mmap(fd, byte_size)
        finally:
            os.close(fd)

    def write(self, data: bytes | np.ndarray) -> None:
        raw = data.tobytes() if isinstance(data, np.ndarray) else data
        self._map[: len(raw)] = raw

    def read(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape))
        return np.frombuffer(self._map, dtype=dtype, count=count).reshape(shape).copy()

    async def register(self, client) -> None:
        await client.register_system_shared_memory(self.name, self.key, self.byte_size)

    def destroy(self) -> None:
        self._map.close()
        self.path.unlink(missing_ok=True)


class CudaRegion(Region):
    """Device memory exported with a CUDA IPC handle (the server maps it on the same GPU)."""

    kind = "cuda"

    def __init__(self, byte_size: int, device_id: int = 0) -> None:
        from cuda.bindings import runtime as cudart

        super().__init__(byte_size)
        self._cudart = cudart
        self.device_id = device_id
        self._check(cudart.cudaSetDevice(device_id))
        self.pointer = self._check(cudart.cudaMalloc(byte_size))
        handle = self._check(cudart.cudaIpcGetMemHandle(self.pointer))
        # base64 text: what both the HTTP (JSON) and gRPC registration calls take
        self.raw_handle = base64.b64encode(ctypes.string_at(handle.getPtr(), CUDA_IPC_HANDLE_SIZE)).decode()

    def _check(self, result):
        err, *value = result if isinstance(result, tuple) else (result,)
        if err != self._cudart.cudaError_t.cudaSuccess:
            raise RuntimeError(f"CUDA error {err}: {self._cudart.cudaGetErrorString(err)[1]!r}")
        return value[0] if value else None

    def write(self, data: bytes | np.ndarray) -> None:
        host = np.frombuffer(data.tobytes() if isinstance(data, np.ndarray) else data, dtype=np.uint8)
        self._check(self._cudart.cudaMemcpy(self.pointer, host.ctypes.data, host.nbytes,
                                            self._cudart.cudaMemcpyKind.cudaMemcpyHostToDevice))

    def read(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        self._check(self._cudart.cudaMemcpy(out.ctypes.data, self.pointer, out.nbytes,
                                            self._cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return out

    async def register(self, client) -> None:
        await client.register_cuda_shared_memory(self.name, self.raw_handle, self.device_id, self.byte_size)

    def destroy(self) -> None:
        self._check(self._cudart.cudaFree(self.pointer))


def new_region(kind: str, byte_size: int) -> Region:
    if kind == "system":
        return SystemRegion(byte_size)
    if kind == "cuda":
        return CudaRegion(byte_size)
    raise ValueError(f"shared memory kind {kind!r}: choose system or cuda")

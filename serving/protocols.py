"""What crosses the wire: protocol names (a wire protocol, optionally with Triton's shared-memory transport for the
tensors) and input formats.

`http` / `grpc` carry the tensors in the request body. `http_shm` / `grpc_shm` (system shared memory) and
`http_cuda_shm` / `grpc_cuda_shm` (CUDA IPC memory, GPU nodes) keep the same control protocol but put inputs
and outputs in shared-memory regions the server maps, as perf_analyzer's `--shared-memory=system|cuda` does:
the client must run on the server's machine. They are protocol values (not a separate axis) because they
only exist for some backends and change what crosses the socket, which is what the protocol axis compares.
"""

from __future__ import annotations

from enum import StrEnum

WIRE_PROTOCOLS = ("http", "grpc")
SHARED_MEMORY_SUFFIXES = {"shm": "system", "cuda_shm": "cuda"}
PROTOCOLS = (*WIRE_PROTOCOLS, *(f"{w}_{s}" for s in SHARED_MEMORY_SUFFIXES for w in WIRE_PROTOCOLS))


def parse_protocol(protocol: str) -> tuple[str, str]:
    """`grpc_cuda_shm` -> ("grpc", "cuda"); `http` -> ("http", "none")."""
    wire, _, suffix = protocol.partition("_")
    if wire not in WIRE_PROTOCOLS or (suffix and suffix not in SHARED_MEMORY_SUFFIXES):
        raise ValueError(f"unknown protocol {protocol!r}: choose from {list(PROTOCOLS)}")
    return wire, SHARED_MEMORY_SUFFIXES.get(suffix, "none")


class InputFormat(StrEnum):
    """What a request carries: a float32 tensor the model takes as it is, the JPEG files the server decodes and
    preprocesses (`serving.images`) as binary, or the same files as base64 strings in a JSON body, as the studies'
    FastAPI service and TorchServe's REST examples take them (`serving.clients.json_images`; JSON APIs only, over
    HTTP: a server without one skips it, saying why)."""

    TENSOR = "tensor"
    JPEG = "jpeg"
    JPEG_BASE64 = "jpeg_base64"

    @property
    def images(self) -> bool:
        """Whether requests carry encoded images (the server decodes them), not a tensor."""
        return self is not InputFormat.TENSOR

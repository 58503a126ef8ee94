"""What crosses the wire: protocol names (a wire protocol, optionally with Triton's shared-memory transport for the
tensors). What an image request carries, its input format, is the image workload's
(`serving.workloads.image.formats.InputFormat`).

`http` / `grpc` carry the tensors in the request body. `http_shm` / `grpc_shm` (system shared memory) and
`http_cuda_shm` / `grpc_cuda_shm` (CUDA IPC memory, GPU nodes) keep the same control protocol but put inputs
and outputs in shared-memory regions the server maps, as perf_analyzer's `--shared-memory=system|cuda` does:
the client must run on the server's machine. They are protocol values (not a separate axis) because they
only exist for some backends and change what crosses the socket, which is what the protocol axis compares.
"""

from __future__ import annotations

WIRE_PROTOCOLS = ("http", "grpc")
SHARED_MEMORY_SUFFIXES = {"shm": "system", "cuda_shm": "cuda"}
PROTOCOLS = (*WIRE_PROTOCOLS, *(f"{w}_{s}" for s in SHARED_MEMORY_SUFFIXES for w in WIRE_PROTOCOLS))


def parse_protocol(protocol: str) -> tuple[str, str]:
    """`grpc_cuda_shm` -> ("grpc", "cuda"); `http` -> ("http", "none")."""
    wire, _, suffix = protocol.partition("_")
    if wire not in WIRE_PROTOCOLS or (suffix and suffix not in SHARED_MEMORY_SUFFIXES):
        raise ValueError(f"unknown protocol {protocol!r}: choose from {list(PROTOCOLS)}")
    return wire, SHARED_MEMORY_SUFFIXES.get(suffix, "none")


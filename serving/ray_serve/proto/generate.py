"""Regenerate `classifier_pb2.py` and `classifier_pb2_grpc.py` from `classifier.proto` (grpcio-tools).

Run from the repository root: `python -m serving.ray_serve.proto.generate [--out DIR]`. The generated files are
committed, so serving needs only grpcio and protobuf; grpcio-tools (a dev dependency) must match the protobuf
runtime's major version (grpcio-tools 1.62 writes code for protobuf 4.x).
"""

from __future__ import annotations

from pathlib import Path

from serving.grpc_codegen import generate_modules, generated_names, main

PROTO = Path("serving/ray_serve/proto/classifier.proto")
GENERATED = generated_names(PROTO)


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into `out_dir`; paths are relative to the repository root so the modules
    import each other as `serving.ray_serve.proto.*`."""
    return generate_modules(PROTO, out_dir)


if __name__ == "__main__":
    main(__doc__, generate, Path(__file__).resolve().parent)

"""Regenerate `classifier_pb2.py` and `classifier_pb2_grpc.py` from `classifier.proto` (grpcio-tools).

Run from the repository root: `python -m serving.ray_serve.proto.generate [--out DIR]`. The generated files are
committed, so serving needs only grpcio and protobuf; grpcio-tools (a dev dependency) must match the protobuf
runtime's major version (grpcio-tools 1.62 writes code for protobuf 4.x).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

PROTO = Path("serving/ray_serve/proto/classifier.proto")
GENERATED = ("classifier_pb2.py", "classifier_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into `out_dir`; paths are relative to the repository root so the modules
    import each other as `serving.ray_serve.proto.*`."""
    from grpc_tools import protoc

    root = Path(__file__).resolve().parents[3]
    with tempfile.TemporaryDirectory() as tmp:
        code = protoc.main(["grpc_tools.protoc", f"-I{root}", f"--python_out={tmp}", f"--grpc_python_out={tmp}",
                            str(root / PROTO)])
        if code != 0:
            raise RuntimeError(f"protoc failed with exit code {code}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copy(Path(tmp) / PROTO.parent / name, target)
            written.append(target)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    for path in generate(parser.parse_args().out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Regenerate a backend's gRPC modules (`<proto>_pb2.py`, `<proto>_pb2_grpc.py`) from its .proto with grpcio-tools
(a dev dependency, whose major version must match the protobuf runtime's: grpcio-tools 1.62 writes code for protobuf
4.x). Each backend's `proto/generate.py` names its proto and runs `main`; the generated files are committed, so
serving needs only grpcio and protobuf."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from serving.paths import REPO_ROOT


def generated_names(proto: Path) -> tuple[str, str]:
    return f"{proto.stem}_pb2.py", f"{proto.stem}_pb2_grpc.py"


def generate_modules(proto: Path, out_dir: Path, includes: Sequence[str] = (), header: str = "") -> list[Path]:
    """Write the modules generated from `proto` (a path from the repository root, so that they import each other as
    `serving.<backend>.proto.*`) into `out_dir`, each starting with `header`; `includes`: folders of the protos it
    imports beyond the repository's."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        code = protoc.main(["grpc_tools.protoc", *(f"-I{path}" for path in (REPO_ROOT, *includes)),
                            f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(REPO_ROOT / proto)])
        if code != 0:
            raise RuntimeError(f"protoc failed with exit code {code}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in generated_names(proto):
            target = out_dir / name
            target.write_text(header + (Path(tmp) / proto.parent / name).read_text())
            written.append(target)
    return written


def main(doc: str, generate: Callable[[Path], list[Path]], default_out: Path) -> None:
    """`python -m serving.<backend>.proto.generate [--out DIR]`: `generate` into DIR (default: `default_out`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    for path in generate(parser.parse_args().out):
        print(f"wrote {path}")

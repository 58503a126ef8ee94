"""The committed gRPC modules for Ray Serve's ingress are what classifier.proto generates today."""

from __future__ import annotations

import pytest

from serving.paths import REPO_ROOT


def test_generated_modules_match_the_proto(tmp_path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a dev dependency) regenerates the modules")
    from serving.ray_serve.proto.generate import GENERATED, generate

    generate(tmp_path)
    for name in GENERATED:
        committed = (REPO_ROOT / "serving" / "ray_serve" / "proto" / name).read_text()
        assert (tmp_path / name).read_text() == committed, (
            f"{name} is stale: run `python -m serving.ray_serve.proto.generate` and commit the result")


def test_servicer_is_importable_by_the_path_serve_is_given() -> None:
    from hydra.utils import get_method

    from serving.ray_serve.backend import GRPC_SERVICER

    assert callable(get_method(GRPC_SERVICER))

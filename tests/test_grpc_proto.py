"""The committed gRPC modules for Ray Serve's ingress are what classifier.proto generates today; the servicers Serve
is given import, and the OIP's messages pickle (Serve's proxy pickles every request it hands a replica)."""

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


def test_servicers_are_importable_by_the_paths_serve_is_given() -> None:
    from hydra.utils import get_method

    from serving.ray_serve.backend import GRPC_SERVICER, GRPC_SERVICERS, OIP_GRPC_SERVICER

    assert set(GRPC_SERVICERS) == {GRPC_SERVICER, OIP_GRPC_SERVICER}
    for path in GRPC_SERVICERS:
        assert callable(get_method(path))


def test_oip_messages_pickle_once_the_servicer_module_is_imported() -> None:
    import pickle

    from serving.ray_serve.proto.oip_service import service_pb2

    request = service_pb2.ModelInferRequest(model_name="tiny", raw_input_contents=[b"\x00" * 8])
    assert pickle.loads(pickle.dumps(request)) == request

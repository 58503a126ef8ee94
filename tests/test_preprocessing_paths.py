"""One preprocessing definition: the same JPEG gives the same tensor on every path that decodes it.

Paths: the reference (`serving.workloads.image.preprocessing`, what the cross-check feeds PyTorch), Ray Serve's replica
over HTTP and over gRPC (from the bytes each client puts on the wire: the Open Inference Protocol, and the routes from
before it), and Triton's preprocess model (the rendered copy, run on the BYTES tensor the Triton client writes, with a
stand-in for Triton's `triton_python_backend_utils`). The real server's preprocess model is compared in
tests/test_triton_transport.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.config.compose import load_config
from serving.clients.base import ClientSpec, jpeg_batch
from serving.paths import REPO_ROOT
from serving.workloads.image.preprocessing import DEFAULT_PREPROCESSING, decode_and_preprocess
from tests.helpers import fake_triton_utils

SPEC = ClientSpec(target="", url="", model_name="resnet18", input_format="jpeg", batch_size=5,
                  input_shape=(3, 224, 224), output_shape=(1000,))


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return decode_and_preprocess(jpeg_batch(SPEC))


def _rendered_preprocess_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    from serving.triton.ensemble import render_jpeg_ensemble
    from serving.triton.repository import read_config

    classifier = read_config(REPO_ROOT / "model_repository" / "resnet18" / "config.pbtxt")
    render_jpeg_ensemble(classifier, tmp_path, preprocess_instances=1, preprocessing=DEFAULT_PREPROCESSING)
    return load_rendered_preprocess_model(tmp_path, "resnet18", monkeypatch)


def load_rendered_preprocess_model(repository: Path, model: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """The preprocess model rendered into `repository`, initialised as Triton's Python backend would."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from serving.triton.ensemble import preprocess_model_name

    version_dir = repository / preprocess_model_name(model) / "1"
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_triton_utils())
    spec = importlib.util.spec_from_file_location("rendered_preprocess_model", version_dir / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    instance = module.TritonPythonModel()
    config = (repository / preprocess_model_name(model) / "config.pbtxt").read_text()
    model_config = json_format.MessageToJson(text_format.Parse(config, mc.ModelConfig()),
                                             preserving_proto_field_name=True)
    instance.initialize({"model_config": model_config})
    return instance


def test_triton_preprocess_model_runs_the_same_code_on_the_wire_bytes(tmp_path, monkeypatch, reference) -> None:
    model = _rendered_preprocess_model(tmp_path, monkeypatch)
    copied = tmp_path / "resnet18_preprocess" / "1" / "tierbench_images.py"
    assert copied.read_bytes() == (REPO_ROOT / "serving" / "workloads" / "image" / "preprocessing.py").read_bytes()

    # The BYTES tensor the Triton client writes (into shared memory, or the body): Triton's layout, decoded
    # by tritonclient's own deserialiser into the object array the model receives.
    from tritonclient.utils import deserialize_bytes_tensor

    from serving.triton.clients import TritonHttpClient

    client = TritonHttpClient(SPEC)
    sent = deserialize_bytes_tensor(client.oip_tensor(client.pool[0]).raw).reshape(-1, 1)
    (response,) = model.execute([{"jpeg": sent}])
    assert response.error is None
    (tensor,) = response.output_tensors
    assert tensor.name == "input"
    np.testing.assert_array_equal(tensor.as_numpy(), reference)


def test_triton_preprocess_model_answers_a_bad_image_with_an_error(tmp_path, monkeypatch) -> None:
    model = _rendered_preprocess_model(tmp_path, monkeypatch)
    (response,) = model.execute([{"jpeg": np.array([[b"not a jpeg"]], dtype=np.object_)}])
    assert response.error is not None and "cannot decode" in str(response.error)


@pytest.fixture(scope="module")
def replica() -> object:
    from serving.ray_serve.deployment import TorchImageClassifier

    model = load_config().model.to_dict()
    return TorchImageClassifier.func_or_class(model, "cpu", 1)


def test_ray_serve_http_replica_decodes_the_wire_bytes_to_the_same_tensor(replica, reference) -> None:
    from serving.ray_serve.clients import LENGTHS_HEADER, encode_request
    from serving.ray_serve.deployment import split_jpegs

    body, headers = encode_request(SPEC)
    batch = asyncio.run(replica.service.preprocessed(split_jpegs(body, headers[LENGTHS_HEADER])))
    np.testing.assert_array_equal(batch, reference)


def test_ray_serve_grpc_replica_decodes_the_wire_bytes_to_the_same_tensor(replica, reference) -> None:
    from serving.ray_serve.clients import build_request
    from serving.ray_serve.proto import classifier_pb2

    wire = build_request(SPEC).SerializeToString()
    received = classifier_pb2.ClassifyRequest.FromString(wire)
    batch = asyncio.run(replica.service.preprocessed(list(received.jpegs)))
    np.testing.assert_array_equal(batch, reference)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ray_serve_oip_replica_decodes_the_clients_wire_bytes_to_the_same_tensor(replica, reference, protocol) -> None:
    from dataclasses import replace

    from tritonclient.grpc import service_pb2

    from serving.clients.wire import grpc_message
    from serving.oip import protocol as oip
    from serving.ray_serve.clients import RayServeGrpcClient, RayServeHttpClient

    model = replica.service.oip.models["resnet18_jpeg"]
    spec = replace(SPEC, model_name=model.name, input_name=model.input_name)
    if protocol == "http":
        wire = RayServeHttpClient(replace(spec, url="127.0.0.1:1/route")).wire_request().payload
        head, _, body = wire.partition(b"\r\n\r\n")
        length = next(line.split(b": ")[1] for line in head.split(b"\r\n") if line.startswith(b"Inference-Header"))
        request = oip.parse_http(body, length.decode())
    else:
        message = grpc_message(RayServeGrpcClient(replace(spec, url="127.0.0.1:1")).wire_request().payload)
        request = oip.parse_grpc(service_pb2.ModelInferRequest.FromString(message))
    batch = asyncio.run(replica.service.preprocessed(model.batch(request)))
    np.testing.assert_array_equal(batch, reference)


def test_the_json_api_replica_decodes_the_base64_wire_bytes_to_the_same_tensor(replica, reference) -> None:
    from dataclasses import replace

    from serving.workloads.image import json_images

    client = json_images.JsonImagesClient(replace(SPEC, input_format="jpeg_base64", url="127.0.0.1:1/predict"))
    head, _, body = client.wire_request().payload.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in head
    batch = asyncio.run(replica.service.preprocessed(json_images.decode_images(body)))
    np.testing.assert_array_equal(batch, reference)


def test_payload_bytes_are_the_same_jpeg_files_for_every_client() -> None:
    from dataclasses import replace

    from serving.ray_serve.clients import RayServeGrpcClient, RayServeHttpClient
    from serving.triton.clients import TritonGrpcClient, TritonHttpClient
    from serving.workloads.image.json_images import JsonImagesClient

    expected = sum(len(image) for image in jpeg_batch(SPEC))
    for cls in (RayServeHttpClient, RayServeGrpcClient, TritonHttpClient, TritonGrpcClient):
        assert cls(SPEC).payload_bytes == expected, cls.__name__
    base64_text = JsonImagesClient(replace(SPEC, input_format="jpeg_base64")).payload_bytes
    assert base64_text == sum(4 * -(-len(image) // 3) for image in jpeg_batch(SPEC)), "the base64 text: 4/3 the files"

"""The plain FastAPI + PyTorch service: what it refuses and where its clients go (fast), and a real uvicorn process
started by its host outside Ray answering every format with the reference's outputs, its wire bytes (what the
compiled engine sends) included, and leaving nothing behind (slow)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.run.server_group import build_backend
from serving.backend import ServerHandle
from serving.clients.base import jpeg_batch, load_client, tensor_batch
from serving.models import preprocessing, reference_runner
from serving.pytorch.facts import TorchFacts
from serving.workloads.image.preprocessing import decode_and_preprocess
from tests.helpers import CPU_NODE, GPU_NODE
from tests.processes import owned_environment

FORMATS = ("tensor", "jpeg", "jpeg_base64")


def _backend(overrides: tuple[str, ...] = (), node=CPU_NODE, tier: str = "local"):
    return build_backend(load_config([f"gpu={tier}", "model=tiny", *overrides]), "fastapi", node, {})


def test_bad_settings_are_refused_with_the_key() -> None:
    from experiments.config.errors import ConfigError
    from experiments.config.validation import validate

    with pytest.raises(ConfigError, match=r"backends.fastapi.workers=0 is not allowed: a positive integer"):
        validate(load_config(["model=tiny", "experiment.backends=[fastapi]", "backends.fastapi.workers=0"]))


def test_http_only_every_format_and_a_gpu_tier_needs_torch_to_see_the_gpu() -> None:
    backend = _backend()
    assert all(backend.unsupported_reason("http", f) is None for f in FORMATS)
    assert "speaks HTTP only" in backend.unsupported_reason("grpc", "jpeg")
    assert "shared-memory" in backend.unsupported_reason("http_shm", "tensor")
    assert "needs a CUDA GPU" in _backend(("backends.fastapi.half=true",)).unsupported_reason("http", "tensor")
    blind = GPU_NODE.with_facts(TorchFacts(version="2.14.1+cu130", cuda_build="13.0"))
    reason = _backend(node=blind, tier="rtx4090").unsupported_reason("http", "tensor")
    assert "does not see its GPU" in reason and "the FastAPI service would measure the CPU" in reason
    assert _backend(node=GPU_NODE, tier="rtx4090").actor_options()["num_gpus"] == 0.5


def test_clients_reach_the_json_api_and_the_open_inference_protocol() -> None:
    backend = _backend()
    handle = ServerHandle("fastapi", {"http": "http://127.0.0.1:8000"})
    base64 = backend.client_spec(handle, "http", "jpeg_base64", 4)
    assert (base64.target, base64.url) == ("serving.workloads.image.json_images.JsonImagesClient",
                                           "http://127.0.0.1:8000/predict")
    tensor, jpeg = (backend.client_spec(handle, "http", f, 2) for f in ("tensor", "jpeg"))
    assert (tensor.target, tensor.model_name, tensor.input_name) == ("serving.oip.clients.OipHttpClient", "tiny",
                                                                     "input")
    assert (jpeg.model_name, jpeg.input_name, jpeg.output_name) == ("tiny_jpeg", "jpeg", "logits")


def test_deploy_files_start_the_same_service() -> None:
    backend = _backend(("backends.fastapi.workers=2",))
    files = backend.deploy_files({})
    config = json.loads(files["serving_config.json"])
    assert config == backend.service_config(), "what the host starts"
    assert config["model"]["name"] == "tiny" and config["device"] == "cpu"
    assert "uvicorn serving.fastapi.app:create_app --factory" in files["run.sh"] and "--workers 2" in files["run.sh"]


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[object, str]]:
    from serving.fastapi.host import FastApiHost

    backend = _backend(("experiment.batch_sizes=[1,4]",))
    with owned_environment():  # fails if uvicorn outlives the stop
        host = FastApiHost(backend.service_config(), "127.0.0.1", 1)
        try:
            info = host.start(120)
            yield backend, f"http://127.0.0.1:{info['port']}"
        finally:
            assert "uvicorn.log" in host.stop(10)


def _reference(model, spec) -> np.ndarray:
    batch = (tensor_batch(spec) if spec.input_format == "tensor"
             else decode_and_preprocess(jpeg_batch(spec), preprocessing(model)))
    return reference_runner(model)(batch)


async def _call(spec):
    client = load_client(spec)
    await client.open()
    try:
        return await client.call(), client.payload_bytes
    finally:
        await client.close()


@pytest.mark.slow
@pytest.mark.parametrize("input_format", FORMATS)
def test_every_format_gives_the_references_outputs_and_its_own_time(service, input_format: str) -> None:
    backend, url = service
    spec = backend.client_spec(ServerHandle("fastapi", {"http": url}), "http", input_format, 4)
    (outputs, report), payload = asyncio.run(_call(spec))
    np.testing.assert_allclose(outputs, _reference(backend.context.model, spec), atol=1e-4)
    assert report is not None and report.ms > 0 and report.executed_images == 4, "Server-Timing on every answer"
    jpegs = sum(len(image) for image in jpeg_batch(spec))
    assert payload == {"tensor": tensor_batch(spec).nbytes, "jpeg": jpegs,
                       "jpeg_base64": sum(4 * -(-len(i) // 3) for i in jpeg_batch(spec))}[input_format]


@pytest.mark.slow
@pytest.mark.parametrize("input_format", FORMATS)
def test_the_compiled_engines_bytes_get_a_valid_answer(service, input_format: str) -> None:
    backend, url = service
    client = load_client(backend.client_spec(ServerHandle("fastapi", {"http": url}), "http", input_format, 2))
    wire = client.wire_request()
    with socket.create_connection((wire.host, wire.port), timeout=30) as sock:
        sock.sendall(wire.payload)
        response = b""
        while b"\r\n\r\n" not in response or len(response.partition(b"\r\n\r\n")[2]) < _length(response):
            response += sock.recv(1 << 16)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    client.check_wire_response(body)


def _length(response: bytes) -> int:
    head = response.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    return next(int(line.split(":")[1]) for line in head.split("\r\n") if line.startswith("content-length"))


@pytest.mark.slow
def test_bad_base64_is_a_400_naming_the_problem(service) -> None:
    import urllib.error
    import urllib.request

    _, url = service
    request = urllib.request.Request(f"{url}/predict", data=json.dumps({"images": ["not base64!"]}).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 400 and "base64" in info.value.read().decode()


@pytest.mark.slow
def test_the_open_inference_protocol_describes_both_models(service) -> None:
    import urllib.request

    backend, url = service
    model = backend.context.model
    with urllib.request.urlopen(f"{url}/v2/models/tiny_jpeg/config", timeout=30) as response:
        config = json.loads(response.read())
    assert config["max_batch_size"] == model.max_batch_size and config["input"][0]["data_type"] == "TYPE_STRING"
    with urllib.request.urlopen(f"{url}/v2", timeout=30) as response:
        assert json.loads(response.read())["name"] == "tierbench-fastapi"

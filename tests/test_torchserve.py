"""TorchServe, the parts that need no server running: its settings' refusals, the clients' request bytes as
TorchServe parses them, the metrics breakdown, the config properties, the backend's skips, client specs and probe,
its deploy files and variant, and the launcher taking its whole group down with it. tierbench's handler run directly
is tests/test_torchserve_handler.py's, a real TorchServe tests/test_torchserve_server.py's."""

from __future__ import annotations

import email.parser
import email.policy
import json
import shlex
import subprocess
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serving import torchserve_metrics as ts_metrics
from serving.backend import BackendContext, ServerHandle
from serving.clients.base import jpeg_batch, tensor_batch
from serving.clients.wire import grpc_message
from serving.process import stop_process_group
from serving.pytorch.facts import TorchFacts
from serving.torchserve import config as ts_config
from serving.torchserve.backend import TorchServeBackend
from serving.torchserve.clients import TorchServeGrpcClient, TorchServeRestClient
from serving.torchserve.facts import TorchServeFacts
from serving.torchserve.payloads import PREDICTIONS
from serving.torchserve.settings import TorchServeSettings
from tests.torchserve_helpers import CFG, MODEL, NODE, TINY, backend_on, spec

# -- settings -------------------------------------------------------------------------------------------------------

def test_default_settings_pass_and_describe_the_server() -> None:
    settings = TorchServeSettings()
    assert settings.check("torchserve", TINY, CFG.cluster) == []
    assert settings.family == "torchserve" and settings.server_mode_hint == "torchserve"
    assert settings._target_ == "serving.torchserve.backend.TorchServeBackend"
    assert set(settings.searchable) == {"workers", "batch_size", "max_batch_delay_ms", "job_queue_size",
                                        "torch_threads"}


@pytest.mark.parametrize("key,value,says", [
    ("max_batch_delay_ms", 0, "stores maxBatchDelay 0 as unset and waits its default 100 ms; use 1 or more"),
    ("max_batch_delay_ms", -3, "a whole number of milliseconds >= 1"),
    ("workers", 0, "a positive integer"),
    ("batch_size", 0, "a positive integer"),
    ("job_queue_size", 0, "a positive integer"),
    ("response_timeout_s", -1, "a positive integer"),
    ("num_gpus", -0.5, "a share of a GPU >= 0"),
    ("torch_threads", 0, "a positive integer, or null"),
])
def test_bad_settings_are_refused_with_key_value_and_fix(key: str, value: Any, says: str) -> None:
    problems = TorchServeSettings(**{key: value}).check("ts", TINY, CFG.cluster)
    assert len(problems) == 1
    assert problems[0].startswith(f"backends.ts.{key}={value!r} is not allowed: ") and says in problems[0]


# -- the clients' bytes ----------------------------------------------------------------------------------------------

def _http_parts(request: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body)
    return lines[0], headers, body


def test_the_rest_tensor_request_is_the_raw_batch() -> None:
    client = TorchServeRestClient(spec("tensor", 2))
    wire = client.wire_request()
    line, headers, body = _http_parts(wire.payload)
    assert (wire.protocol, wire.port, line) == ("http1", 1, "POST /predictions/tiny HTTP/1.1")
    assert headers["Content-Type"] == "application/octet-stream"
    assert body == tensor_batch(spec("tensor", 2)).tobytes() and client.payload_bytes == len(body)


def test_the_rest_jpeg_request_is_multipart_with_one_file_per_image() -> None:
    client = TorchServeRestClient(spec("jpeg", 3))
    _, headers, body = _http_parts(client.wire_request().payload)
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body)
    parts = [(p.get_param("name", header="content-disposition"), p.get_content_type(), p.get_payload(decode=True))
             for p in message.iter_parts()]
    images = jpeg_batch(spec("jpeg", 3))
    assert parts == [(f"image{i}", "image/jpeg", image) for i, image in enumerate(images)]
    assert client.payload_bytes == sum(map(len, images))


@pytest.mark.parametrize("input_format,keys", [("tensor", ["tensor"]), ("jpeg", ["image0", "image1"])])
def test_the_grpc_request_is_a_predictions_request(input_format: str, keys: list[str]) -> None:
    from serving.torchserve.proto import inference_pb2

    client = TorchServeGrpcClient(spec(input_format, 2, url="127.0.0.1:7070"))
    wire = client.wire_request()
    headers = dict(wire.headers)
    assert headers[":path"] == PREDICTIONS == "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    assert (wire.protocol, wire.host, wire.port) == ("h2", "127.0.0.1", 7070)
    request = inference_pb2.PredictionsRequest.FromString(grpc_message(wire.payload))
    assert request.model_name == "tiny" and sorted(request.input) == keys
    sent = b"".join(request.input[k] for k in keys)
    data = tensor_batch(client.spec).tobytes() if input_format == "tensor" else b"".join(jpeg_batch(client.spec))
    assert sent == data and client.payload_bytes == len(data)


def test_responses_of_the_wrong_size_are_errors() -> None:
    from serving.torchserve.proto import inference_pb2

    client = TorchServeGrpcClient(spec("tensor", 2, url="127.0.0.1:7070"))
    good = inference_pb2.PredictionResponse(prediction=np.zeros((2, 1000), np.float32).tobytes()).SerializeToString()
    client.check_wire_response(b"\x00" + len(good).to_bytes(4, "big") + good)
    error = json.dumps({"code": 400, "message": "bad"}).encode()  # what a gRPC 400 looks like: status OK
    bad = inference_pb2.PredictionResponse(prediction=error).SerializeToString()
    with pytest.raises(RuntimeError, match="expected 8000 bytes"):
        client.check_wire_response(b"\x00" + len(bad).to_bytes(4, "big") + bad)


# -- metrics, config, backend ----------------------------------------------------------------------------------------

METRICS_TEXT = """# TYPE ts_inference_requests_total counter
ts_inference_requests_total{model_name="tiny",model_version="default",hostname="vm",} 10.0
ts_inference_requests_total{model_name="other",model_version="default",hostname="vm",} 99.0
ts_inference_latency_microseconds{model_name="tiny",model_version="default",hostname="vm",} 2.5E4
ts_queue_latency_microseconds{model_name="tiny",model_version="default",hostname="vm",} 5000.0
ImagesServed{ModelName="tiny",Level="Model",Hostname="vm",} 24.0
ForwardPasses{ModelName="tiny",Level="Model",Hostname="vm",} 6.0
"""


def test_the_breakdown_uses_the_rest_sums_only_when_they_moved() -> None:
    zero = dict.fromkeys(ts_metrics.COUNTERS, 0.0)
    after = ts_metrics.parse_counters(METRICS_TEXT, "tiny")
    assert after["ts_inference_requests_total"] == 10 and after["ImagesServed"] == 24
    assert ts_metrics.breakdown(zero, after) == {"server_requests": 10, "server_request_ms": 2.5,
                                                 "server_queue_ms": 0.5, "server_batch_avg": 4.0}
    grpc_only = {**after, "ts_inference_requests_total": 20.0, "ImagesServed": 34.0, "ForwardPasses": 16.0}
    assert ts_metrics.breakdown(after, grpc_only) == {"server_requests": 10, "server_batch_avg": 1.0}
    assert ts_metrics.served_images(after, grpc_only) == 10
    assert ts_metrics.breakdown(after, after) == {}


def test_config_properties_carry_the_batcher_and_room_for_the_largest_request() -> None:
    variant = ts_config.TorchServeVariant(workers=2, batch_size=4, max_batch_delay_ms=7, job_queue_size=50)
    text = ts_config.properties("tiny", MODEL, variant, "127.0.0.1", ts_config.Ports(), "store", "m.yaml")
    values = dict(line.split("=", 1) for line in text.splitlines())
    assert values["inference_address"] == "http://127.0.0.1:8080" and values["grpc_inference_address"] == "127.0.0.1"
    assert int(values["max_request_size"]) == 2 * 32 * 3 * 224 * 224 * 4 and values["job_queue_size"] == "50"
    assert json.loads(values["models"]) == {"tiny": {"1.0": {
        "defaultVersion": True, "marName": "tiny.mar", "minWorkers": 2, "maxWorkers": 2, "batchSize": 4,
        "maxBatchDelay": 7, "responseTimeout": 120}}}
    assert values["number_of_gpu"] == "0" and values["disable_token_authorization"] == "true"


def test_what_torchserve_skips_and_why() -> None:
    backend = backend_on()
    assert backend.unsupported_reason("http", "tensor") is None
    assert backend.unsupported_reason("grpc", "jpeg") is None
    assert backend.unsupported_reason("http", "jpeg_base64") is None
    assert "map<string, bytes>" in backend.unsupported_reason("grpc", "jpeg_base64")
    assert "Triton feature" in backend.unsupported_reason("http_shm", "tensor")
    assert "needs a CUDA GPU" in backend_on(half=True).unsupported_reason("http", "tensor")
    no_java = NODE.with_facts(TorchServeFacts(version="0.12.0", problem="no java on PATH"))
    assert backend_on(no_java).unsupported_reason("http", "tensor") == (
        "TorchServe cannot start on node localhost: no java on PATH")
    cpu_torch_on_gpu_tier = replace(NODE, gpu_names=("NVIDIA H100",)).with_facts(TorchFacts(version="2.5", cuda=False))
    gpu_tier = TorchServeBackend(BackendContext(name="ts", model=TINY, node=cpu_torch_on_gpu_tier, ray_options={},
                                                tier="h100", requires_gpu=True), TorchServeSettings())
    assert "does not see its GPU" in gpu_tier.unsupported_reason("http", "tensor")
    assert backend_on(half=True).numerics == "fp16" and backend.numerics == "fp32"


def test_client_specs_batching_params_and_the_probe() -> None:
    backend = backend_on(batch_size=4, workers=2)
    handle = ServerHandle("torchserve", {"http": "http://127.0.0.1:1", "grpc": "127.0.0.1:2"})
    rest = backend.client_spec(handle, "http", "jpeg", 3)
    assert (rest.target, rest.url) == ("serving.torchserve.clients.TorchServeRestClient",
                                       "http://127.0.0.1:1/predictions/tiny")
    base64 = backend.client_spec(handle, "http", "jpeg_base64", 3)
    assert base64.target == "serving.workloads.image.json_images.JsonImagesClient" and base64.url == rest.url
    assert backend.client_spec(handle, "grpc", "tensor", 3).url == "127.0.0.1:2"
    assert backend.batching_params() == {"server_batching": True, "server_instances": 2, "server_max_batch_size": 4,
                                         "server_batch_wait_ms": 5.0, "server_preferred_batch_sizes": "",
                                         "server_max_queue_size": 100}
    assert backend_on().batching_params()["server_max_batch_size"] == 0


def test_the_probe_finds_torchserve_the_archiver_and_java() -> None:
    pytest.importorskip("ts")
    facts = TorchServeFacts.probe()
    assert facts.problem is None, facts.problem  # torchserve, the archiver and java are installed here
    assert facts.version == "0.12.0" and facts.java_version and Path(facts.java_path).exists()


@pytest.mark.slow
def test_the_deploy_folder_archives_and_names_the_same_commands(tmp_path: Path) -> None:
    pytest.importorskip("ts")
    files = backend_on(batch_size=4).deploy_files({})
    assert set(files) == {"run.sh", "tierbench_handler.py", "tierbench.json", "config.properties", "metrics.yaml",
                          "log4j2.xml"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    lines = files["run.sh"].splitlines()
    archiver = shlex.split(next(line for line in lines if line.startswith("torch-model-archiver")))
    (tmp_path / "model_store").mkdir()
    subprocess.run(ts_config.archiver_command(archiver[1:]), cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "model_store" / "tiny.mar").is_file()
    assert shlex.split(next(line for line in lines if line.startswith("exec "))) == [
        "exec", "torchserve", "--start", "--foreground", "--ncs", "--model-store", "model_store", "--models",
        "tiny=tiny.mar", "--ts-config", "config.properties", "--log-config", "log4j2.xml"]
    handler_json = json.loads(files["tierbench.json"])
    assert handler_json["model"] == MODEL and handler_json["warmup_batch_sizes"] == [1, 4]
    assert handler_json["report_dir"] is None
    assert "ImagesServed" in files["metrics.yaml"]


def test_the_variant_travels_as_plain_values() -> None:
    variant = backend_on().variant()
    assert asdict(variant)["options"]["half"] is False and variant.device == "cpu"
    assert variant.warmup_batch_sizes == (1, 4)


@pytest.mark.slow
def test_the_launcher_passes_a_sigterm_of_its_own_to_its_whole_group(tmp_path: Path) -> None:
    """Its parent-death signal reaches the launcher alone: the frontend and workers it started must stop with it
    (TorchServe's own launcher would leave them serving). A stand-in `ts.model_server` starts a child and waits."""
    import os
    import signal

    from serving.process import start_process

    fake = tmp_path / "fake" / "ts"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "model_server.py").write_text(
        "import subprocess, sys\n"
        "def start():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    print(child.pid, flush=True)\n"
        "    child.wait()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    log = tmp_path / "launcher.log"
    launcher = start_process(ts_config.launcher_command(str(tmp_path), []), log, env)
    try:
        deadline = time.monotonic() + 30
        while not log.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(log.read_text().split()[0])
        os.kill(launcher.pid, signal.SIGTERM)
        assert launcher.wait(timeout=30) == 0  # it waited for its child, which the SIGTERM ended
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    finally:
        stop_process_group(launcher, 5)


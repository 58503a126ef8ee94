"""TorchServe: its settings' refusals, tierbench's handler run directly (every input format, and batches of mixed
requests, against the model's own outputs), the clients' request bytes as TorchServe parses them, the metrics
breakdown, the backend's skips and deploy files; then (slow) one real TorchServe hosted outside Ray, driven by the
clients and the compiled load engine, its batcher merging requests, its counters moving, nothing left running."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import json
import shlex
import socket
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiments.config.compose import load_config
from serving import torchserve_metrics as ts_metrics
from serving.backend import BackendContext, ServerHandle
from serving.clients import json_images
from serving.clients.base import ClientSpec, jpeg_batch, load_client, parse_server_timing, tensor_batch
from serving.clients.wire import grpc_message
from serving.images import decode_and_preprocess, sample_jpegs
from serving.models import preprocessing, reference_runner
from serving.node import NodeInfo
from serving.process import stop_process_group
from serving.pytorch.facts import TorchFacts
from serving.torchserve import config as ts_config
from serving.torchserve.backend import TorchServeBackend
from serving.torchserve.clients import TorchServeGrpcClient, TorchServeRestClient
from serving.torchserve.facts import TorchServeFacts
from serving.torchserve.handler import TierbenchHandler
from serving.torchserve.payloads import PREDICTIONS, BadRequest, jpeg_files
from serving.torchserve.settings import TorchServeSettings
from tests.processes import owned_environment

CFG = load_config(["model=tiny"])
TINY = CFG.model
MODEL = TINY.to_dict()
SHAPE = tuple(TINY.input_shape)
REFERENCE = reference_runner(TINY)
NODE = NodeInfo(hostname="localhost", ip="127.0.0.1", ray_node_id="", cpu_model="test", cpu_count=2)
ATOL = 1e-4


def spec(input_format: str, batch: int, url: str = "127.0.0.1:1/predictions/tiny") -> ClientSpec:
    return ClientSpec(target="", url=url, model_name="tiny", input_format=input_format, batch_size=batch,
                      input_shape=SHAPE, output_shape=(1000,))


def expected_for(images: np.ndarray) -> np.ndarray:
    return REFERENCE(np.ascontiguousarray(images))


def jpeg_reference(jpegs: list[bytes]) -> np.ndarray:
    return expected_for(decode_and_preprocess(jpegs, preprocessing(TINY)))


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


# -- the handler, run directly ---------------------------------------------------------------------------------------

class FakeMetrics:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()

    def add_counter(self, name: str, value: int, idx: Any = None, dimensions: Any = None) -> None:
        self.counters[name] += value


class FakeContext:
    """What the handler uses of TorchServe's `ts.context.Context`."""

    def __init__(self, model_dir: Path) -> None:
        self.system_properties = {"model_dir": str(model_dir), "gpu_id": None, "batch_size": 4}
        self.metrics = FakeMetrics()
        self.status: dict[int, tuple[int, str]] = {}
        self.headers: dict[int, dict[str, str]] = defaultdict(dict)

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self.status[idx] = (code, phrase)

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.headers[idx]["content-type"] = value

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self.headers[idx][key] = value


@pytest.fixture(scope="module")
def handler() -> Iterator[tuple[TierbenchHandler, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, reports = Path(tmp), Path(tmp) / "reports"
        reports.mkdir()
        variant = ts_config.TorchServeVariant(torch_threads=1, warmup_batch_sizes=(1, 2))
        config = ts_config.handler_config(MODEL, variant, str(reports))
        (model_dir / ts_config.HANDLER_CONFIG).write_text(json.dumps(config))
        instance = TierbenchHandler()
        instance.initialize(FakeContext(model_dir))
        yield instance, model_dir


def test_the_handler_warms_up_and_reports_its_device(handler) -> None:
    _, model_dir = handler
    (report,) = [json.loads(p.read_text()) for p in (model_dir / "reports").glob("worker-*.json")]
    assert report["device"] == "cpu" and report["dtype"] == "float32" and report["torch_threads"] == 1
    assert report["warmup_s"] > 0 and report["gpu_id"] is None


def test_each_format_alone_gives_the_models_outputs(handler) -> None:
    instance, model_dir = handler
    tensor = tensor_batch(spec("tensor", 3))
    jpegs = list(sample_jpegs()[:2])
    cases = [
        ({"body": bytearray(tensor.tobytes())}, expected_for(tensor), "application/octet-stream"),  # REST tensor
        ({"tensor": bytearray(tensor.tobytes())}, expected_for(tensor), "application/octet-stream"),  # gRPC tensor
        ({"image0": bytearray(jpegs[0]), "image1": bytearray(jpegs[1])}, jpeg_reference(jpegs),
         "application/octet-stream"),  # REST multipart / gRPC input keys
        ({"body": json.loads(json_images.encode_images(jpegs))}, jpeg_reference(jpegs), "application/json"),
    ]
    for request, expected, content_type in cases:
        context = FakeContext(model_dir)
        (answer,) = instance.handle([request], context)
        if content_type == "application/json":
            outputs = json_images.decode_outputs(answer)
        else:
            outputs = np.frombuffer(answer, np.float32).reshape(len(expected), 1000)
        np.testing.assert_allclose(outputs, expected, rtol=0, atol=ATOL)
        assert context.headers[0]["content-type"] == content_type and not context.status
        assert parse_server_timing(context.headers[0]["Server-Timing"]).executed_images == len(expected)


def test_one_forward_pass_serves_a_mixed_batch_and_a_bad_request_fails_alone(handler) -> None:
    instance, model_dir = handler
    tensor = tensor_batch(spec("tensor", 2))
    jpegs = list(sample_jpegs()[2:5])
    data = [{"body": bytearray(tensor.tobytes())},
            {"body": bytearray(b"\x00" * 12)},  # not a float32 image
            {"image0": bytearray(jpegs[0])},
            {"body": {"images": ["not base64!"]}},
            {"tensor": bytearray(tensor[:1].tobytes())},
            {"body": json.loads(json_images.encode_images(jpegs[1:]))}]
    context = FakeContext(model_dir)
    answers = instance.handle(data, context)
    assert len(answers) == len(data)
    assert {i: code for i, (code, _) in context.status.items()} == {1: 400, 3: 400}
    assert "not N float32 images" in json.loads(answers[1])["message"]
    assert "not base64" in json.loads(answers[3])["message"]
    np.testing.assert_allclose(np.frombuffer(answers[0], np.float32).reshape(2, 1000), expected_for(tensor), atol=ATOL)
    np.testing.assert_allclose(np.frombuffer(answers[2], np.float32).reshape(1, 1000), jpeg_reference(jpegs[:1]),
                               atol=ATOL)
    np.testing.assert_allclose(np.frombuffer(answers[4], np.float32).reshape(1, 1000), expected_for(tensor[:1]),
                               atol=ATOL)
    np.testing.assert_allclose(json_images.decode_outputs(answers[5]), jpeg_reference(jpegs[1:]), atol=ATOL)
    images = 2 + 1 + 1 + 2
    timings = {context.headers[i]["Server-Timing"] for i in (0, 2, 4, 5)}
    assert len(timings) == 1 and parse_server_timing(timings.pop()).executed_images == images  # one forward pass
    assert context.metrics.counters == {"ImagesServed": images, "ForwardPasses": 1, "RequestsServed": 4,
                                        "RequestsRejected": 2}


def test_a_batch_of_only_bad_requests_runs_nothing(handler) -> None:
    instance, model_dir = handler
    context = FakeContext(model_dir)
    answers = instance.handle([{"data": bytearray(b"x")}, {"image1": bytearray(b"x")}], context)
    assert [json.loads(a)["code"] for a in answers] == [400, 400]
    assert "expected a body" in json.loads(answers[0])["message"]
    assert context.metrics.counters == {"RequestsRejected": 2}


def test_a_worker_takes_the_gpu_torchserve_gave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from serving.torchserve.handler import worker_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [worker_device("cuda", g) for g in (0, 1, None, -1)] == ["cuda:0", "cuda:1", "cuda", "cuda"]
    assert worker_device("cpu", 0) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker_device("cuda", 0) == "cpu"


def test_jpeg_keys_are_read_in_index_order() -> None:
    request = {f"image{i}": bytearray([i]) for i in (10, 2, 0, 1, 3, 4, 5, 6, 7, 8, 9)}
    assert [f[0] for f in jpeg_files(request)] == list(range(11))
    with pytest.raises(BadRequest, match="image0..image1"):
        jpeg_files({"image0": b"a", "image2": b"b"})


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


def backend_on(node: NodeInfo = NODE, **settings: Any) -> TorchServeBackend:
    context = BackendContext(name="torchserve", model=TINY, node=node, ray_options={}, warmup_batch_sizes=(1, 4))
    return TorchServeBackend(context, TorchServeSettings(**settings))


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
    assert base64.target == "serving.clients.json_images.JsonImagesClient" and base64.url == rest.url
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


# -- a real TorchServe -----------------------------------------------------------------------------------------------

BATCH_DELAY_MS = 50  # long enough that concurrent requests surely meet in TorchServe's batcher


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[TorchServeBackend, ServerHandle, Any]]:
    from serving.torchserve.host import TorchServeHost

    problem = TorchServeFacts.probe().problem
    if problem:
        pytest.skip(f"TorchServe cannot start here: {problem}")
    backend = backend_on(batch_size=4, max_batch_delay_ms=BATCH_DELAY_MS, torch_threads=1)
    with owned_environment():  # fails if the launcher, the frontend or a worker outlives the stop
        host = TorchServeHost(MODEL, backend.variant(), "127.0.0.1")
        work_dir = host.work_dir
        try:
            info = host.start(120)
            yield backend, backend._handle(info), host
        finally:
            logs = host.stop(20)
    assert "Torchserve version: 0.12.0" in logs["ts_log.log"]
    assert not work_dir.exists()


async def _predict(backend: TorchServeBackend, handle: ServerHandle, protocol: str, input_format: str,
                   batch: int) -> tuple[Any, np.ndarray, Any]:
    client = load_client(backend.client_spec(handle, protocol, input_format, batch))
    await client.open()
    try:
        outputs, report = await client.call()
    finally:
        await client.close()
    return client, outputs, report


@pytest.mark.slow
@pytest.mark.parametrize("protocol,input_format", [("http", "tensor"), ("http", "jpeg"), ("http", "jpeg_base64"),
                                                   ("grpc", "tensor"), ("grpc", "jpeg")])
def test_every_path_gives_the_reference_outputs(server, protocol: str, input_format: str) -> None:
    backend, handle, _ = server
    client, outputs, report = asyncio.run(_predict(backend, handle, protocol, input_format, 3))
    if input_format == "tensor":
        expected = expected_for(tensor_batch(client.spec))
    else:
        expected = jpeg_reference(jpeg_batch(client.spec))
    np.testing.assert_allclose(outputs, expected, rtol=0, atol=ATOL)
    if protocol == "http":  # TorchServe's gRPC answers carry no metadata
        assert report.executed_images >= 3 and report.ms > 0


@pytest.mark.slow
def test_the_server_reports_its_start(server) -> None:
    backend, handle, host = server
    assert handle.params["device"] == "cpu" and handle.params["torchserve_workers"] == 1 and handle.on_gpu is False
    assert handle.params["server_max_batch_size"] == 4 and handle.params["torchserve_version"] == "0.12.0"
    assert handle.metrics["server_ready_s"] > 0 and handle.metrics["server_warmup_s"] > 0
    assert set(handle.artifacts) == {"tierbench.json", "config.properties", "metrics.yaml", "log4j2.xml"}
    assert host.alive()


@pytest.mark.slow
def test_the_batcher_merges_concurrent_requests_and_the_counters_move(server) -> None:
    backend, handle, host = server

    async def concurrent(protocol: str, requests: int) -> list[Any]:
        clients = [load_client(backend.client_spec(handle, protocol, "tensor", 1)) for _ in range(requests)]
        for client in clients:
            await client.open()
        try:
            return [report for _, report in await asyncio.gather(*(client.call() for client in clients))]
        finally:
            for client in clients:
                await client.close()

    def settled() -> dict[str, float]:  # the handler's counters reach the frontend a moment after its answers
        previous, deadline = host.counters(), time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = host.counters()
            if now == previous:
                return now
            previous = now
        return previous

    before = settled()
    reports = asyncio.run(concurrent("http", 8))
    after_rest = settled()
    assert max(r.executed_images for r in reports) > 1, f"no request rode with another: {reports}"
    assert ts_metrics.served_images(before, after_rest) == 8
    rest = backend.server_breakdown(before, after_rest)
    assert rest["server_requests"] == 8 and rest["server_request_ms"] > 0 and rest["server_batch_avg"] > 1
    asyncio.run(concurrent("grpc", 4))
    after_grpc = settled()
    grpc = backend.server_breakdown(after_rest, after_grpc)
    assert grpc["server_requests"] == 4 and "server_request_ms" not in grpc  # gRPC adds nothing to the REST sums
    assert backend.served_images(after_rest, after_grpc) == 4


def _http_exchange(host: str, port: int, request: bytes) -> tuple[int, bytes]:
    """Send pre-built request bytes over a plain socket; the status and body of the answer."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
        while len(body) < length:
            body += sock.recv(65536)
    return int(lines[0].split()[1]), body


def _engine_first_response(wire: Any, folder: Path) -> bytes:
    """Run the compiled load engine with `wire` for a moment (one closed loop); the first response it saved."""
    import signal

    from experiments.measure.engine.build import engine_binary

    (folder / "request.bin").write_bytes(wire.payload)
    args = [str(engine_binary()), f"--{wire.protocol}", wire.host, str(wire.port), "--request",
            str(folder / "request.bin"), "--first-response", str(folder / "first.bin"), "--closed", "1"]
    if wire.headers:
        (folder / "headers.txt").write_text("".join(f"{k}: {v}\n" for k, v in wire.headers))
        args += ["--headers", str(folder / "headers.txt")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=1.5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert (folder / "first.bin").exists(), f"the engine got no response: {err.decode()[-2000:]}"
    return (folder / "first.bin").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("protocol,input_format", [("http", "tensor"), ("http", "jpeg"), ("grpc", "jpeg")])
def test_the_wire_bytes_get_valid_answers(server, tmp_path: Path, protocol: str, input_format: str) -> None:
    from experiments.measure.engine.build import engine_status

    backend, handle, _ = server
    client = load_client(backend.client_spec(handle, protocol, input_format, 2))
    wire = client.wire_request()
    if protocol == "http":
        status, body = _http_exchange(wire.host, wire.port, wire.payload)
        assert status == 200, body[:300]
        client.check_wire_response(body)
    if not engine_status().available:
        pytest.skip(f"the compiled load engine does not build here: {engine_status().problem}")
    client.check_wire_response(_engine_first_response(wire, tmp_path))


@pytest.mark.slow
def test_a_bad_request_gets_400_and_the_server_goes_on(server) -> None:
    import grpc

    from serving.clients.http1 import build_request
    from serving.torchserve.proto import inference_pb2

    backend, handle, _ = server
    url = f"{handle.urls['http']}/predictions/tiny"

    request = build_request("POST", url, b"\x00" * 12, {"Content-Type": "application/octet-stream"})
    status, body = _http_exchange("127.0.0.1", int(handle.urls["http"].rsplit(":", 1)[1]), request)
    assert status == 400 and "not N float32 images" in json.loads(body)["message"]
    client = load_client(backend.client_spec(handle, "grpc", "tensor", 1))
    bad = inference_pb2.PredictionsRequest(model_name="tiny", input={"tensor": b"\x00" * 12}).SerializeToString()
    with grpc.insecure_channel(handle.urls["grpc"]) as channel:  # TorchServe's gRPC: status OK, the error as data
        answer = channel.unary_unary(PREDICTIONS, response_deserializer=inference_pb2.PredictionResponse.FromString)(
            bad, timeout=30)
    assert json.loads(answer.prediction)["code"] == 400
    with pytest.raises(RuntimeError, match="not N float32 images"):
        client.outputs(answer.prediction)
    _, outputs, _ = asyncio.run(_predict(backend, handle, "http", "tensor", 1))
    assert outputs.shape == (1, 1000)

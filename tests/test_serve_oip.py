"""Ray Serve speaks the Open Inference Protocol (KServe v2) as Triton does: tritonclient's own HTTP and gRPC clients,
perf_analyzer and the compiled load engine drive a real Serve app of the tiny model, and get the logits the route
from before the OIP returns. The protocol's parsing and encoding are checked without a server first."""

from __future__ import annotations

import asyncio
import base64
import csv
import json
import struct
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from experiments.config.compose import load_config
from serving.clients.base import ClientSpec, jpeg_batch, tensor_batch
from serving.oip import protocol as oip
from serving.oip.protocol import OipError

TINY = load_config(["model=tiny"]).model
MODELS = oip.model_signatures(TINY)
TENSOR, JPEG = MODELS["tensor"], MODELS["jpeg"]
SPEC = ClientSpec(target="", url="127.0.0.1:1/route", model_name="tiny", input_format="tensor", batch_size=3,
                  input_shape=(3, 224, 224), output_shape=(1000,))
JPEG_SPEC = ClientSpec(target="", url="127.0.0.1:1/route", model_name="tiny_jpeg", input_format="jpeg", batch_size=3,
                       input_shape=(3, 224, 224), output_shape=(1000,), input_name="jpeg")


def _http_body(spec: ClientSpec) -> tuple[bytes, str]:
    """The body and Inference-Header-Content-Length the Serve HTTP client sends (tritonclient's own encoder)."""
    from serving.ray_serve.clients import RayServeHttpClient

    request = RayServeHttpClient(spec).wire_request().payload
    head, _, body = request.partition(b"\r\n\r\n")
    length = next(line.split(b": ")[1] for line in head.split(b"\r\n") if line.startswith(oip.HEADER_LENGTH.encode()))
    return body, length.decode()


def test_the_models_are_named_and_shaped_as_tritons() -> None:
    from serving.triton.ensemble import JPEG_INPUT, ensemble_model_name

    assert (TENSOR.name, TENSOR.input_name, TENSOR.datatype, TENSOR.dims) == ("tiny", "input", "FP32", (3, 224, 224))
    assert (JPEG.name, JPEG.input_name, JPEG.datatype, JPEG.dims) == (ensemble_model_name("tiny"), JPEG_INPUT, "BYTES",
                                                                      (1,))
    assert TENSOR.config() == {"name": "tiny", "platform": "pytorch", "max_batch_size": 32,
                               "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, 224, 224]}],
                               "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [1000]}]}
    assert JPEG.metadata()["inputs"] == [{"name": "jpeg", "datatype": "BYTES", "shape": [-1, 1]}]
    assert JPEG.config_pb().config.input[0].dims == [1]


def test_a_binary_request_decodes_to_the_clients_tensor_and_jpegs() -> None:
    body, length = _http_body(SPEC)
    np.testing.assert_array_equal(TENSOR.batch(oip.parse_http(body, length)), tensor_batch(SPEC))
    body, length = _http_body(JPEG_SPEC)
    assert JPEG.batch(oip.parse_http(body, length)) == list(jpeg_batch(JPEG_SPEC))


def test_a_grpc_request_decodes_to_the_clients_tensor_and_jpegs() -> None:
    from tritonclient.grpc import service_pb2 as pb

    from serving.ray_serve.clients import RayServeGrpcClient

    for spec, model in ((SPEC, TENSOR), (JPEG_SPEC, JPEG)):
        client = RayServeGrpcClient(spec)
        batch = model.batch(oip.parse_grpc(pb.ModelInferRequest.FromString(client._request_bytes(client.pool[0]))))
        if model is JPEG:
            assert batch == list(jpeg_batch(spec))
        else:
            np.testing.assert_array_equal(batch, tensor_batch(spec))
    typed = pb.ModelInferRequest(inputs=[pb.ModelInferRequest.InferInputTensor(
        name="input", datatype="FP32", shape=[1, 3, 224, 224],
        contents=pb.InferTensorContents(fp32_contents=np.ones(3 * 224 * 224).tolist()))])
    assert TENSOR.batch(oip.parse_grpc(typed)).shape == (1, 3, 224, 224)


def test_json_tensors_and_json_responses() -> None:
    data = np.arange(2 * 3 * 224 * 224, dtype=np.float32).reshape(2, 3, 224, 224)
    body = json.dumps({"id": "7", "inputs": [{"name": "input", "datatype": "FP32", "shape": list(data.shape),
                                              "data": data.ravel().tolist()}]}).encode()
    request = oip.parse_http(body, None)
    assert not request.binary_output and request.outputs == ()
    np.testing.assert_array_equal(TENSOR.batch(request), data)
    logits = np.arange(2000, dtype=np.float32).reshape(2, 1000)
    answer, headers = oip.http_response(TENSOR, logits, request)
    reply = json.loads(answer)
    assert headers == {"Content-Type": "application/json"} and reply["id"] == "7"
    assert reply["outputs"][0]["shape"] == [2, 1000] and reply["outputs"][0]["data"] == logits.ravel().tolist()


def test_a_binary_response_reads_back_with_the_triton_clients_parser() -> None:
    from serving.oip.clients import binary_output

    body, length = _http_body(SPEC)
    logits = np.random.default_rng(1).standard_normal((3, 1000), dtype=np.float32)
    answer, headers = oip.http_response(TENSOR, logits, oip.parse_http(body, length))
    np.testing.assert_array_equal(binary_output(answer, headers[oip.HEADER_LENGTH], "logits"), logits)


@pytest.mark.parametrize(("change", "message"), [
    (lambda h: h["inputs"][0].update(shape=[3, 3, 224, 223]), r"Expected \[-1, 3, 224, 224\], got \[3, 3, 224, 223\]"),
    (lambda h: h["inputs"][0].update(shape=[33, 3, 224, 224]), "batch-size must be <= 32"),
    (lambda h: h["inputs"][0].update(name="image"), "takes one input 'input'"),
    (lambda h: h["inputs"][0].update(datatype="FP16"), "is FP32, the request sent FP16"),
    (lambda h: h["inputs"][0]["parameters"].update(binary_data_size=10), "bytes of binary data after the inputs"),
    (lambda h: h["outputs"][0].update(name="probabilities"), r"no output \['probabilities'\]"),
], ids=["shape", "batch_size", "input_name", "datatype", "binary_data_size", "output_name"])
def test_bad_requests_are_refused_with_the_reason(change: Any, message: str) -> None:
    body, length = _http_body(SPEC)
    header = json.loads(body[:int(length)])
    change(header)
    head = json.dumps(header).encode()
    with pytest.raises(OipError, match=message) as refused:
        TENSOR.batch(oip.parse_http(head + body[int(length):], str(len(head))))
    assert refused.value.status == 400


def test_routes() -> None:
    assert oip.route("GET", "/v2") == ("server_metadata", None)
    assert oip.route("GET", "/v2/health/ready") == ("ready", None)
    assert oip.route("GET", "/v2/models/tiny_jpeg/versions/1/config") == ("config", "tiny_jpeg")
    assert oip.route("POST", "/v2/models/tiny/infer") == ("infer", "tiny")
    for method, path in (("GET", "/v2/models/tiny/infer"), ("GET", "/v2/models/tiny/versions/2"), ("GET", "/v2/x")):
        with pytest.raises(OipError) as refused:
            oip.route(method, path)
        assert refused.value.status == 404


# A real Serve app of the tiny model --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def serve_app() -> Iterator[dict[str, Any]]:
    import ray

    from experiments.cluster.connection import ray_cluster
    from experiments.cluster.tiers import placement_options
    from experiments.measure.client_actor import ClientPool
    from experiments.run.server_group import build_backend
    from serving.probe import describe_node

    cfg = load_config(["model=tiny", "experiment.backends=[pytorch]", "experiment.batch_sizes=[1]",
                       "experiment.window_s=0.5", "experiment.warmup_s=0.2", "experiment.stability.windows=1",
                       "experiment.load_engine=compiled"])
    with ray_cluster(cfg.cluster, "local"):
        options = placement_options("local")
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote())
        backend = build_backend(cfg, "pytorch", node, options)
        handle = backend.start()
        clients = None
        try:
            clients = ClientPool(cfg.experiment, options, 120).start()
            yield {"cfg": cfg, "backend": backend, "handle": handle, "node": node, "clients": clients,
                   "http": handle.urls["http"], "grpc": handle.urls["grpc"], "app": backend.app_name}
        finally:
            if clients is not None:
                clients.close()
            backend.stop()


def _old_route(url: str, spec: ClientSpec) -> np.ndarray:
    """The logits of the route from before the OIP (POST to the route prefix) for the payload of `spec`."""
    from serving.ray_serve.clients import encode_request

    body, headers = encode_request(spec)
    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=60) as response:
        return np.frombuffer(response.read(), dtype=np.float32).reshape(spec.batch_size, -1)


def _inputs(module: Any, spec: ClientSpec, **binary: bool) -> list[Any]:
    if spec.input_format == "jpeg":
        data = np.array(jpeg_batch(spec), dtype=np.object_).reshape(-1, 1)
        infer_input = module.InferInput("jpeg", list(data.shape), "BYTES")
    else:
        data = tensor_batch(spec)
        infer_input = module.InferInput("input", list(data.shape), "FP32")
    infer_input.set_data_from_numpy(data, **binary)
    return [infer_input]


@pytest.mark.slow
def test_tritonclient_http_reads_metadata_and_config_and_infers(serve_app) -> None:
    import tritonclient.http as http

    client = http.InferenceServerClient(serve_app["http"].removeprefix("http://"))  # host:port/<route prefix>
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("tiny_jpeg")
    assert client.get_model_metadata("tiny") == TENSOR.metadata()
    assert client.get_model_config("tiny_jpeg") == JPEG.config()
    for spec in (SPEC, JPEG_SPEC):
        expected = _old_route(serve_app["http"], spec)
        binary = client.infer(spec.model_name, _inputs(http, spec, binary_data=True),
                              outputs=[http.InferRequestedOutput("logits", binary_data=True)])
        np.testing.assert_array_equal(binary.as_numpy("logits"), expected)
        if spec is SPEC:  # JSON tensors in and out
            as_json = client.infer("tiny", _inputs(http, spec, binary_data=False),
                                   outputs=[http.InferRequestedOutput("logits", binary_data=False)])
            np.testing.assert_allclose(as_json.as_numpy("logits"), expected, rtol=1e-6)


@pytest.mark.slow
def test_tritonclient_grpc_reads_metadata_and_config_and_infers(serve_app) -> None:
    import tritonclient.grpc as grpc

    headers = {"application": serve_app["app"]}
    client = grpc.InferenceServerClient(serve_app["grpc"])
    assert client.is_server_live(headers=headers) and client.is_model_ready("tiny", headers=headers)
    assert client.get_model_metadata("tiny_jpeg", headers=headers) == JPEG.metadata_pb()
    assert client.get_model_config("tiny", headers=headers) == TENSOR.config_pb()
    for spec in (SPEC, JPEG_SPEC):
        result = client.infer(spec.model_name, _inputs(grpc, spec), headers=headers)
        np.testing.assert_array_equal(result.as_numpy("logits"), _old_route(serve_app["http"], spec))
    client.close()


@pytest.mark.slow
def test_bad_input_is_a_400_with_the_reason_and_an_unknown_model_a_404(serve_app) -> None:
    import grpc
    import tritonclient.grpc as tgrpc
    from tritonclient.utils import InferenceServerException

    base = serve_app["http"]
    bad = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 2, 2], "data": [0] * 12}]})
    for path, body, status, message in (("/v2/models/tiny/infer", bad, 400, "unexpected shape"),
                                        ("/v2/models/tiny/infer", "{not json", 400, "failed to parse"),
                                        ("/v2/models/tiny_jpeg/infer", bad, 400, "takes one input 'jpeg'"),
                                        ("/v2/models/resnet50/infer", bad, 404, "unknown model: 'resnet50'")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(base + path, data=body.encode()), timeout=60)
        assert refused.value.code == status
        assert message in json.loads(refused.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base + "/v2/models/resnet50", timeout=60)
    assert refused.value.code == 404

    jpegs = tgrpc.InferInput("jpeg", [1, 1], "BYTES")
    jpegs.set_data_from_numpy(np.array([[b"not a jpeg"]], dtype=np.object_))
    client = tgrpc.InferenceServerClient(serve_app["grpc"])
    headers = {"application": serve_app["app"]}
    for model, status, message in (("tiny_jpeg", grpc.StatusCode.INVALID_ARGUMENT, "cannot decode"),
                                   ("resnet50", grpc.StatusCode.NOT_FOUND, "unknown model")):
        with pytest.raises(InferenceServerException, match=message) as refused:
            client.infer(model, [jpegs], headers=headers)
        assert refused.value.status() == str(status)
    client.close()


@pytest.mark.slow
def test_the_serve_clients_get_the_logits_and_the_replicas_server_timing(serve_app) -> None:
    from serving.clients.base import load_client

    backend, handle = serve_app["backend"], serve_app["handle"]

    async def call(spec: ClientSpec) -> tuple[np.ndarray, Any]:
        client = load_client(spec)
        await client.open()
        try:
            return await client.call()
        finally:
            await client.close()

    for protocol in ("http", "grpc"):
        for input_format in ("tensor", "jpeg"):
            spec = backend.client_spec(handle, protocol, input_format, 2)
            assert spec.model_name == {"tensor": "tiny", "jpeg": "tiny_jpeg"}[input_format]
            assert type(load_client(spec)).wire_unsupported(spec) is None
            logits, report = asyncio.run(call(spec))
            np.testing.assert_array_equal(logits, _old_route(serve_app["http"], spec))
            assert report is not None and report.ms > 0 and report.executed_images == 2, (protocol, report)


def _perf_analyzer(url: str, protocol: str, tmp_path: Any, model: str = "tiny", *extra: str) -> dict[str, str]:
    """A short perf_analyzer run at concurrency 1: its CSV row. Measurement windows that never agree on a busy
    2-core machine get more trials, then a looser threshold (as benchmarks/load_tools.py relaxes it), then any:
    these tests check that perf_analyzer drives the server, not its figures (another test shares the cores)."""
    from benchmarks.load_tools import perf_analyzer_env

    try:
        binary, env = perf_analyzer_env()
    except (SystemExit, ImportError, StopIteration) as exc:
        pytest.skip(f"perf_analyzer cannot start here: {exc!r}")
    out = tmp_path / f"{protocol}_{model}.csv"
    for stability, trials in (("50", "4"), ("50", "10"), ("100", "10"), ("1000", "10")):
        cmd = [binary, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", "1:1", "--measurement-interval",
               "1000", "--stability-percentage", stability, "--max-trials", trials, "-f", str(out), *extra]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0 or "stable measurement" not in proc.stdout + proc.stderr:  # perf_analyzer: stderr
            break
    assert proc.returncode == 0, f"perf_analyzer over {protocol}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    (row,) = list(csv.DictReader(out.open()))
    return row


@pytest.mark.slow
def test_perf_analyzer_drives_serve_over_http_and_grpc(serve_app, tmp_path) -> None:
    """perf_analyzer sends no `application` metadata: over gRPC it reaches Serve only while one app is deployed,
    as here."""
    http_row = _perf_analyzer(serve_app["http"].removeprefix("http://"), "http", tmp_path)
    assert float(http_row["Inferences/Second"]) > 0
    grpc_row = _perf_analyzer(serve_app["grpc"], "grpc", tmp_path)
    assert float(grpc_row["Inferences/Second"]) > 0
    # The JPEG model, with a real JPEG: perf_analyzer takes a BYTES tensor's `b64` as its serialized form (each
    # element's 4-byte little-endian length, then its bytes).
    jpeg = jpeg_batch(JPEG_SPEC)[0]
    serialized = base64.b64encode(struct.pack("<I", len(jpeg)) + jpeg).decode()
    data = tmp_path / "jpeg.json"
    data.write_text(json.dumps({"data": [{"jpeg": {"b64": serialized}}]}))
    jpeg_row = _perf_analyzer(serve_app["http"].removeprefix("http://"), "http", tmp_path, "tiny_jpeg",
                              "--input-data", str(data))
    assert float(jpeg_row["Inferences/Second"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_compiled_engine_measures_serve(serve_app, protocol) -> None:
    from experiments.measure.engine.build import engine_status
    from experiments.plan import planned_trial
    from experiments.run.trial import run_trial

    status = engine_status()
    if not status.available or (protocol == "grpc" and not status.http2):
        pytest.skip(f"the compiled engine cannot send {protocol} here: {status.describe()}")
    cfg = serve_app["cfg"]
    assert cfg.experiment.load_engine == "compiled"
    for input_format in ("tensor", "jpeg"):
        trial = planned_trial(cfg, "pytorch", protocol, input_format, 1, 1)
        record = run_trial(cfg, trial, serve_app["backend"], serve_app["handle"], serve_app["node"],
                           serve_app["clients"])
        assert record.status == "ok", record.reason
        assert record.params["load_engine"] == "compiled", record.params
        assert record.metrics["throughput_img_s"] > 0
        assert record.metrics["server_batch_avg"] == pytest.approx(1.0)  # the replica's Server-Timing came back


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_an_endpoint_measures_the_serve_app_over_grpc_with_its_application_metadata(serve_app, engine) -> None:
    """Serve's gRPC proxy routes by `application` (with one app deployed, as here, it takes any: Ray's proxy
    router): an endpoint naming the app in `grpc_metadata` is measured over gRPC by either engine, the metadata
    among the call's headers."""
    from experiments.cluster.tiers import placement_options
    from experiments.measure.client_actor import ClientPool
    from experiments.plan import planned_trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    cfg = load_config(["model=tiny", "experiment.backends=[endpoint]", f"backends.endpoint.url={serve_app['http']}",
                       f"backends.endpoint.grpc_url={serve_app['grpc']}",
                       f"+backends.endpoint.grpc_metadata.application={serve_app['app']}",
                       "experiment.batch_sizes=[1]", "experiment.window_s=0.5", "experiment.warmup_s=0.2",
                       "experiment.stability.windows=1", f"experiment.load_engine={engine}"])
    options = placement_options("local")
    backend = build_backend(cfg, "endpoint", serve_app["node"], options)
    handle = backend.start()
    assert backend.client_spec(handle, "grpc", "tensor", 1).grpc_metadata == (("application", serve_app["app"]),)
    clients = ClientPool(cfg.experiment, options, 120).start()
    try:
        record = run_trial(cfg, planned_trial(cfg, "endpoint", "grpc", "tensor", 1, 1), backend, handle,
                           serve_app["node"], clients)
    finally:
        clients.close()
    assert record.status == "ok", record.reason
    assert record.params["load_engine"] == engine and record.metrics["throughput_img_s"] > 0

"""Endpoints, servers tierbench did not start (serving/endpoint/), against stand-ins on loopback, in-process: what the
probe says (unreachable, 401/403, 404, not OIP, wrong tensors, TLS), what the clients send (bearer token, TLS,
Host), Triton's metrics when given, and an endpoint of another tier skipped."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.run.server_group import build_backend
from serving.clients.base import ClientSpec, auth_headers, bearer_token, tls_context
from serving.endpoint.probe import RTT_REQUESTS, EndpointError, OipModel, metadata_problem, oip_model, round_trip_ms
from tests.endpoint_helpers import (
    ENDPOINT,
    GRPC_CLIENT,
    HTTP_CLIENT,
    TOKEN_ENV,
    URL,
    accepted,
    endpoint_backend,
    oip_spec,
    refusal,
)
from tests.endpoint_stubs import BearerAuth, StubOip, ThreadedServer, closed_port, self_signed_cert, tiny_metadata
from tests.helpers import CPU_NODE

# ------------------------------------------------------------------ the probe, against stand-ins


@pytest.fixture
def stub() -> Iterator[StubOip]:
    """The tiny model's metadata, over plain HTTP; a test sets `stub.status` / `stub.body`."""
    app = StubOip()
    with ThreadedServer(app) as server:
        app.url = server.url
        yield app


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_stub(certificate: tuple[Path, Path]) -> Iterator[StubOip]:
    app = StubOip()
    with ThreadedServer(app, *certificate) as server:
        app.url = server.url
        yield app


def test_an_unreachable_endpoint_names_the_url_setting() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.url: cannot reach .*refused"):
        oip_model(url, oip_spec(), "endpoint", 5)
    with pytest.raises(EndpointError, match=r"backends\.endpoint\.url"):
        endpoint_backend(url).start()


@pytest.mark.slow
@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_say_how_to_give_a_token(stub: StubOip, status: int) -> None:
    stub.status = status
    with pytest.raises(EndpointError) as info:
        oip_model(stub.url, oip_spec(), "endpoint", 5)
    message = str(info.value)
    assert f"answered {status}" in message and "backends.endpoint.token_env=VARIABLE" in message


@pytest.mark.slow
@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_with_a_token_name_its_variable_never_the_token(stub: StubOip, status: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    monkeypatch.setenv(TOKEN_ENV, token)
    stub.status = status
    with pytest.raises(EndpointError) as info:
        oip_model(stub.url, oip_spec(token_env=TOKEN_ENV), "endpoint", 5)
    message = str(info.value)
    assert f"${TOKEN_ENV} (backends.endpoint.token_env)" in message and token not in message
    assert stub.seen == [("/v2/models/tiny", f"Bearer {token}")], "the token went in the header"


@pytest.mark.slow
def test_404_names_model_name(stub: StubOip) -> None:
    with pytest.raises(EndpointError, match=r"backends\.endpoint\.model_name='resnet50'.*404.*model_name=NAME"):
        oip_model(stub.url, oip_spec(model="resnet50"), "endpoint", 5)
    # through the backend: model.name unless model_name says otherwise
    with pytest.raises(EndpointError, match=r"backends\.endpoint\.model_name='resnet50'"):
        endpoint_backend(stub.url, "backends.endpoint.model_name=resnet50").start()


@pytest.mark.parametrize("body", [b"<html>it works</html>", b'{"name": "tiny"}', b'{"inputs": [], "outputs": []}',
                                  b'{"inputs": [{"name": "x"}], "outputs": [{"name": "y"}]}'])
@pytest.mark.slow
def test_a_200_that_is_not_oip_metadata(stub: StubOip, body: bytes) -> None:
    stub.body = body
    with pytest.raises(EndpointError, match=r"answered 200 but not with Open Inference Protocol model metadata.*"
                                            r"backends\.endpoint\.kind"):
        oip_model(stub.url, oip_spec(), "endpoint", 5)


@pytest.mark.slow
def test_another_status_asks_whether_it_speaks_oip(stub: StubOip) -> None:
    stub.status, stub.body = 500, b"boom"
    with pytest.raises(EndpointError, match=r"answered HTTP 500 \(\"?'?boom.*backends\.endpoint\.kind=oip"):
        oip_model(stub.url, oip_spec(), "endpoint", 5)


def test_a_url_at_the_grpc_port_names_the_url_setting() -> None:
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(EndpointError, match=r"backends\.endpoint\.url"):
            oip_model(f"http://127.0.0.1:{port}", oip_spec(), "endpoint", 5)
    finally:
        server.stop(0)


def _meta(datatype: str = "FP32", shape: tuple[int, ...] = (-1, 3, 224, 224), output: str = "FP32") -> OipModel:
    return OipModel("tiny", "onnxruntime_onnx", ("1",), "input", datatype, shape, "logits", output)


def test_metadata_with_the_wrong_datatype_or_shape() -> None:
    assert metadata_problem(_meta(), (3, 224, 224), "endpoint") is None
    assert metadata_problem(_meta(shape=(3, 224, 224)), (3, 224, 224), "endpoint") is None  # no batch dimension
    assert metadata_problem(_meta(shape=(-1, -1, -1, -1)), (3, 224, 224), "endpoint") is None  # variable dims
    int8 = metadata_problem(_meta("INT8"), (3, 224, 224), "endpoint")
    assert int8 and "backends.endpoint" in int8 and "INT8" in int8 and "FP32" in int8
    fp16_out = metadata_problem(_meta(output="FP16"), (3, 224, 224), "endpoint")
    assert fp16_out and "FP16" in fp16_out and "'logits'" in fp16_out
    for shape in [(-1, 3, 299, 299), (-1, 1, 224, 224), (-1, 3, 224), (-1, 3, 224, 224, 1)]:
        problem = metadata_problem(_meta(shape=shape), (3, 224, 224), "endpoint")
        assert problem and "model.input_shape is [3, 224, 224]" in problem and str(list(shape)) in problem, shape


def test_a_bytes_input_takes_jpeg_files_and_the_sweep_must_send_only_those() -> None:
    jpeg_model = _meta("BYTES", (-1, 1))
    assert metadata_problem(jpeg_model, (3, 224, 224), "endpoint", ("jpeg",)) is None
    mixed = metadata_problem(jpeg_model, (3, 224, 224), "endpoint", ("tensor", "jpeg"))
    assert mixed and "which is input format jpeg; the sweep also sends tensor" in mixed
    assert "experiment.input_formats=[jpeg]" in mixed
    tensor_only = metadata_problem(_meta(), (3, 224, 224), "endpoint", ("jpeg",))
    assert tensor_only and "experiment.input_formats=[tensor]" in tensor_only
    wide = metadata_problem(_meta("BYTES", (-1, 3)), (3, 224, 224), "endpoint", ("jpeg",))
    assert wide and "one JPEG per image, [batch, 1]" in wide


@pytest.mark.slow
def test_start_takes_a_jpeg_model_when_the_sweep_sends_jpeg(stub: StubOip) -> None:
    stub.body = json.dumps({**tiny_metadata(), "inputs": [{"name": "images", "datatype": "BYTES",
                                                           "shape": [-1, 1]}]}).encode()
    backend = endpoint_backend(stub.url, "experiment.input_formats=[jpeg]")
    handle = backend.start()
    spec = backend.client_spec(handle, "http", "jpeg", 2)
    assert spec.input_name == "images" and spec.target == HTTP_CLIENT
    with pytest.raises(EndpointError, match=r"the sweep also sends tensor"):
        endpoint_backend(stub.url, "experiment.input_formats=[tensor,jpeg]").start()


@pytest.mark.slow
def test_start_refuses_a_model_with_other_tensors(stub: StubOip) -> None:
    stub.body = json.dumps(tiny_metadata(shape=(-1, 3, 299, 299))).encode()
    with pytest.raises(EndpointError, match=r"model\.input_shape"):
        endpoint_backend(stub.url).start()
    stub.body = json.dumps(tiny_metadata(datatype="UINT8")).encode()
    with pytest.raises(EndpointError, match=r"UINT8"):
        endpoint_backend(stub.url).start()


@pytest.mark.slow
def test_start_checks_and_times_the_endpoint_and_starts_nothing(stub: StubOip) -> None:
    backend = endpoint_backend(stub.url)
    handle = backend.start()
    assert handle.server_mode == "endpoint" and handle.remote and handle.urls == {"http": stub.url}
    assert handle.params["endpoint_url"] == stub.url and handle.params["endpoint_model"] == "tiny"
    assert handle.params["endpoint_platform"] == "onnxruntime_onnx"
    assert handle.params["endpoint_authenticated"] is False and handle.params["endpoint_tls"] is False
    rtt = handle.metrics["endpoint_rtt_p50_ms"]
    assert isinstance(rtt, float) and 0 < rtt < 1000
    health = [path for path, _ in stub.seen if path == "/v2/health/ready"]
    assert len(health) == RTT_REQUESTS + 1, "the first opens the connection and is not timed"
    assert backend.stop() == {} and backend.gpu_tier_reason() is None


@pytest.mark.slow
def test_round_trip_is_a_positive_float_and_carries_the_token(stub: StubOip, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "rtt-token")
    rtt = round_trip_ms(stub.url, oip_spec(token_env=TOKEN_ENV), "endpoint", 5, requests=5)
    assert isinstance(rtt, float) and rtt > 0
    assert stub.seen == [("/v2/health/ready", "Bearer rtt-token")] * 6


def test_round_trip_to_a_server_gone_names_the_url_setting() -> None:
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.url: timing the round trip"):
        round_trip_ms(f"http://127.0.0.1:{closed_port()}", oip_spec(), "endpoint", 5)


@pytest.mark.slow
def test_tls_unverified_names_ca_file_and_verified_with_it(tls_stub: StubOip, certificate) -> None:
    cert, _ = certificate
    with pytest.raises(EndpointError, match=r"backends\.endpoint\.url: the TLS handshake .*"
                                            r"backends\.endpoint\.ca_file=PATH"):
        oip_model(tls_stub.url, oip_spec(tls=True), "endpoint", 5)
    verified = oip_spec(tls=True, ca_file=str(cert))
    assert oip_model(tls_stub.url, verified, "endpoint", 5).input_shape == (-1, 3, 224, 224)
    assert round_trip_ms(tls_stub.url, verified, "endpoint", 5, requests=3) > 0
    # through the backend, without the CA: the same advice
    with pytest.raises(EndpointError, match=r"backends\.endpoint\.ca_file"):
        endpoint_backend(tls_stub.url).start()


@pytest.mark.slow
def test_start_verifies_tls_with_the_ca_file(tls_stub: StubOip, certificate) -> None:
    """(fixed in ca27dd8: the checks before the trials ignored ca_file)"""
    cert, _ = certificate
    handle = endpoint_backend(tls_stub.url, f"backends.endpoint.ca_file={cert}").start()
    assert handle.params["endpoint_tls"] is True and handle.metrics["endpoint_rtt_p50_ms"] > 0


@pytest.mark.slow
def test_start_sends_the_token_and_names_its_variable_when_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks before the trials connect as the trials do (fixed in ca27dd8: they sent no token)."""
    monkeypatch.setenv(TOKEN_ENV, "probe-token")
    guarded = BearerAuth(StubOip(), TOKEN_ENV)
    with ThreadedServer(guarded) as server:
        handle = endpoint_backend(server.url, f"backends.endpoint.token_env={TOKEN_ENV}").start()
        assert handle.params["endpoint_authenticated"] is True
        assert guarded.counts == {"authorized": 1 + RTT_REQUESTS + 1, "missing": 0, "wrong": 0}
        monkeypatch.setenv(TOKEN_ENV, "stale-token")
        with pytest.raises(EndpointError) as info:
            endpoint_backend(server.url, f"backends.endpoint.token_env={TOKEN_ENV}").start()
    message = str(info.value)
    assert "answered 403 (forbidden)" in message and f"${TOKEN_ENV}" in message
    assert "stale-token" not in message and "probe-token" not in message


# ------------------------------------------------------------------ the clients


def test_bearer_token_names_the_variable_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert bearer_token(oip_spec()) is None and auth_headers(oip_spec()) == {}
    with pytest.raises(RuntimeError, match=f"the environment variable {TOKEN_ENV} .* is not set"):
        bearer_token(oip_spec(token_env=TOKEN_ENV))
    monkeypatch.setenv(TOKEN_ENV, "")
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        auth_headers(oip_spec(token_env=TOKEN_ENV))
    monkeypatch.setenv(TOKEN_ENV, "abc")
    assert auth_headers(oip_spec(token_env=TOKEN_ENV)) == {"Authorization": "Bearer abc"}


def test_a_tls_spec_is_verified_and_kept_from_the_compiled_engine(certificate) -> None:
    from experiments.config.choices import LoadEngine
    from experiments.measure.engine.build import EngineStatus
    from experiments.measure.engine.choice import EngineRefused, choose_engine
    from serving.oip.clients import OipGrpcClient, OipHttpClient

    assert tls_context(oip_spec()) is None
    context = tls_context(oip_spec(tls=True))
    assert context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname
    cert, _ = certificate
    assert len(tls_context(oip_spec(tls=True, ca_file=str(cert))).get_ca_certs()) == 1
    tls = oip_spec(tls=True)
    assert OipHttpClient.wire_unsupported(oip_spec()) is None
    for client in (OipHttpClient, OipGrpcClient):
        assert "TLS" in client.wire_unsupported(replace(tls, target=f"serving.oip.clients.{client.__name__}"))
    status = EngineStatus(binary="/bin/loadgen", http2=True)
    engine, why = choose_engine("auto", tls, "http", status)
    assert engine is LoadEngine.PYTHON and "TLS" in why
    assert choose_engine("auto", oip_spec(), "http", status) == (LoadEngine.COMPILED, "")
    with pytest.raises(EngineRefused, match="TLS"):
        choose_engine("compiled", tls, "http", status)


def test_the_host_header_never_carries_user_info() -> None:
    from serving.clients.http1 import build_request

    for url, host in [("http://alice:s3cret@10.0.0.5:8000/v2/models/tiny/infer", "10.0.0.5:8000"),
                      ("http://alice@10.0.0.5/v2", "10.0.0.5"), ("https://u:p@[::1]:8443/x", "[::1]:8443"),
                      ("http://10.0.0.5:8000/v2", "10.0.0.5:8000")]:
        head = build_request("POST", url, b"{}", {"Content-Type": "application/json"}).split(b"\r\n\r\n")[0]
        assert f"\r\nHost: {host}\r\n".encode() in head, head
        assert b"s3cret" not in head and b"alice" not in head


@pytest.mark.slow
def test_the_python_client_speaks_tls_verified_against_ca_file(tls_stub: StubOip, certificate) -> None:
    import ssl

    from serving.clients.http1 import Http1Client, build_request
    from serving.oip.clients import OipHttpClient

    cert, _ = certificate
    assert OipHttpClient(oip_spec("127.0.0.1:1", tls=True)).url == "https://127.0.0.1:1/v2/models/tiny/infer"
    assert OipHttpClient(oip_spec("127.0.0.1:1")).url == "http://127.0.0.1:1/v2/models/tiny/infer"
    request = build_request("GET", f"{tls_stub.url}/v2/health/ready", b"", {})

    async def get(spec: ClientSpec) -> int:
        client = Http1Client(tls_stub.url, 5, tls_context(spec))
        try:
            return (await client.send(request)).status
        finally:
            await client.close()

    assert asyncio.run(get(oip_spec(tls=True, ca_file=str(cert)))) == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(get(oip_spec(tls=True)))


def test_the_backends_client_specs_carry_tls_and_the_variable_never_the_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "never-in-a-spec")
    backend = endpoint_backend("https://10.0.0.5:8443", "backends.endpoint.grpc_url=10.0.0.5:8001",
                        f"backends.endpoint.token_env={TOKEN_ENV}", "backends.endpoint.ca_file=/etc/ca.pem",
                        "backends.endpoint.model_name=tiny_onnx")
    from serving.backend import ServerHandle

    handle = ServerHandle("endpoint", {"http": "https://10.0.0.5:8443", "grpc": "10.0.0.5:8001"}, remote=True)
    for protocol, target in (("http", HTTP_CLIENT), ("grpc", GRPC_CLIENT)):
        spec = backend.client_spec(handle, protocol, "tensor", 4)
        assert (spec.target, spec.model_name, spec.batch_size) == (target, "tiny_onnx", 4)
        assert (spec.tls, spec.ca_file, spec.token_env) == (True, "/etc/ca.pem", TOKEN_ENV)
        assert "never-in-a-spec" not in repr(spec)
    assert backend.unsupported_reason("http", "tensor") is None and backend.unsupported_reason("grpc", "tensor") is None
    assert "shared memory" in backend.unsupported_reason("http_shm", "tensor")
    assert "jpeg_base64" in backend.unsupported_reason("http", "jpeg_base64")
    assert "grpc_url" in endpoint_backend("http://10.0.0.5:8000").unsupported_reason("grpc", "tensor")


def test_the_grpc_client_sends_the_token_as_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    from serving.oip.clients import OipGrpcClient

    monkeypatch.setenv(TOKEN_ENV, "grpc-token")
    spec = replace(oip_spec("127.0.0.1:8001", token_env=TOKEN_ENV), target=GRPC_CLIENT)
    headers = dict(OipGrpcClient(spec).wire_request().headers)
    assert headers["authorization"] == "Bearer grpc-token"
    assert "authorization" not in dict(OipGrpcClient(replace(spec, token_env="")).wire_request().headers)


def test_grpc_metadata_reaches_every_call_of_both_engines() -> None:
    """E.g. a Ray Serve gRPC proxy with several apps routes by `application`: the compiled engine's headers and the
    Python client's metadata carry it."""
    from serving.backend import ServerHandle
    from serving.oip.clients import OipGrpcClient

    backend = endpoint_backend("http://10.0.0.5:8000", "backends.endpoint.grpc_url=10.0.0.5:9000",
                               "+backends.endpoint.grpc_metadata.application=resnet18")
    handle = ServerHandle("endpoint", {"http": "http://10.0.0.5:8000", "grpc": "10.0.0.5:9000"}, remote=True)
    spec = backend.client_spec(handle, "grpc", "tensor", 1)
    assert spec.grpc_metadata == (("application", "resnet18"),)
    client = OipGrpcClient(spec)
    assert ("application", "resnet18") in client.metadata()
    assert dict(client.wire_request().headers)["application"] == "resnet18"




# ------------------------------------------------------------------ Triton's metrics, when the user gives their URL


def triton_metrics_text(model: str, requests: int, queue_us: int) -> str:
    """Triton's Prometheus counters for `model` after `requests` requests of 8 images, each queued `queue_us`."""
    labels = f'model="{model}",version="1"'
    return "\n".join([
        f"nv_inference_request_success{{{labels}}} {requests}", f"nv_inference_request_failure{{{labels}}} 0",
        f"nv_inference_count{{{labels}}} {requests * 8}", f"nv_inference_exec_count{{{labels}}} {requests}",
        f"nv_inference_request_duration_us{{{labels}}} {requests * (queue_us + 3000)}",
        f"nv_inference_queue_duration_us{{{labels}}} {requests * queue_us}",
        f"nv_inference_compute_input_duration_us{{{labels}}} {requests * 100}",
        f"nv_inference_compute_infer_duration_us{{{labels}}} {requests * 2800}",
        f"nv_inference_compute_output_duration_us{{{labels}}} {requests * 100}", ""])


def test_metrics_url_must_be_a_plain_url() -> None:
    assert "backends.endpoint.metrics_url is not allowed" in refusal(URL, "backends.endpoint.metrics_url=host:8002")
    accepted(URL, "backends.endpoint.metrics_url=http://10.0.0.5:8002/metrics")


@pytest.mark.slow
def test_triton_metrics_give_the_server_side_breakdown_and_its_image_count(stub: StubOip) -> None:
    stub.metrics = triton_metrics_text("tiny", 10, 500)
    backend = endpoint_backend(stub.url, f"backends.endpoint.metrics_url={stub.url}/metrics")
    handle = backend.start()
    assert handle.params["endpoint_metrics_url"] == f"{stub.url}/metrics"
    before = backend.server_counters(handle)
    stub.metrics = triton_metrics_text("tiny", 30, 500)
    after = backend.server_counters(handle)
    breakdown = backend.server_breakdown(before, after)
    assert breakdown["server_requests"] == 20 and breakdown["server_queue_ms"] == pytest.approx(0.5)
    assert breakdown["server_request_ms"] == pytest.approx(3.5) and breakdown["server_batch_avg"] == 8
    assert backend.served_images(before, after) == 160


@pytest.mark.slow
def test_metrics_without_the_models_counters_name_the_setting(stub: StubOip) -> None:
    stub.metrics = triton_metrics_text("another_model", 1, 0)
    backend = endpoint_backend(stub.url, f"backends.endpoint.metrics_url={stub.url}/metrics")
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.metrics_url: .* no Triton inference counters "
                                            r"for model 'tiny'"):
        backend.start()


@pytest.mark.slow
def test_a_metrics_read_that_fails_later_leaves_the_trial_the_clients_view(stub: StubOip) -> None:
    stub.metrics = triton_metrics_text("tiny", 1, 0)
    backend = endpoint_backend(stub.url, f"backends.endpoint.metrics_url={stub.url}/metrics")
    handle = backend.start()
    stub.metrics = None  # the metrics endpoint answers 404 from now on
    assert backend.server_counters(handle) is None




# ------------------------------------------------------------------ an endpoint of one tier in a sweep of several


def test_an_endpoint_of_another_tier_is_skipped_saying_whose_it_is() -> None:
    assert "backends.endpoint.tier='A 100' is not allowed" in refusal(URL, "backends.endpoint.tier='A 100'")
    cfg = load_config([*ENDPOINT, URL, "backends.endpoint.tier=h100", "gpu=a100"])
    reason = build_backend(cfg, "endpoint", CPU_NODE, {}).unsupported_reason("http", "tensor")
    assert reason == "this endpoint runs on tier h100 (backends.endpoint.tier), not a100"
    cfg = load_config([*ENDPOINT, URL, "backends.endpoint.tier=a100", "gpu=a100"])
    assert build_backend(cfg, "endpoint", CPU_NODE, {}).unsupported_reason("http", "tensor") is None

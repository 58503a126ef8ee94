"""Endpoints of the kinds besides the Open Inference Protocol (serving/endpoint/kinds.py): a plain HTTP API's request
template and what its check says, basic authentication and mutual TLS against stand-ins; then (slow) a real
TorchServe started outside any sweep, and the FastAPI service's JSON route, measured by endpoint sweeps whose outputs
are cross-checked against the model."""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.results.layout import TierFolder
from serving.backend import BackendContext
from serving.clients.base import jpeg_batch, tensor_batch
from serving.endpoint.probe import EndpointError
from serving.endpoint.template import TemplateHttpClient, TemplateSpec, template_outputs
from serving.torchserve.facts import TorchServeFacts
from tests.endpoint_helpers import TOKEN_ENV, URL, accepted, endpoint_backend, refusal, sweep_args
from tests.endpoint_stubs import StubApi, StubOip, ThreadedServer, self_signed_cert
from tests.helpers import CPU_NODE
from tests.oip_server_process import OipServerProcess
from tests.processes import owned_environment
from tests.sweep_process import run_sweep_command

BASIC_ENV = "TIERBENCH_TEST_ENDPOINT_BASIC"

# ------------------------------------------------------------------ settings


def test_a_plain_api_has_no_grpc_no_metrics_and_a_route_for_a_path() -> None:
    http = [URL, "backends.endpoint.kind=http"]
    assert "backends.endpoint.grpc_url='10.0.0.5:8001' is not allowed: null with kind=http" in refusal(
        *http, "backends.endpoint.grpc_url=10.0.0.5:8001")
    assert "backends.endpoint.metrics_url='http://10.0.0.5:8002/metrics' is not allowed: null with kind=http" in \
        refusal(*http, "backends.endpoint.metrics_url=http://10.0.0.5:8002/metrics")
    assert "backends.endpoint.path='predict' is not allowed: the route under url" in refusal(
        *http, "backends.endpoint.path=predict")
    accepted(*http, "backends.endpoint.path=/v1/classify")
    accepted(URL, "backends.endpoint.kind=torchserve", "backends.endpoint.grpc_url=10.0.0.5:7070",
             "backends.endpoint.metrics_url=http://10.0.0.5:8082/metrics")


def test_credentials_settings_are_refused_when_they_cannot_work() -> None:
    assert "token_env and basic_auth_env are both set" in refusal(
        URL, f"backends.endpoint.token_env={TOKEN_ENV}", f"backends.endpoint.basic_auth_env={BASIC_ENV}")
    assert "backends.endpoint.basic_auth_env is not the name of an environment variable" in refusal(
        URL, "backends.endpoint.basic_auth_env=user:secret")
    assert "user:secret" not in refusal(URL, "backends.endpoint.basic_auth_env=user:secret")
    assert "client_cert/client_key are for mutual TLS: give an https:// url" in refusal(
        URL, "backends.endpoint.client_cert=/etc/cert.pem")
    assert "backends.endpoint.client_key='/k.pem' is not allowed: given with client_cert" in refusal(
        "backends.endpoint.url=https://10.0.0.5", "backends.endpoint.client_key=/k.pem")
    accepted("backends.endpoint.url=https://10.0.0.5", "backends.endpoint.client_cert=/c.pem",
             "backends.endpoint.client_key=/k.pem", f"backends.endpoint.basic_auth_env={BASIC_ENV}")


def test_every_kind_a_config_may_name_has_its_protocol_and_no_other() -> None:
    from serving.endpoint.backend import KINDS
    from serving.endpoint.settings import KIND_NAMES

    assert tuple(KINDS) == KIND_NAMES and all(kind.name == name for name, kind in KINDS.items())


def test_each_kind_says_which_formats_and_transports_it_sends() -> None:
    oip = endpoint_backend("http://10.0.0.5:8000", "backends.endpoint.grpc_url=10.0.0.5:8001")
    assert oip.unsupported_reason("http", "tensor") is None
    assert oip.unsupported_reason("grpc", "jpeg") is None  # a BYTES-input model's (its metadata says, at start)
    assert "kind=http or kind=torchserve" in oip.unsupported_reason("http", "jpeg_base64")
    torchserve = endpoint_backend("http://10.0.0.5:8080", "backends.endpoint.kind=torchserve",
                                  "backends.endpoint.grpc_url=10.0.0.5:7070")
    for protocol, input_format in [("http", "tensor"), ("http", "jpeg"), ("http", "jpeg_base64"),
                                   ("grpc", "tensor"), ("grpc", "jpeg")]:
        assert torchserve.unsupported_reason(protocol, input_format) is None, (protocol, input_format)
    assert "kind=torchserve over grpc is sent jpeg, tensor, not jpeg_base64" in \
        torchserve.unsupported_reason("grpc", "jpeg_base64")
    plain = endpoint_backend("http://10.0.0.5:8000", "backends.endpoint.kind=http")
    assert plain.unsupported_reason("http", "jpeg") is None
    assert plain.unsupported_reason("grpc", "tensor") == "kind=http has no grpc API"
    spec = plain.client_spec(None, "http", "jpeg_base64", 2)
    assert isinstance(spec, TemplateSpec) and spec.url == "http://10.0.0.5:8000/predict"
    assert spec.target == "serving.endpoint.template.TemplateHttpClient" and spec.input_key == "images"
    assert torchserve.client_spec(None, "http", "jpeg", 1).url == "http://10.0.0.5:8080/predictions/tiny"
    assert torchserve.client_spec(None, "grpc", "tensor", 1).url == "10.0.0.5:7070"


# ------------------------------------------------------------------ the plain API's request template


def _template(input_format: str, batch: int, **keys: str) -> TemplateHttpClient:
    return TemplateHttpClient(TemplateSpec("serving.endpoint.template.TemplateHttpClient",
                                           "http://127.0.0.1:1/predict", "tiny", input_format, batch,
                                           (3, 224, 224), (1000,), **keys))


def _parts(request: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    line, *fields = head.decode("latin-1").split("\r\n")
    return line, dict(field.split(": ", 1) for field in fields), body


def test_the_template_sends_a_tensor_raw_one_jpeg_as_the_body_and_several_as_form_parts() -> None:
    tensor = _template("tensor", 2)
    line, headers, body = _parts(tensor.wire_request().payload)
    assert line == "POST /predict HTTP/1.1" and headers["Content-Type"] == "application/octet-stream"
    assert body == tensor_batch(tensor.spec).tobytes() and tensor.payload_bytes == 2 * 4 * 3 * 224 * 224

    one = _template("jpeg", 1)
    _, headers, body = _parts(one.wire_request().payload)
    assert headers["Content-Type"] == "image/jpeg" and body == jpeg_batch(one.spec)[0]

    several = _template("jpeg", 3, input_key="files")
    _, headers, body = _parts(several.wire_request().payload)
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body)
    parts = [(p.get_param("name", header="content-disposition"), p.get_payload(decode=True))
             for p in message.iter_parts()]
    images = jpeg_batch(several.spec)
    assert parts == [("files", image) for image in images] and several.payload_bytes == sum(map(len, images))


def test_the_template_sends_base64_jpegs_under_input_key() -> None:
    client = _template("jpeg_base64", 2, input_key="instances")
    _, headers, body = _parts(client.wire_request().payload)
    assert headers["Content-Type"] == "application/json"
    assert [base64.b64decode(s) for s in json.loads(body)["instances"]] == jpeg_batch(client.spec)


def test_the_answer_is_json_under_output_key_a_bare_list_or_raw_float32() -> None:
    spec = _template("tensor", 2, output_key="scores").spec
    outputs = np.arange(2000, dtype=np.float32).reshape(2, 1000)
    np.testing.assert_array_equal(template_outputs(json.dumps({"scores": outputs.tolist()}).encode(), spec), outputs)
    np.testing.assert_array_equal(template_outputs(json.dumps(outputs.tolist()).encode(), spec), outputs)
    np.testing.assert_array_equal(template_outputs(outputs.tobytes(), spec), outputs)
    with pytest.raises(RuntimeError, match="neither JSON with 'scores' nor 8000 bytes"):
        template_outputs(outputs[:1].tobytes(), spec)
    with pytest.raises(RuntimeError, match=r"not a \{\"scores\": \[\.\.\.\]\} response"):
        template_outputs(b'{"logits": []}', spec)


# ------------------------------------------------------------------ checks before the trials, against stand-ins


@pytest.fixture
def api() -> Iterator[StubApi]:
    app = StubApi()
    with ThreadedServer(app) as server:
        app.url = server.url
        yield app


@pytest.mark.slow
def test_a_plain_api_is_checked_with_an_empty_post_to_its_route(api: StubApi) -> None:
    handle = endpoint_backend(api.url, "backends.endpoint.kind=http").start()
    assert ("POST", "/predict", None) in api.seen and handle.params["endpoint_kind"] == "http"
    assert handle.params["endpoint_path"] == "/predict" and handle.metrics["endpoint_rtt_p50_ms"] > 0
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.path='/classify': .* answered HTTP 404 to a POST"):
        endpoint_backend(api.url, "backends.endpoint.kind=http", "backends.endpoint.path=/classify").start()
    api.status = 401
    with pytest.raises(EndpointError, match=r"answered 401 \(unauthorized\).*backends\.endpoint\.token_env=VARIABLE "
                                            r"\(or user:password with backends\.endpoint\.basic_auth_env"):
        endpoint_backend(api.url, "backends.endpoint.kind=http").start()


@pytest.mark.slow
def test_basic_authentication_comes_from_its_variable(api: StubApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASIC_ENV, "reader:s3cret-pass")
    backend = endpoint_backend(api.url, "backends.endpoint.kind=http", f"backends.endpoint.basic_auth_env={BASIC_ENV}")
    handle = backend.start()
    expected = f"Basic {base64.b64encode(b'reader:s3cret-pass').decode()}"
    assert api.seen and all(auth == expected for _, _, auth in api.seen)
    assert handle.params["endpoint_authenticated"] is True
    assert "s3cret" not in json.dumps(handle.params) and "s3cret" not in repr(backend.client_spec(handle, "http",
                                                                                                    "tensor", 1))
    api.status = 403
    with pytest.raises(EndpointError, match=rf"check the user:password in \${BASIC_ENV}"):
        backend.start()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("mtls")
    return {"server": self_signed_cert(folder / "server"), "client": self_signed_cert(folder / "client")}


@pytest.mark.slow
def test_mutual_tls_sends_the_client_certificate_and_names_it_when_missing(certificates) -> None:
    (server_cert, server_key), (client_cert, client_key) = certificates["server"], certificates["client"]
    app = StubOip()
    with ThreadedServer(app, server_cert, server_key, client_ca=client_cert) as server:
        with pytest.raises(EndpointError, match=r"closed the TLS connection .* backends\.endpoint\.client_cert=PATH"):
            endpoint_backend(server.url, f"backends.endpoint.ca_file={server_cert}").start()
        handle = endpoint_backend(server.url, f"backends.endpoint.ca_file={server_cert}",
                                  f"backends.endpoint.client_cert={client_cert}",
                                  f"backends.endpoint.client_key={client_key}").start()
    assert handle.params["endpoint_client_certificate"] is True and handle.params["endpoint_tls"] is True
    assert ("/v2/models/tiny", None) in app.seen


def test_a_missing_tls_file_is_named_before_anything_is_sent(certificates, tmp_path: Path) -> None:
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.client_cert='.*nothing\.pem': no such file"):
        endpoint_backend("https://127.0.0.1:1", f"backends.endpoint.client_cert={tmp_path / 'nothing.pem'}").start()


# ------------------------------------------------------------ a real TorchServe, and the FastAPI JSON route (slow)


@pytest.fixture(scope="module")
def torchserve() -> Iterator[dict[str, Any]]:
    """TorchServe serving the tiny model with tierbench's handler, started as its user would (outside any sweep and
    Ray): its ports."""
    from serving.torchserve.backend import TorchServeBackend
    from serving.torchserve.host import TorchServeHost
    from serving.torchserve.settings import TorchServeSettings

    problem = TorchServeFacts.probe().problem
    if problem:
        pytest.skip(f"TorchServe cannot start here: {problem}")
    model = load_config(["model=tiny"]).model
    context = BackendContext(name="torchserve", model=model, node=CPU_NODE, ray_options={}, warmup_batch_sizes=(2,))
    variant = TorchServeBackend(context, TorchServeSettings(batch_size=1, torch_threads=1)).variant()
    with owned_environment():
        host = TorchServeHost(model.to_dict(), variant, "127.0.0.1")
        try:
            yield host.start(120)["ports"]
        finally:
            host.stop(20)


@pytest.mark.slow
def test_torchserve_is_checked_its_version_read_and_a_model_it_lacks_named(torchserve: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{torchserve['inference']}"
    metrics = f"http://127.0.0.1:{torchserve['metrics']}/metrics"
    backend = endpoint_backend(url, "backends.endpoint.kind=torchserve", f"backends.endpoint.metrics_url={metrics}")
    handle = backend.start()
    assert handle.params["endpoint_platform"].startswith("TorchServe 0.") and handle.params["endpoint_model"] == "tiny"
    assert handle.metrics["endpoint_rtt_p50_ms"] > 0
    counters = backend.server_counters(handle)
    assert counters is not None and "ts_inference_requests_total" in counters
    with pytest.raises(EndpointError, match=r"^backends\.endpoint\.model_name='resnet50': .*\(404 on "
                                            r"/predictions/resnet50"):
        endpoint_backend(url, "backends.endpoint.kind=torchserve", "backends.endpoint.model_name=resnet50").start()
    with pytest.raises(EndpointError, match="is it TorchServe's inference API"):
        endpoint_backend(f"http://127.0.0.1:{torchserve['management']}", "backends.endpoint.kind=torchserve").start()


def _records(runs: Path, sweep_id: str) -> dict[tuple[str, str], dict]:
    """The tier's trial records by (protocol, input format)."""
    out = {}
    for path in TierFolder.of(runs, sweep_id, "a100").path.glob("trials/*/record.json"):
        record = json.loads(path.read_text())
        out[(record["params"]["protocol"], record["params"]["input_format"])] = record
    return out


@pytest.mark.slow
def test_a_sweep_measures_torchserve_over_rest_and_grpc_in_every_format(
        torchserve: dict[str, Any], tmp_path: Path, no_leftover_processes: None) -> None:
    args = sweep_args(tmp_path, "ep-ts", f"http://127.0.0.1:{torchserve['inference']}",
                      "backends.endpoint.kind=torchserve", f"backends.endpoint.grpc_url=127.0.0.1:"
                      f"{torchserve['grpc_inference']}", f"backends.endpoint.metrics_url=http://127.0.0.1:"
                      f"{torchserve['metrics']}/metrics", "experiment.protocols=[http,grpc]",
                      "experiment.input_formats=[tensor,jpeg,jpeg_base64]", "experiment.concurrency=[1]",
                      "report=false")
    proc, _ = run_sweep_command(args, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    records = _records(tmp_path / "runs", "ep-ts")
    assert records[("grpc", "jpeg_base64")]["status"] == "skipped"
    measured = {key: r for key, r in records.items() if key != ("grpc", "jpeg_base64")}
    assert sorted(measured) == [("grpc", "jpeg"), ("grpc", "tensor"), ("http", "jpeg"), ("http", "jpeg_base64"),
                                ("http", "tensor")]
    for key, record in measured.items():
        assert record["status"] == "ok", (key, record["reason"])
        assert record["params"]["endpoint_kind"] == "torchserve" and record["metrics"]["request_count"] > 0
        # its outputs were compared with the model's own before it was measured, and agreed
        assert record["metrics"]["crosscheck_max_abs_diff"] < 1e-3, key
        # the handler's own count of images (its metrics) matched what the clients counted, within what two reads
        # of its metrics can move on a loaded machine (the trial is tagged otherwise)
        assert "server_count_mismatch" not in record["tags"], (key, record["metrics"])
        assert 0.5 < record["metrics"]["server_count_ratio"] < 2, key


@pytest.mark.slow
def test_a_sweep_measures_a_plain_json_api(tmp_path: Path, no_leftover_processes: None) -> None:
    """The FastAPI service's own JSON route (`POST /predict`, base64 JPEGs in, logits out) as a plain API."""
    with owned_environment(), OipServerProcess(tmp_path / "server") as server:
        args = sweep_args(tmp_path, "ep-api", server.url, "backends.endpoint.kind=http",
                          "experiment.input_formats=[jpeg_base64]", "experiment.batch_sizes=[1,3]",
                          "experiment.concurrency=[1]", "report=false")
        proc, _ = run_sweep_command(args, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    records = [json.loads(path.read_text()) for path in
               TierFolder.of(tmp_path / "runs", "ep-api", "a100").path.glob("trials/*/record.json")]
    assert sorted(r["params"]["batch_size"] for r in records) == [1, 3]
    for record in records:
        assert record["status"] == "ok", record["reason"]
        assert record["params"]["endpoint_path"] == "/predict" and record["params"]["input_format"] == "jpeg_base64"
        assert record["metrics"]["crosscheck_max_abs_diff"] < 1e-3 and record["metrics"]["request_count"] > 0

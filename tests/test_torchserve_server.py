"""(slow) One real TorchServe hosted outside Ray, on the CPU, driven by the clients and by the compiled load engine:
every protocol and input format gives the model's own outputs, its batcher merges concurrent requests, its counters
move, a bad request is answered 400 and the server goes on, and nothing is left running after its stop. One server
serves the whole module (its start takes a while); it skips, saying why, where TorchServe cannot start here (no
java, no torchserve)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serving import torchserve_metrics as ts_metrics
from serving.backend import ServerHandle
from serving.clients.base import jpeg_batch, load_client, tensor_batch
from serving.torchserve.backend import TorchServeBackend
from serving.torchserve.facts import TorchServeFacts
from serving.torchserve.payloads import PREDICTIONS
from tests.processes import owned_environment
from tests.torchserve_helpers import ATOL, MODEL, backend_on, expected_for, jpeg_reference

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

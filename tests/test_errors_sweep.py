"""Errors, goodput and a ramp in a real sweep (slow): a plain HTTP API on loopback that sheds every tenth request with
a 503, measured as an endpoint by a rising load. The trial goes on through the errors, fails past the error budget
with its figures kept (error rate by class, goodput, the series over time in MLflow), and the report shows the
failed requests and the ramp over time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.results.layout import TierFolder
from tests import helpers
from tests.endpoint_helpers import sweep_args
from tests.endpoint_stubs import Receive, Scope, Send, ThreadedServer
from tests.helpers import store_overrides, store_uri
from tests.sweep_process import run_sweep_command

OUTPUTS = np.zeros((1, 1000), np.float32).tobytes()  # the tiny model's output shape; not cross-checked here


class SheddingApi:
    """`POST /predict`: every tenth request with a body is answered 503, the others 200 with float32 outputs; an
    empty POST (tierbench's check of the route) 400. `answered`: (status) of every request with a body."""

    def __init__(self) -> None:
        self.answered: list[int] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if not body:
            status, answer = 400, b'{"detail": "no body"}'
        else:
            status = 503 if (len(self.answered) + 1) % 10 == 0 else 200
            answer = OUTPUTS if status == 200 else b'{"detail": "shedding"}'
            self.answered.append(status)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})


@pytest.mark.slow
def test_a_ramp_against_a_shedding_api_fails_past_its_budget_keeping_every_figure(
        tmp_path: Path, no_leftover_processes: None) -> None:
    api = SheddingApi()
    with ThreadedServer(api) as server:
        args = sweep_args(tmp_path, "ep-shed", server.url, "backends.endpoint.kind=http", "crosscheck.enabled=false",
                          "experiment.load_mode=ramp", "experiment.request_rates=[150]", "experiment.window_s=0.6",
                          "experiment.arrivals.ramp_steps=3", "experiment.slo.deadline_ms=200",
                          "experiment.max_error_rate=0.05", "report=true")
        proc, _ = run_sweep_command(args, timeout=240)
    output = proc.stdout + proc.stderr
    (path,) = TierFolder.of(tmp_path / "runs", "ep-shed", "a100").path.glob("trials/*/record.json")
    record = json.loads(path.read_text())
    metrics = record["metrics"]
    assert record["status"] == "failed", output[-3000:]
    assert "above experiment.max_error_rate=0.05" in record["reason"] and "http_503" in record["reason"]
    # the server shed one in ten, and the trial says so, its other figures kept
    assert metrics["error_rate"] == pytest.approx(0.10, abs=0.03)
    assert metrics["error_rate_http_503"] == metrics["error_rate"] and metrics["request_count"] > 100
    assert metrics["goodput_img_s"] > 0 and metrics["latency_p99_ms"] > 0
    assert record["tags"]["over_error_budget"] == "true" and "retried" not in record["tags"]
    # a ramp: three windows rising, five bins each
    series = record["series"]
    assert len(series) == 15 and record["params"]["ramp_steps"] == 3
    offered = [np.mean([p["offered_rps"] for p in series[k * 5:(k + 1) * 5]]) for k in range(3)]
    assert offered[0] < offered[1] < offered[2], offered
    assert api.answered.count(503) >= 10

    uri = store_uri(tmp_path)
    (run,) = helpers.runs(uri, sweep_id="ep-shed")
    assert run.data.tags["status"] == "failed" and run.data.metrics["error_rate"] == metrics["error_rate"]
    from mlflow import MlflowClient

    history = MlflowClient(uri).get_metric_history(run.info.run_id, "series_offered_rps")
    assert sorted(m.step for m in history) == list(range(15))

    (report,) = (tmp_path / "runs").rglob("report.md")
    text = report.read_text()
    assert "## Requests that failed" in text and "http_503" in text
    assert list(report.parent.glob("traffic_*.png")), "the ramp's plot over time"


@pytest.mark.slow
def test_a_triton_with_a_queue_limit_sheds_past_its_capacity_and_each_rejection_is_counted(
        tmp_path: Path, no_leftover_processes: None) -> None:
    """The bundled Triton, its batcher's queue bounded to 2 requests, under an open loop far past what it serves here:
    the rejections come back as HTTP 503 and gRPC UNAVAILABLE (14), the trial goes on (experiment.max_error_rate=1)
    and the answered requests are measured beside them. A bounded queue makes this Triton stall for 500 ms at a time
    (docs/traffic.md): a 1 s window once held no answer at all beside a busy test worker, so the window is 2 s."""
    args = ["model=tiny", "gpu=local", "experiment.backends=[triton_onnx_dynbatch]",
            "backends.triton_onnx_dynbatch.max_queue_size=2", "experiment.load_mode=poisson",
            "experiment.request_rates=[1000]", "experiment.protocols=[http,grpc]", "experiment.input_formats=[tensor]",
            "experiment.batch_sizes=[1]", "experiment.window_s=2.0", "experiment.stability.windows=1",
            "experiment.stability.max_windows=1", "experiment.max_error_rate=1",
            *store_overrides(tmp_path, "shed", premigrated=True)]
    proc, _ = run_sweep_command(args, timeout=300)
    records = {json.loads(p.read_text())["trial"]["protocol"]: json.loads(p.read_text())
               for p in TierFolder.of(tmp_path / "runs", "shed", "local").path.glob("trials/*/record.json")}
    reasons = {protocol: record.get("reason") for protocol, record in records.items() if record["status"] != "ok"}
    assert proc.returncode == 0, f"{reasons}\n{(proc.stdout + proc.stderr)[-3000:]}"
    for protocol, shed_class in (("http", "error_rate_http_503"), ("grpc", "error_rate_grpc_14")):
        metrics = records[protocol]["metrics"]
        assert records[protocol]["status"] == "ok", records[protocol]["reason"]
        assert metrics["error_rate"] > 0.05 and metrics[shed_class] == metrics["error_rate"], (protocol, metrics)
        assert "Exceeds maximum queue size" in records[protocol]["params"]["first_errors"]
        assert metrics["throughput_img_s"] > 0 and records[protocol]["params"]["server_max_queue_size"] == 2
        assert metrics["answer_gap_max_ms"] > 0  # whether it stalled in one second is left to chance
        # the refused requests were offered too: the rate is the schedule's, not what was answered
        assert metrics["offered_rate_rps"] == pytest.approx(1000, rel=0.2), (protocol, metrics)

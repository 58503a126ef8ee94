"""Errors are results (serving/clients/outcomes.py): each failure is classified, the Python load goes on through
it, and a window's error rate, goodput and error budget come out right against stand-in servers that fail a set
share of requests (in-process, and a real HTTP server on loopback answering 503)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import numpy as np
import pytest
from aiohttp import web

from experiments.config.schema import SloConfig
from experiments.measure.load import ClosedLoopLoad, OpenLoopLoad
from experiments.measure.metrics import good_deadline_ms, outcome_metrics, over_error_budget, window_metrics
from experiments.measure.samples import WindowSamples
from serving.clients.base import ServerReport
from serving.clients.outcomes import Outcome, RequestError, classify, error_class
from serving.endpoint.template import TemplateHttpClient, TemplateSpec


def test_every_failure_has_its_class() -> None:
    import grpc

    assert classify(RequestError(Outcome.HTTP_STATUS, 503, "HTTP 503")) == (Outcome.HTTP_STATUS, 503)
    assert classify(TimeoutError()) == (Outcome.TIMEOUT, 0)
    assert classify(ConnectionRefusedError()) == (Outcome.REFUSED, 0)
    assert classify(ConnectionResetError()) == (Outcome.RESET, 0)
    assert classify(ValueError("response has shape (1, 10), expected (1, 1000)")) == (Outcome.INVALID, 0)
    assert classify(KeyError("x")) == (Outcome.OTHER, 0)
    unavailable = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata())
    assert classify(unavailable) == (Outcome.GRPC_STATUS, 14)
    late = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata())
    assert classify(late) == (Outcome.TIMEOUT, 0)
    assert [error_class(*c) for c in [(1, 503), (2, 8), (3, 0), (5, 0)]] == ["http_503", "grpc_8", "timeout",
                                                                             "refused"]


def test_a_grpc_call_with_no_server_to_connect_to_is_refused_and_a_servers_unavailable_is_its_status() -> None:
    """A real call to a closed loopback port fails UNAVAILABLE with gRPC's own wording: `refused`, so a load on a
    server gone stops; Triton answering UNAVAILABLE ("Exceeds maximum queue size") stays a status, a refusal."""
    import grpc

    async def call_closed_port() -> BaseException:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                await channel.unary_unary("/inference.GRPCInferenceService/ServerLive")(b"", timeout=5)
            except grpc.aio.AioRpcError as exc:
                return exc
        raise AssertionError("a call to a closed port succeeded")

    assert classify(asyncio.run(call_closed_port())) == (Outcome.REFUSED, 0)
    shed = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                details="Exceeds maximum queue size")
    assert classify(shed) == (Outcome.GRPC_STATUS, 14)


class FailingServer:
    """Answers in `service_s`; every `every`-th request (1, 2, ...) fails with HTTP 503 after the same time. `log`:
    (ok, `clock()` when answered) per request, the server's own log (give it the load's clock to compare with a
    window)."""

    def __init__(self, every: int, service_s: float = 0.0005) -> None:
        self.every, self.service_s = every, service_s
        self.counter = itertools.count(1)
        self.log: list[tuple[bool, float]] = []
        self.clock = time.perf_counter

    async def infer(self) -> ServerReport:
        await asyncio.sleep(self.service_s)
        failed = next(self.counter) % self.every == 0
        self.log.append((not failed, self.clock()))
        if failed:
            raise RequestError(Outcome.HTTP_STATUS, 503, "HTTP 503: shed")
        return ServerReport(self.service_s * 1e3, 1)


# A share of 1 % is measured to a tenth of a point over 1,000 requests (the stand-ins fail every k-th one, so the
# count is off by one at most): the bar is the count a share needs, not the rate this machine reaches, which a
# loaded CI runner halves.
ENOUGH_REQUESTS = 1000


async def _window(load, seconds: float) -> WindowSamples:
    load.start()
    await load.wait_warm(min_requests=5, min_seconds=0.1, timeout_s=10)
    start = load.now() + 0.01
    samples = await load.collect(start, start + seconds)
    await load.stop()
    return samples


@pytest.mark.parametrize("share", [0.01, 0.05, 0.20])
def test_a_closed_loop_reports_the_share_a_server_fails(share: float) -> None:
    server = FailingServer(round(1 / share))
    samples = asyncio.run(_window(ClosedLoopLoad(server.infer, 4, timeout_s=5, images_per_request=2), 1.5))
    metrics = outcome_metrics(samples, deadline_ms=None)
    scheduled = samples.requests + samples.failures.count
    assert scheduled >= ENOUGH_REQUESTS, f"only {scheduled} requests: the share is not measured to a point"
    assert abs(metrics["error_rate"] - share) <= 0.01 and metrics["error_rate_http_503"] == metrics["error_rate"]
    assert set(samples.failures.by_class()) == {"http_503"} and metrics["failed_requests"] == samples.failures.count
    assert metrics["latency_all_p99_ms"] >= metrics["latency_all_p50_ms"] > 0
    assert "goodput_img_s" not in metrics
    # a failed request is not an answered one: the window's answered requests are the server's successes
    assert samples.requests == pytest.approx(scheduled * (1 - share), abs=0.01 * scheduled)


def test_an_open_loop_goes_on_through_errors_and_counts_goodput_as_the_server_logs_it() -> None:
    server = FailingServer(every=10)
    load = OpenLoopLoad(server.infer, rate=1500, arrival="poisson", timeout_s=5, images_per_request=1)
    server.clock = load.now
    samples = asyncio.run(_window(load, 1.5))
    metrics = outcome_metrics(samples, deadline_ms=1000.0)  # a deadline every answer meets on this machine
    scheduled = samples.requests + samples.failures.count
    assert scheduled >= ENOUGH_REQUESTS, f"only {scheduled} of 2,250 requests: the share is not measured to a point"
    assert abs(metrics["error_rate"] - 0.10) <= 0.01
    # goodput against the server's own log: the successes it answered inside the window (the whole run's rate, warm-up
    # and the end included, drifted 20 % from it where a loaded client lagged behind the schedule)
    ok_in_window = sum(1 for ok, at in server.log if ok and samples.window_start <= at < samples.window_end)
    ok_over_span = ok_in_window / (samples.window_end - samples.window_start)
    assert metrics["goodput_img_s"] == pytest.approx(ok_over_span, rel=0.05)
    assert metrics["goodput_share"] == pytest.approx(0.90, abs=0.01)


def test_goodput_counts_only_answers_within_the_deadline() -> None:
    intended = np.arange(10) * 0.1
    latency = np.array([0.010, 0.020, 0.030, 0.200, 0.010, 0.500, 0.010, 0.010, 0.010, 0.040])
    samples = WindowSamples(0.0, 1.0, 4, intended, intended, intended + latency, np.full(10, np.nan),
                            np.zeros(10, dtype=np.int32), completed=10, sent=10, completed_intended_s=intended,
                            completed_send_s=intended, completed_done_s=intended + latency)
    assert good_deadline_ms(SloConfig(p99_ms=50.0)) == 50.0
    assert good_deadline_ms(SloConfig(p99_ms=50.0, deadline_ms=25.0)) == 25.0
    assert good_deadline_ms(SloConfig()) is None
    metrics = outcome_metrics(samples, deadline_ms=50.0)
    assert metrics["goodput_img_s"] == pytest.approx(8 * 4 / 1.0) and metrics["goodput_share"] == 0.8
    assert metrics["error_rate"] == 0.0 and "latency_all_p99_ms" not in metrics


def test_goodput_is_counted_as_throughput_is_never_above_it() -> None:
    """Good answers are counted as they completed, as throughput counts answers: a window whose first requests were
    due before it (answered well inside it) and whose last are answered after it reads a goodput no higher than its
    throughput, while the share stays that of the requests due inside the window."""
    intended = np.arange(10) * 0.1 + 0.05
    latency = np.full(10, 0.2)
    done = intended + latency
    inside = done < 1.0  # 8 of the 10 due inside the window were answered inside it
    early = np.array([-0.15, -0.05])  # two due before the window, answered inside it
    samples = WindowSamples(0.0, 1.0, 4, intended, intended, done, np.full(10, np.nan), np.zeros(10, dtype=np.int32),
                            completed=int(inside.sum()) + 2, sent=10,
                            completed_intended_s=np.concatenate([early, intended[inside]]),
                            completed_send_s=np.concatenate([early, intended[inside]]),
                            completed_done_s=np.concatenate([early + 0.2, done[inside]]))
    metrics = {**window_metrics(samples, 3.6), **outcome_metrics(samples, deadline_ms=250.0)}
    assert metrics["goodput_img_s"] == pytest.approx(metrics["throughput_img_s"]) == pytest.approx(10 * 4)
    assert metrics["goodput_share"] == 1.0
    tighter = outcome_metrics(samples, deadline_ms=150.0)
    assert tighter["goodput_img_s"] == 0.0 <= metrics["throughput_img_s"]


def test_the_error_budget_names_the_classes_and_keeps_the_figures() -> None:
    assert over_error_budget({"error_rate": 0.004, "error_rate_http_503": 0.004}, 0.01) is None
    reason = over_error_budget({"error_rate": 0.2, "error_rate_http_503": 0.15, "error_rate_timeout": 0.05}, 0.01)
    assert reason and "20.0% of the requests failed (http_503 15.0%, timeout 5.0%)" in reason
    assert "experiment.max_error_rate=0.01" in reason and "figures are kept" in reason
    assert "open loop" not in reason  # an open loop's refusals are what it offered


def test_a_closed_loop_refused_by_a_shedding_server_is_told_to_measure_with_an_open_loop() -> None:
    refused = {"error_rate": 0.6, "error_rate_grpc_14": 0.55, "error_rate_timeout": 0.05}
    reason = over_error_budget(refused, 0.01, closed_loop=True)
    assert reason and "counts its own resends" in reason and "experiment.load_mode=poisson" in reason
    timeouts = {"error_rate": 0.6, "error_rate_timeout": 0.5, "error_rate_http_503": 0.1}
    assert "open loop" not in over_error_budget(timeouts, 0.01, closed_loop=True)  # not a shedding server


async def _http_window(url: str, seconds: float) -> WindowSamples:
    client = TemplateHttpClient(TemplateSpec("", url, "m", "tensor", 1, (3, 4, 4), (10,)))
    await client.open()
    try:
        return await _window(ClosedLoopLoad(client.infer, 2, timeout_s=5, images_per_request=1), seconds)
    finally:
        await client.close()


def test_a_real_http_server_that_sheds_every_fifth_request() -> None:
    answered = {"ok": 0, "shed": 0}

    async def predict(request: web.Request) -> web.Response:
        await request.read()
        if (answered["ok"] + answered["shed"] + 1) % 5 == 0:
            answered["shed"] += 1
            return web.json_response({"error": "overloaded"}, status=503)
        answered["ok"] += 1
        return web.Response(body=np.zeros((1, 10), np.float32).tobytes(), content_type="application/octet-stream")

    async def main() -> WindowSamples:
        app = web.Application()
        app.router.add_post("/predict", predict)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            return await _http_window(f"http://127.0.0.1:{port}/predict", 1.0)
        finally:
            await runner.cleanup()

    samples = asyncio.run(main())
    metrics = outcome_metrics(samples, None)
    assert samples.failures.count > 20 and set(samples.failures.by_class()) == {"http_503"}
    assert metrics["error_rate"] == pytest.approx(0.2, abs=0.02)
    assert samples.failures.status.tolist() == [503] * samples.failures.count


def test_the_answer_prices_the_images_answered_well_in_time() -> None:
    """The answer's pick (priced on its throughput) also says what its good images cost: 200 img/s answered, 150 of
    them within the 50 ms deadline, at $3.60/h: $0.00667 per 1k good images."""
    import pandas as pd

    from experiments.report.answer import _good_images

    point = {"tier": "a100", "stack": "triton_onnx/grpc/tensor", "batch_size": 1, "load": "poisson-r200"}
    trial = pd.DataFrame([{**point, "goodput_img_s": 150.0, "goodput_share": 0.75, "goodput_deadline_ms": "50.0"}])
    line = _good_images(trial, pd.Series({**point, "usd_per_hour": 3.6}))
    assert "Within 50 ms it answered 75.0% of its requests well" in line and "$0.00667 per 1k good images" in line
    assert _good_images(trial.drop(columns="goodput_img_s"), pd.Series({**point, "usd_per_hour": 3.6})) == ""


def test_a_request_error_raised_on_a_node_reaches_the_driver_whole() -> None:
    """Raised in a Ray task (the cross-check's request to a server on its node) and pickled back to the driver: Ray
    could not rebuild it from its message alone, and the trial's reason read "Failed to deserialize exception"."""
    import pickle

    from serving.clients.outcomes import Outcome, RequestError

    error = pickle.loads(pickle.dumps(RequestError(Outcome.HTTP_STATUS, 500, "HTTP 500: stub not healthy")))
    assert (error.outcome, error.status, str(error)) == (Outcome.HTTP_STATUS, 500, "HTTP 500: stub not healthy")

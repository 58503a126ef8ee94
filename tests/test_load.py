"""The load generators against servers with a known service time: an in-process asyncio queue, and a real
HTTP server on loopback with a known capacity (throughput is what it served, overload is named, coordinated
omission can't hide queueing)."""

from __future__ import annotations

import asyncio
import math
import re
import time

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from experiments.config.choices import LoadMode
from experiments.measure.arrivals import GammaShape
from experiments.measure.load import TICK_S, ClosedLoopLoad, LoadError, OpenLoopLoad
from experiments.measure.metrics import client_metrics, open_loop_metrics, window_metrics
from experiments.measure.samples import WindowSamples
from serving.clients.base import ServerReport


class SlowServer:
    """Serves one request at a time in `service_s` (a queue, like a single model instance)."""

    def __init__(self, service_s: float, first_extra_s: float = 0.0, fail_after: int | None = None) -> None:
        self.service_s = service_s
        self.first_extra_s = first_extra_s
        self.fail_after = fail_after
        self.lock = asyncio.Lock()
        self.served = 0
        self.first_done: float | None = None  # time.perf_counter() when the first request was served

    async def infer(self) -> ServerReport:
        async with self.lock:
            extra = self.first_extra_s if self.served == 0 else 0.0
            await asyncio.sleep(self.service_s + extra)
            self.served += 1
            if self.first_done is None:
                self.first_done = time.perf_counter()
            if self.fail_after is not None and self.served > self.fail_after:
                raise ConnectionError("server went away")
        return ServerReport(self.service_s * 1e3, executed_images=1)


def _in_flight(samples: WindowSamples) -> tuple[float, float, float]:
    """Little's law, from the window's own accounting: the mean number of requests the server had (scheduled rate x
    mean latency from the send), and the band a closed loop of N keeps it in, N x (1 - 2e, 1 + e), e the window's
    longest latency over its duration: on a busy machine a loop is slower, never fewer. Each loop's requests follow
    one another, so only its requests straddling the window's ends are over- or under-counted."""
    in_flight = samples.requests / samples.duration_s * float(np.mean(samples.send_latency_s))
    edge = float(samples.latency_s.max()) / samples.duration_s
    return in_flight, 1 - 2 * edge, 1 + edge


async def _run(load, window_s: float = 1.0, windows: int = 1):
    load.start()
    warm = await load.wait_warm(min_requests=3, min_seconds=0.2, timeout_s=10)
    start = load.now() + 0.01
    parts = []
    for i in range(windows):
        parts.append(await load.collect(start + i * window_s, start + (i + 1) * window_s))
    await load.stop()
    return warm, parts


def test_closed_loop_measures_a_single_server_queue() -> None:
    service_s, concurrency = 0.02, 4
    server = SlowServer(service_s=service_s, first_extra_s=0.3)
    load = ClosedLoopLoad(server.infer, concurrency, timeout_s=5, images_per_request=2)
    warm, (samples,) = asyncio.run(_run(load))
    # Warm-up saw the slow first request (its 300 ms extra); the window, which began after it was served, did not.
    assert warm.first_request_ms >= 300
    epoch = load.now() - time.perf_counter()  # the load's clock is the epoch's
    assert samples.window_start > server.first_done + epoch
    # 4 loops on one 20 ms server: at most 50 req/s (and the requests straddling the window's end), each request
    # waiting for the 3 ahead of it (~80 ms). Slower on a busy machine, so no lower bound on the rate and no upper
    # one on latency: the loops' own accounting says the queue was there instead, 4 requests at the server.
    rate = samples.requests / samples.duration_s
    assert samples.requests > 10
    assert rate <= (samples.duration_s / service_s + concurrency) / samples.duration_s
    assert float(np.median(samples.latency_s)) >= 3 * service_s
    in_flight, low, high = _in_flight(samples)
    assert concurrency * low <= in_flight <= concurrency * high, (in_flight, low, high)
    assert samples.images_per_request == 2
    assert np.all((samples.intended_s >= samples.window_start) & (samples.intended_s < samples.window_end))
    assert np.allclose(samples.server_ms, 20.0)  # what the server reported travels with each sample
    assert np.all(samples.server_batch == 1)
    (health,) = samples.clients
    assert 0 <= health.cpu_util < 1.0 and 0 <= health.loop_lag_p99_ms < 1000  # the loop never stalled a second


def test_client_cpu_per_request_counts_what_the_client_spent() -> None:
    """Each send spends 2 ms of the client's CPU, on a CPU clock the test keeps (a sweep's load reads its process's
    own), then waits for its answer: the client's CPU per request is what each spent, but for the requests sent
    between a window's edge and the CPU mark nearest it (the load marks its CPU every tick), whatever else the
    machine does."""
    class Burning(ClosedLoopLoad):
        spent = 0.0

        def _cpu_seconds(self) -> float:
            return self.spent

    async def burning_send() -> None:
        load.spent += 0.002
        await asyncio.sleep(TICK_S / 2)  # a few requests per tick: the edges' share stays a few requests

    load = Burning(burning_send, 1, timeout_s=5, images_per_request=1)
    _, (samples,) = asyncio.run(_run(load))
    (health,) = samples.clients
    n = samples.completed
    assert health.completed == n > 20  # enough to divide by
    us = client_metrics(samples)["client_cpu_us_per_request"]
    assert 2000 * (n - 6) / n <= us <= 2000 * (n + 1) / n


def test_consecutive_windows_share_no_request() -> None:
    server = SlowServer(service_s=0.01)
    _, parts = asyncio.run(_run(ClosedLoopLoad(server.infer, 2, timeout_s=5, images_per_request=1), 0.5, 3))
    sent = np.concatenate([p.intended_s for p in parts])
    assert len(np.unique(sent)) == len(sent) and all(p.requests > 10 for p in parts)


def test_a_server_gone_stops_the_load_and_is_reported() -> None:
    """Requests that cannot reach the server (here a ConnectionError each: `reset`) end the load once GONE_AFTER
    follow one another."""
    with pytest.raises(LoadError, match=r"the last 20 requests could not reach the server: .*server went away"):
        asyncio.run(_run(ClosedLoopLoad(SlowServer(0.005, fail_after=1).infer, 2, 5, 1)))


def test_a_failure_inside_the_window_fails_the_window() -> None:
    """Partial samples of a window in which the server failed must never pass for a measurement."""
    with pytest.raises(LoadError, match="server went away"):
        asyncio.run(_run(ClosedLoopLoad(SlowServer(0.01, fail_after=40).infer, 1, 5, 1)))


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
def test_open_loop_hits_its_target_rate_on_a_fast_server(arrival: str) -> None:
    server = SlowServer(service_s=0.001)
    load = OpenLoopLoad(server.infer, rate=100, arrival=arrival, timeout_s=5, images_per_request=1)
    _, parts = asyncio.run(_run(load, window_s=1.0, windows=2))
    arrivals = sum(p.requests for p in parts)  # scheduled in the 2 s: the schedule's, however busy the machine
    # Constant: 200 every 2 s. Poisson: 200 on average, 4 standard deviations (sqrt(200)) either way.
    assert abs(arrivals - 200) <= (1 if arrival == "constant" else 4 * np.sqrt(200)), arrivals
    assert all(p.completed > 0 for p in parts)
    for part in parts:  # never negative: a request can't be sent before it is due
        assert np.all(part.send_s >= part.intended_s - 1e-6)
        assert np.all(part.latency_s >= part.send_latency_s - 1e-9)


class LoopbackServer:
    """An HTTP server on 127.0.0.1 that serves one request at a time in `service_s`, FIFO, its slots laid on an
    absolute clock (the event loop's wake-up jitter doesn't add up): its capacity is exactly 1 / service_s
    requests/s while it has work. It notes when it finished each request: its own count to check ours by."""

    def __init__(self, service_s: float) -> None:
        self.service_s = service_s
        self.free_at = 0.0
        self.finished: list[float] = []  # epoch seconds (the load generator's clock is the epoch's too)

    async def _handler(self, request: web.Request) -> web.Response:
        await request.read()
        now = time.time()
        self.free_at = max(self.free_at, now) + self.service_s
        await asyncio.sleep(self.free_at - now)
        self.finished.append(time.time())
        return web.Response(body=b"ok")

    async def __aenter__(self) -> LoopbackServer:
        app = web.Application()
        app.router.add_post("/infer", self._handler)
        self._runner = web.AppRunner(app, handler_cancellation=True)  # requests the clients gave up on end
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/infer"
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()
        await self._runner.cleanup()

    async def send(self) -> None:
        async with self._session.post(self.url, data=b"x") as response:
            await response.read()

    def served_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.finished if start <= t < end)


def _against_loopback(service_s: float, make_load, window_s: float, windows: int):
    async def scenario():
        async with LoopbackServer(service_s) as server:
            _, parts = await _run(make_load(server.send), window_s, windows)
            return server, parts

    return asyncio.run(scenario())


def test_open_loop_past_capacity_reports_what_the_server_served() -> None:
    """At 1.5x the capacity of a server that does 50 requests/s, the throughput is those 50/s (as the server
    itself counted them), not the 75/s offered, and the backlog that grows across the windows names the
    overload; latency still counts from each arrival's scheduled time."""
    capacity = 50.0
    server, parts = _against_loopback(1 / capacity, lambda send: OpenLoopLoad(
        send, rate=1.5 * capacity, arrival="poisson", timeout_s=30, images_per_request=1, seed=7), 0.75, 3)
    merged = WindowSamples.merge(parts)
    m = {**window_metrics(merged, 1.0), **open_loop_metrics(merged, 1.5 * capacity)}
    # What the server served, as it counted: never more than its capacity (the window's edges aside), whatever was
    # offered; less on a machine that stalls its event loop, so the lower bound is wide (it always had a backlog).
    assert 0.5 * capacity <= m["requests_s"] <= capacity * 1.03
    assert abs(merged.completed - server.served_between(merged.window_start, merged.window_end)) <= 3
    assert m["offered_rate_rps"] > 1.25 * capacity  # ~75/s of Poisson arrivals were scheduled ...
    assert m["overloaded"] == 1 and m["backlog_growth_requests"] > 0.15 * merged.requests  # ... a third unserved
    assert all(p.requests > p.completed for p in parts)  # the backlog grew in every window
    assert np.percentile(merged.latency_s, 50) > 10 / capacity  # queueing behind the backlog shows


def test_closed_loop_completions_match_what_was_scheduled() -> None:
    """A closed loop can't build a backlog: per window, completions and scheduled requests differ by at most
    the concurrency (requests straddling its edges), so its throughput is what it was before completions were
    counted, here the server's full 50 requests/s (the closed-loop maximum an overloaded open loop matches)."""
    capacity, concurrency = 50.0, 4
    server, parts = _against_loopback(1 / capacity, lambda send: ClosedLoopLoad(
        send, concurrency, timeout_s=30, images_per_request=1), 0.75, 3)
    for part in parts:
        assert abs(part.completed - part.requests) <= concurrency
    merged = WindowSamples.merge(parts)
    # The server's full rate: at most its capacity, and its queue never ran dry (4 requests at it all along, by the
    # loops' own accounting), which holds however slow the machine (a slot of its comes later, never sooner).
    assert 0 < window_metrics(merged, 1.0)["requests_s"] <= capacity * 1.03
    in_flight, low, high = _in_flight(merged)
    assert concurrency * low <= in_flight <= concurrency * high, (in_flight, low, high)
    assert abs(merged.completed - server.served_between(merged.window_start, merged.window_end)) <= 3


def test_open_loop_exposes_queueing_that_send_time_latency_hides() -> None:
    """Coordinated omission: a client that can have only one request in flight, offered 1.5x what a 20 ms server
    does one at a time, sends late; from the send time every request looks like one service time, from the
    intended time the queue behind the slow server shows. (Offered just under capacity, a backlog may clear by
    the window's end, so whether fewer were sent than arrived would be chance.)"""
    _, (samples,) = _against_loopback(0.02, lambda send: OpenLoopLoad(
        send, rate=75, arrival="poisson", timeout_s=10, images_per_request=1, max_in_flight=1, seed=3), 2.0, 1)
    intended_p99 = np.percentile(samples.latency_s, 99)
    send_p99 = np.percentile(samples.send_latency_s, 99)
    # Once sent, a request takes about one service time (20 ms: at least that, more on a busy machine), far less
    # than it waited in all ...
    assert 0.02 * 0.95 <= np.median(samples.send_latency_s) < np.median(samples.latency_s) / 2
    # ... but the wait before it could be sent is queueing the user saw, and only intended times show it.
    assert intended_p99 > 2 * send_p99
    assert sum(c.late_sends for c in samples.clients) > 0
    # Sent late, so fewer were sent than arrived (at most one per service time): achieved < offered.
    assert samples.sent <= 2.0 / 0.02 + 1 < samples.requests


def test_a_request_that_times_out_is_a_timeout_that_says_how_far_behind_the_server_is() -> None:
    """A server that answers every other request in 10 ms and sits on the rest for 2 s, asked with a 0.5 s timeout:
    the slow half time out, the fast half are measured, and the load goes on. (Requests do not queue behind one
    another here, so a loaded machine's stalls of up to half a second cannot turn every request into a timeout.)"""
    answered = 0

    async def every_other_slow() -> ServerReport:
        nonlocal answered
        answered += 1
        await asyncio.sleep(2.0 if answered % 2 else 0.01)
        return ServerReport(10.0, executed_images=1)

    load = ClosedLoopLoad(every_other_slow, 3, timeout_s=0.5, images_per_request=1)

    async def run():
        load.start()
        # the window opens once a slow request has timed out and a fast one answered: it then holds both kinds
        while not (load._failed["done_s"] and load._done):  # the bound below only guards a hang
            assert load.now() - load.started_at < 60, "no timeout and no answer in a minute"
            await asyncio.sleep(0.01)
        start = load.now()
        samples = await load.collect(start, start + 1.5)
        await load.stop()
        return samples

    samples = asyncio.run(run())
    assert samples.failures.count > 0 and set(samples.failures.by_class()) == {"timeout"}
    assert samples.requests > 0 and not load.errors
    assert re.search(r"no response within 0.5 s \(experiment.request_timeout_s\) with \d requests",
                     load.error_messages["timeout"])


def test_load_modes_split_their_load_and_name_it() -> None:
    from experiments.config.choices import LoadMode
    from experiments.plan import Trial

    closed, poisson = LoadMode.CLOSED, LoadMode.POISSON
    assert closed.split(5, 2) == [3, 2] and closed.split(1, 3) == [1, 0, 0]
    assert poisson.split(90.0, 3) == [30.0, 30.0, 30.0]
    assert (closed.actors_for(20, 16, 4), closed.actors_for(100, 16, 4), poisson.actors_for(500, 16, 4)) == (2, 4, 1)
    trial = Trial("local", "m", "pytorch", "pytorch", "http", "tensor", 8, 0, "poisson").at_load(200)
    assert (trial.load_mode, trial.request_rate, trial.concurrency, trial.load) == (poisson, 200.0, 0, 200.0)
    assert trial.name.endswith("/b8/poisson-r200") and trial.at_load(0).request_rate == 0.0
    assert Trial("local", "m", "pytorch", "pytorch", "http", "tensor", 8, 16).name.endswith("/b8/c16")


def test_load_modes_bound_the_slo_search_and_space_arrivals() -> None:
    from types import SimpleNamespace

    from experiments.config.choices import LoadMode

    exp = SimpleNamespace(request_rates=[20.0, 50.0], concurrency=[4, 8],
                          slo=SimpleNamespace(max_concurrency=64, max_rate=2000.0))
    assert LoadMode.CLOSED.slo_search_range(exp) == (4, 1, 64, True)  # from the grid's lowest, down to 1 if it misses
    assert LoadMode.CONSTANT.slo_search_range(exp) == (20.0, 20.0, 2000.0, False)
    exp.slo.max_concurrency = 2
    assert LoadMode.CLOSED.slo_search_range(exp).start == 2
    rng = np.random.default_rng(0)
    assert LoadMode.CONSTANT.next_gap(50.0, rng) == pytest.approx(0.02)
    gaps = [LoadMode.POISSON.next_gap(50.0, rng) for _ in range(2000)]
    assert np.mean(gaps) == pytest.approx(0.02, rel=0.1) and np.std(gaps) == pytest.approx(0.02, rel=0.1)
    with pytest.raises(ValueError, match="no arrival schedule"):
        LoadMode.CLOSED.next_gap(50.0, rng)


def test_an_open_loop_behind_its_schedule_loses_no_arrival_at_the_windows_end() -> None:
    """A client that falls behind (here its loop blocked for 60 ms across the window's end) sends the arrivals
    it owes in a burst; the window is cut only once each of them is in flight, so every one due inside it is
    counted: 50 at 100/s in 0.5 s, however late they were sent."""
    async def run() -> WindowSamples:
        load = OpenLoopLoad(SlowServer(service_s=0.0005).infer, rate=100, arrival="constant", timeout_s=5,
                            images_per_request=1)
        load.start()
        await load.wait_warm(min_requests=3, min_seconds=0.2, timeout_s=10)
        start = load.now() + 0.01
        end = start + 0.5

        async def block_across_the_end() -> None:
            await asyncio.sleep(end - 0.03 - load.now())
            time.sleep(0.06)  # the client busy: its event loop runs nothing for 60 ms

        blocker = asyncio.create_task(block_across_the_end())
        samples = await load.collect(start, end)
        await blocker
        await load.stop()
        return samples

    samples = asyncio.run(run())
    assert abs(samples.requests - 50) <= 1, samples.requests
    assert samples.completed > 0


def test_a_gamma_load_offers_each_window_of_its_grid_the_rate_asked_of_it() -> None:
    """The Python client's gamma schedule starts where its load does, on the epoch's grid of windows: each window cut
    on that grid offers exactly the rate asked of it (CV 3: free gaps offered 6 s windows +42 % once)."""
    async def instant() -> ServerReport:
        return ServerReport(1.0)

    async def run() -> list[WindowSamples]:
        load = OpenLoopLoad(instant, 60.0, LoadMode.GAMMA, timeout_s=5, images_per_request=1,
                            shape=GammaShape(3.0, 0.5))
        load.start()
        await load.wait_warm(3, 0.2, 10)
        start = math.ceil(load.now() / 0.5) * 0.5
        windows = [await load.collect(start + i * 0.5, start + (i + 1) * 0.5) for i in range(4)]
        await load.stop()
        return windows

    assert [w.arrivals for w in asyncio.run(run())] == [30, 30, 30, 30]

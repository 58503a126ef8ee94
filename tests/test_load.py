"""The closed-loop generator against an in-process asyncio server with a known service time."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from experiments.load import ClosedLoopLoad, LoadError


class SlowServer:
    """Serves one request at a time in `service_s` (a queue, like a single model instance)."""

    def __init__(self, service_s: float, first_extra_s: float = 0.0, fail_after: int | None = None) -> None:
        self.service_s = service_s
        self.first_extra_s = first_extra_s
        self.fail_after = fail_after
        self.lock = asyncio.Lock()
        self.served = 0

    async def infer(self) -> None:
        async with self.lock:
            extra = self.first_extra_s if self.served == 0 else 0.0
            await asyncio.sleep(self.service_s + extra)
            self.served += 1
            if self.fail_after is not None and self.served > self.fail_after:
                raise ConnectionError("server went away")


async def _run(server: SlowServer, concurrency: int, window_s: float = 1.0):
    load = ClosedLoopLoad(server.infer, concurrency, timeout_s=5, images_per_request=2)
    load.start()
    warm = await load.wait_warm(min_requests=3, min_seconds=0.2, timeout_s=10)
    start = load.now() + 0.01
    samples = await load.collect(start, start + window_s)
    await load.stop()
    return warm, samples


def test_closed_loop_measures_a_single_server_queue() -> None:
    warm, samples = asyncio.run(_run(SlowServer(service_s=0.02, first_extra_s=0.3), concurrency=4))
    # Warm-up saw the slow first request; the window did not.
    assert warm.first_request_ms >= 300
    assert samples.latency_s.max() < 0.25
    # 4 loops on one 20 ms server: ~50 req/s, each request waits for the 3 ahead of it (~80 ms).
    rate = samples.requests / samples.duration_s
    assert 35 <= rate <= 52
    assert 0.06 <= float(np.median(samples.latency_s)) <= 0.12
    assert samples.images_per_request == 2
    assert np.all((samples.send_s >= samples.window_start) & (samples.send_s < samples.window_end))


def test_a_failed_request_stops_the_load_and_is_reported() -> None:
    with pytest.raises(LoadError, match="server went away"):
        asyncio.run(_run(SlowServer(service_s=0.005, fail_after=1), concurrency=2))


def test_a_failure_inside_the_window_fails_the_window() -> None:
    """Partial samples of a window in which the server failed must never pass for a measurement."""
    with pytest.raises(LoadError, match="server went away"):
        asyncio.run(_run(SlowServer(service_s=0.01, fail_after=40), concurrency=1, window_s=1.0))

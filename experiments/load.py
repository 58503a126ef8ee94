"""Closed-loop load: `concurrency` request loops, each sending its next request as soon as the last returns.

Pure asyncio, independent of Ray, so it can be tested against any coroutine. Load runs continuously from
`start()` to `stop()`: warm-up and measurement windows are cuts of one steady stream, and several client
actors can cut the same window (epoch timestamps) out of their own streams.

A request belongs to the window it was *sent* in, and the window is collected once every such request has
returned: a request queued behind warm-up traffic cannot leak into the window, and slow requests at the
window's end are not dropped (no survivor bias in the percentiles).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from experiments.samples import WindowSamples

MAX_ERRORS_KEPT = 20


@dataclass
class WarmupStats:
    requests: int
    seconds: float
    first_request_ms: float


class LoadError(RuntimeError):
    pass


class ClosedLoopLoad:
    def __init__(self, send: Callable[[], Awaitable[None]], concurrency: int, timeout_s: float,
                 images_per_request: int, actor_index: int = 0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._send = send
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.images_per_request = images_per_request
        self.actor_index = actor_index
        # perf_counter for precision, shifted to the epoch so windows line up across actors.
        self._epoch_offset = time.time() - time.perf_counter()
        self._send_s: list[float] = []
        self._done_s: list[float] = []
        self.errors: list[str] = []
        self._tasks: list[asyncio.Task] = []
        self._in_flight: dict[int, float] = {}  # loop index -> send time of its outstanding request
        self._stopping = False
        self.started_at = 0.0

    def now(self) -> float:
        return time.perf_counter() + self._epoch_offset

    def start(self) -> None:
        self.started_at = self.now()
        self._tasks = [asyncio.create_task(self._loop(i)) for i in range(self.concurrency)]

    async def _loop(self, index: int) -> None:
        while not self._stopping:
            sent = self.now()
            self._in_flight[index] = sent
            try:
                await asyncio.wait_for(self._send(), self.timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure fails the trial, with its message
                if len(self.errors) < MAX_ERRORS_KEPT:
                    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    self.errors.append(message[:500])
                # A failed request invalidates the trial: stop loading a server that is failing.
                self._stopping = True
                return
            finally:
                self._in_flight.pop(index, None)
            self._send_s.append(sent)
            self._done_s.append(self.now())

    async def wait_warm(self, min_requests: int, min_seconds: float, timeout_s: float) -> WarmupStats:
        """Wait until `min_requests` completed and `min_seconds` passed since start."""
        deadline = self.now() + timeout_s
        while len(self._done_s) < min_requests or self.now() - self.started_at < min_seconds:
            self._raise_if_failed()
            if self.now() > deadline:
                raise LoadError(f"warm-up incomplete after {timeout_s:.0f} s: {len(self._done_s)} of "
                                f"{min_requests} requests completed")
            await asyncio.sleep(0.01)
        self._raise_if_failed()
        first_ms = (self._done_s[0] - self._send_s[0]) * 1e3
        return WarmupStats(len(self._done_s), self.now() - self.started_at, first_ms)

    def _raise_if_failed(self) -> None:
        if self.errors:
            raise LoadError(self.errors[0])

    async def collect(self, window_start: float, window_end: float) -> WindowSamples:
        """Wait for the window to end and its requests to return; return the requests sent inside it."""
        await asyncio.sleep(max(0.0, window_end - self.now()))
        while any(sent < window_end for sent in list(self._in_flight.values())):
            await asyncio.sleep(0.001)
        self._raise_if_failed()
        sent = np.asarray(self._send_s)
        done = np.asarray(self._done_s[: sent.size])
        inside = (sent >= window_start) & (sent < window_end)
        return WindowSamples(
            window_start=window_start,
            window_end=window_end,
            images_per_request=self.images_per_request,
            send_s=sent[inside],
            latency_s=(done - sent)[inside],
            actor=np.full(int(inside.sum()), self.actor_index, dtype=np.int32),
            errors=list(self.errors),
        )

    async def stop(self) -> None:
        """Stop sending; in-flight requests are cancelled (they are outside every window)."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

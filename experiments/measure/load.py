"""Load generators: closed loop (a fixed number of request loops) and open loop (arrivals on a schedule).

`LoadGenerator` keeps the per-request records and cuts windows from them; who sends the requests is its subclasses'
business: `ClientLoad` here (Python, asyncio, an `InferenceClient` per actor: independent of Ray, so it can be tested
against any coroutine), `experiments.measure.engine.compiled_load.CompiledLoad` (the compiled engine).

Load runs continuously from `start()` to `stop()`: warm-up and measurement windows are cuts of one steady stream,
and several client actors can cut the same windows (epoch timestamps) out of their own streams.

Latency: a request belongs to the window it was *scheduled* in, and a window is collected once every such
request has returned: a request queued behind warm-up traffic cannot leak into the window's percentiles, and
slow requests at the window's end are not dropped (no survivor bias). Throughput: the requests that
*completed* inside the window, whenever they were scheduled (perf_analyzer's and LoadGen's count), so an
open loop that offers more than the server serves reports what was served; the requests *sent* inside it
say how fast the client really sent. Records are kept until they completed before the window being cut.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import numpy as np

from experiments.config.choices import LoadMode
from experiments.measure.arrivals import Schedule, Shape
from experiments.measure.samples import ClientHealth, Failures, WindowSamples
from serving.clients.base import ServerReport
from serving.clients.outcomes import Outcome, classify, error_class

MAX_ERRORS_KEPT = 20
# A load whose last GONE_AFTER requests all failed to connect (refused, reset) stops: the server is gone, and a closed
# loop would spin on it. Any other error is a result of the trial, counted against its error budget.
GONE_AFTER = 20
TICK_S = 0.01
# An open-loop request sent this much after its scheduled time counts as late (asyncio timers alone jitter ~1 ms).
LATE_AFTER_S = 0.005
# A stop lets the requests in flight finish for at most this long before cancelling them: a gRPC call cancelled at
# the wrong moment crashes Triton 2.48-2.52 (segfault in its gRPC frontend, triton-inference-server/server#7368,
# fixed in 2.53), and they belong to no window anyway.
DRAIN_S = 3.0
# The load generators ask to run at the priority of a process started by hand, ahead of the servers Ray starts at its
# workers' niceness (15), as perf_analyzer would: a client starved by the servers it measures sends late, and its
# lateness lands in their latency (docs/benchmarks.md). Where the OS refuses (no root, no CAP_SYS_NICE) they keep
# their own; every trial records `client_niceness`.
CLIENT_NICENESS = 0


def take_client_priority(niceness: int = CLIENT_NICENESS) -> int:
    """Ask for `niceness` for every thread of this process (Linux keeps one per thread; threads started later inherit
    their starter's), where the OS allows it; returns the niceness this thread runs at, the asked one or its own."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # not Linux: the process's own
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # refused (no privilege), or the thread ended since
            pass
    return os.getpriority(os.PRIO_PROCESS, 0)


async def drain(tasks: Iterable[asyncio.Task]) -> None:
    """Let `tasks` finish for at most DRAIN_S, then cancel those still running; returns once all have ended."""
    tasks = set(tasks)
    if not tasks:
        return
    _, late = await asyncio.wait(tasks, timeout=DRAIN_S)
    for task in late:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# Sends one request; returns what the server reported about it (time, executed batch), or None.
Send = Callable[[], Awaitable[ServerReport | None]]


@dataclass(frozen=True)
class LoadPoint:
    """One actor's share of a trial's load: request loops (closed loop) or requests/s (open loop), and the arrivals'
    `shape` where the mode has one (gamma, bursts, ramp, trace: experiments.measure.arrivals)."""

    mode: LoadMode
    load: float
    shape: Shape | None = None

    def generator(self, send: Send, timeout_s: float, images_per_request: int, actor_index: int,
                  max_in_flight: int) -> ClientLoad:
        if self.mode.open_loop:
            return OpenLoopLoad(send, self.load, self.mode, timeout_s, images_per_request, actor_index, max_in_flight,
                                shape=self.shape)
        return ClosedLoopLoad(send, int(self.load), timeout_s, images_per_request, actor_index)


@dataclass
class WarmupStats:
    requests: int
    seconds: float
    first_request_ms: float
    failed: int = 0  # requests of the warm-up that failed (outside every window, but the trial says so)
    slowest_ms: float = 0.0  # the warm-up's slowest answered request: how long a window must be to see one end


class LoadError(RuntimeError):
    pass


class LoadGenerator(ABC):
    """Records (intended, sent, done, server ms and batch) per request answered well, and (intended, sent, done,
    outcome, status) per failed one; cuts windows; reports client health."""

    def __init__(self, timeout_s: float, images_per_request: int, actor_index: int = 0) -> None:
        self.timeout_s = timeout_s
        self.images_per_request = images_per_request
        self.actor_index = actor_index
        # perf_counter for precision, shifted to the epoch so windows line up across actors.
        self._epoch_offset = time.time() - time.perf_counter()
        self._intended: list[float] = []
        self._sent: list[float] = []
        self._done: list[float] = []
        self._server_ms: list[float] = []
        self._server_batch: list[float] = []  # images of the forward pass each request rode in
        self._server_queue_ms: list[float] = []  # its wait in the server for that pass, where the server says
        self._detail: list = []  # what the workload records of each request beyond its times (ServerReport.detail)
        # failed requests (serving.clients.outcomes), in the order they ended
        self._failed: dict[str, list[float]] = {key: [] for key in Failures.FIELDS}
        self._recent_gone: list[bool] = []  # whether each of the last GONE_AFTER outcomes was refused / reset
        self.error_messages: dict[str, str] = {}  # the first message of each error class
        self._late: list[float] = []  # intended times of late sends
        self._in_flight: dict[int, float] = {}  # request id -> intended time
        self._lags: list[tuple[float, float]] = []  # (time, lag) of the event-loop ticker
        self._cpu_marks: list[tuple[float, float]] = []  # (time, process CPU seconds)
        self.errors: list[str] = []
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._next_id = 0
        self.started_at = 0.0
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)  # the client's scheduling priority (Ray's workers: 15)

    def now(self) -> float:
        return time.perf_counter() + self._epoch_offset

    def start(self) -> None:
        self.started_at = self.now()
        self._tasks = [asyncio.create_task(self._monitor()), *self._start_tasks()]

    @abstractmethod
    def _start_tasks(self) -> list[asyncio.Task]:
        """Create the tasks that generate the load."""

    def _record(self, intended: float, sent: float, done: float, report: ServerReport | None) -> None:
        if report is not None and report.answered_after_s is not None:
            done = sent + report.answered_after_s  # the answer's last byte, before the client's own work on it
        self._intended.append(intended)
        self._sent.append(sent)
        self._done.append(done)
        self._detail.append(None if report is None else report.detail)
        self._server_ms.append(math.nan if report is None else float(report.ms))
        self._server_batch.append(math.nan if report is None or report.executed_images is None
                                  else float(report.executed_images))
        self._server_queue_ms.append(math.nan if report is None or report.queue_ms is None else report.queue_ms)
        if self._recent_gone:
            self._note_outcome(Outcome.OK)

    def _record_failure(self, intended: float, sent: float, done: float, outcome: Outcome, status: int,
                        message: str) -> None:
        """A request that ended in an error: kept for its window's error rate; the load goes on, unless the last
        GONE_AFTER requests all failed to connect (the server is gone)."""
        for key, value in zip(Failures.FIELDS, (intended, sent, done, int(outcome), status), strict=True):
            self._failed[key].append(value)
        self.error_messages.setdefault(error_class(outcome, status), message[:500])
        self._note_outcome(outcome)

    def _note_outcome(self, outcome: Outcome) -> None:
        self._recent_gone.append(outcome in (Outcome.REFUSED, Outcome.RESET))
        del self._recent_gone[:-GONE_AFTER]
        if len(self._recent_gone) == GONE_AFTER and all(self._recent_gone):
            self._fail(f"the last {GONE_AFTER} requests could not reach the server: "
                       + "; ".join(self.error_messages.get(c, "") for c in ("refused", "reset")
                                   if c in self.error_messages))

    def _fail(self, message: str) -> None:
        """Record why the load failed (the trial fails with it) and stop loading."""
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)
        self._stopping = True

    def _cpu_seconds(self) -> float:
        """CPU seconds the client has used so far (this process's: the Python client runs in it)."""
        return time.process_time()

    async def _monitor(self) -> None:
        """A ticker: its lateness is the event loop's lag; CPU marks give the client's own CPU use."""
        while not self._stopping:
            before = self.now()
            self._cpu_marks.append((before, self._cpu_seconds()))
            await asyncio.sleep(TICK_S)
            after = self.now()
            self._lags.append((after, max(0.0, after - before - TICK_S)))

    async def wait_warm(self, min_requests: int, min_seconds: float, timeout_s: float) -> WarmupStats:
        """Wait until `min_requests` completed and `min_seconds` passed since start."""
        deadline = self.now() + timeout_s
        while len(self._done) < min_requests or self.now() - self.started_at < min_seconds:
            self._raise_if_failed()
            if self.now() > deadline:
                raise LoadError(f"warm-up incomplete after {timeout_s:.0f} s: {len(self._done)} of "
                                f"{min_requests} requests completed")
            await asyncio.sleep(0.01)
        self._raise_if_failed()
        first_ms = (self._done[0] - self._sent[0]) * 1e3
        slowest_ms = max(done - sent for sent, done in zip(self._sent, self._done, strict=True)) * 1e3
        return WarmupStats(len(self._done), self.now() - self.started_at, first_ms, len(self._failed["done_s"]),
                           slowest_ms)

    def _raise_if_failed(self) -> None:
        if self.errors:
            raise LoadError(self.errors[0])

    def _launched_through(self) -> float:
        """Every request scheduled before this time has been sent."""
        return self.now()

    async def collect(self, window_start: float, window_end: float) -> WindowSamples:
        """Wait for the window to end and its requests to return; return the requests scheduled inside it, with
        how many requests completed and were sent inside it (whenever scheduled)."""
        await asyncio.sleep(max(0.0, window_end - self.now()))
        while (self._launched_through() < window_end and not self._stopping) or any(
                t < window_end for t in list(self._in_flight.values())):
            await asyncio.sleep(0.001)
        self._raise_if_failed()
        intended = np.asarray(self._intended)
        n = intended.size
        inside = (intended >= window_start) & (intended < window_end)
        # Every request sent or completed before the window's end was scheduled before it, so it has returned
        # and is recorded; none of them was forgotten (records go once they completed before a cut window).
        done = np.asarray(self._done[:n])
        sent = np.asarray(self._sent[:n])
        completed_in = (done >= window_start) & (done < window_end)
        detail = self._detail[:n]
        recorded = any(d is not None for d in detail)
        failed = {key: np.asarray(values) for key, values in self._failed.items()}
        in_window = (failed["intended_s"] >= window_start) & (failed["intended_s"] < window_end)
        samples = WindowSamples(
            window_start=window_start,
            window_end=window_end,
            images_per_request=self.images_per_request,
            intended_s=intended[inside],
            send_s=sent[inside],
            done_s=done[inside],
            server_ms=np.asarray(self._server_ms[:n])[inside],
            server_batch=np.asarray(self._server_batch[:n])[inside],
            server_queue_ms=np.asarray(self._server_queue_ms[:n])[inside],
            actor=np.full(int(inside.sum()), self.actor_index, dtype=np.int32),
            completed=(completed := int(np.count_nonzero(completed_in))),
            # every request sent inside it, answered or failed: the achieved rate is the load the server was offered
            sent=int(np.count_nonzero((sent >= window_start) & (sent < window_end))
                     + np.count_nonzero((failed["send_s"] >= window_start) & (failed["send_s"] < window_end))),
            clients=[self._health(window_start, window_end, completed)],
            failures=Failures(**{key: values[in_window] for key, values in failed.items()},
                              ended=int(np.count_nonzero((failed["done_s"] >= window_start)
                                                         & (failed["done_s"] < window_end)))),
            error_messages=dict(self.error_messages),
            detail=[detail[i] for i in np.flatnonzero(inside)] if recorded else None,
            completed_detail=[detail[i] for i in np.flatnonzero(completed_in)] if recorded else [],
            completed_intended_s=intended[completed_in], completed_send_s=sent[completed_in],
            completed_done_s=done[completed_in],
        )
        self._forget_before(window_start)
        return samples

    def _health(self, start: float, end: float, completed: int) -> ClientHealth:
        marks = [(t, cpu) for t, cpu in self._cpu_marks if start <= t <= end]
        cpu = (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0]) if len(marks) > 1 else 0.0
        lags = [lag for t, lag in self._lags if start <= t <= end]
        late = sum(1 for t in self._late if start <= t < end)
        return ClientHealth(self.actor_index, cpu, float(np.percentile(lags, 99) * 1e3) if lags else 0.0, late,
                            cpu * (end - start), completed)

    def _forget_before(self, t: float) -> None:
        """Drop the records of requests that completed before `t` (the start of the window just cut), so a long
        trial doesn't grow without bound. Records are appended as requests complete, so they are in completion
        order; a request scheduled earlier that completes in a later window is kept, to be counted there."""
        keep = bisect.bisect_left(self._done, t)
        for records in (self._intended, self._sent, self._done, self._server_ms, self._server_batch,
                        self._server_queue_ms, self._detail):
            del records[:keep]
        keep_failed = bisect.bisect_left(self._failed["done_s"], t)
        for records in self._failed.values():
            del records[:keep_failed]
        self._lags = [x for x in self._lags if x[0] >= t]
        self._cpu_marks = [x for x in self._cpu_marks if x[0] >= t]
        self._late = [x for x in self._late if x >= t]

    async def stop(self) -> None:
        """Stop sending; requests in flight may finish for DRAIN_S (they are outside every window), then are
        cancelled."""
        self._stopping = True
        await drain(self._tasks)
        self._tasks = []


class ClientLoad(LoadGenerator):
    """Load from the Python client: `send` is one request of its `InferenceClient`, awaited in this event loop."""

    def __init__(self, send: Send, timeout_s: float, images_per_request: int, actor_index: int = 0) -> None:
        super().__init__(timeout_s, images_per_request, actor_index)
        self._send = send

    def _admit(self, intended: float) -> int:
        """Put the request scheduled at `intended` in flight, before its task first runs: a window is cut once
        nothing due inside it is in flight, and arrivals a late client owes are launched in a burst that runs only
        after the cut could have looked."""
        request_id = self._next_id
        self._next_id += 1
        self._in_flight[request_id] = intended
        return request_id

    async def _request(self, intended: float, request_id: int | None = None) -> None:
        """Send one request scheduled at `intended` (admitted as `request_id`, else now); record it, answered or
        failed (its outcome)."""
        if request_id is None:
            request_id = self._admit(intended)
        sent = self.now()
        try:
            async with asyncio.timeout(self.timeout_s):  # no extra task per request, unlike wait_for
                report = await self._send()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome of the trial, with its message
            message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, TimeoutError):  # asyncio.timeout's says nothing: say what it means
                message = (f"TimeoutError: no response within {self.timeout_s:g} s "
                           f"(experiment.request_timeout_s) with {len(self._in_flight)} requests in flight: "
                           "the server is that far behind (in an open loop: overloaded past the timeout)")
            outcome, status = classify(exc)
            self._record_failure(intended, sent, self.now(), outcome, status, message)
            return
        finally:
            self._in_flight.pop(request_id, None)
        self._record(intended, sent, self.now(), report)


class ClosedLoopLoad(ClientLoad):
    """`concurrency` loops, each sending its next request as soon as the last returns (perf_analyzer's
    concurrency mode)."""

    def __init__(self, send: Send, concurrency: int, timeout_s: float, images_per_request: int,
                 actor_index: int = 0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        super().__init__(send, timeout_s, images_per_request, actor_index)
        self.concurrency = concurrency

    def _start_tasks(self) -> list[asyncio.Task]:
        return [asyncio.create_task(self._loop()) for _ in range(self.concurrency)]

    async def _loop(self) -> None:
        while not self._stopping:
            await self._request(self.now())


class OpenLoopLoad(ClientLoad):
    """Arrivals at `rate` requests/s, constant or Poisson, or drawn from the mode's `shape` (gamma, bursts, ramp, a
    trace), whatever the server does (MLPerf's server scenario). At most `max_in_flight` requests are outstanding: an
    arrival that finds them all busy waits and is sent late, and its latency still counts from its scheduled time."""

    def __init__(self, send: Send, rate: float, arrival: LoadMode | str, timeout_s: float, images_per_request: int,
                 actor_index: int = 0, max_in_flight: int = 1024, seed: int = 0, shape: Shape | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        if not LoadMode(arrival).open_loop:
            raise ValueError(f"arrival must be an open-loop mode, got {arrival!r}")
        if LoadMode(arrival).shaped != (shape is not None):
            raise ValueError(f"a {arrival} load needs its arrivals' shape exactly when it is gamma, bursts, ramp or "
                             "trace")
        super().__init__(send, timeout_s, images_per_request, actor_index)
        self.rate = rate
        self.arrival = LoadMode(arrival)
        self.max_in_flight = max_in_flight
        self._rng = np.random.default_rng(seed + actor_index)
        self._shape = shape
        self._arrivals: Schedule | None = None  # the shape's schedule, from when the load starts
        self._last_launched = 0.0

    def _launched_through(self) -> float:
        return self._last_launched

    def _begin(self, start: float) -> None:
        """Arrivals from `start`: a shape on the epoch's grid of windows lines its periods up from there."""
        if self._shape is not None:
            self._arrivals = self._shape.arrivals(self.rate, self._rng, start=start)

    def _gap(self) -> float:
        if self._arrivals is not None:
            return self._arrivals.next_gap()
        return self.arrival.next_gap(self.rate, self._rng)

    def _start_tasks(self) -> list[asyncio.Task]:
        return [asyncio.create_task(self._schedule())]

    async def _schedule(self) -> None:
        slots = asyncio.Semaphore(self.max_in_flight)
        pending: set[asyncio.Task] = set()
        intended = self.now()
        self._begin(intended)
        while not self._stopping:
            intended += self._gap()
            # Sleep by the clock the samples use (asyncio's timer runs on another): never send before the
            # scheduled time, so latency from it always includes the latency from the send.
            while (delay := intended - self.now()) > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            if self.now() - intended > LATE_AFTER_S:
                self._late.append(intended)
            request_id = self._admit(intended)
            task = asyncio.create_task(self._request(intended, request_id))
            self._last_launched = intended
            pending.add(task)
            # out of flight even if cancelled before it first ran (stopping)
            task.add_done_callback(lambda t, rid=request_id: (self._in_flight.pop(rid, None), pending.discard(t),
                                                              slots.release()))
        await drain(pending)  # stopping: the requests in flight may finish

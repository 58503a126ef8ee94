"""Measure one trial with the client actors: start load, drop the warm-up, then repeat windows until the last
few agree (perf_analyzer's stability rule), each window joined to the next while it holds fewer than
`stability.min_requests` completions; percentiles come from the merged raw samples of those windows.
The server's counters are read at the window boundaries, so its own count covers the clients' windows."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments.config.choices import LoadMode
from experiments.measure.arrivals import Shape, shape_of
from experiments.measure.load import LoadPoint, WarmupStats
from experiments.measure.metrics import good_deadline_ms, time_series, window_stats, windows_stable
from experiments.measure.samples import WindowSamples
from experiments.plan import Trial
from serving.clients.base import ClientSpec, PoolStats
from serving.workloads.registry import workload as workload_named

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig

# Head start so every actor is loading before the common window opens.
WINDOW_LEAD_S = 0.05
# A window short of `stability.min_requests` completions goes on into the next ones, up to this many `window_s` in all,
# or more for a server slower than that (`stretch_cap`: its slowest warm-up request STRETCH_SLOWEST times over).
MAX_STRETCH = 8
STRETCH_SLOWEST = 3
# The trial over time (MLflow step metrics `series_*`, the report's plots over time): bins per measurement window.
SERIES_BINS_PER_WINDOW = 5

# Snapshot of the server's cumulative counters (e.g. Triton's metrics endpoint), or None.
CounterProbe = Callable[[], dict[str, float] | None]
# A counter read that fails is tried once more after this pause; a boundary read twice in vain has no counters.
COUNTER_RETRY_S = 0.2

log = logging.getLogger(__name__)


class BoundaryCounters:
    """The server's cumulative counters read at every window boundary as it passes, also while an earlier
    window is still being collected (an overloaded server takes seconds to return a window's requests): the
    server's count then covers the clients' windows, not the driver's collection delays."""

    def __init__(self, probe: CounterProbe | None, first: float, window_s: float) -> None:
        self.probe = probe
        self.first = first
        self.window_s = window_s
        # Per boundary (first + k * window_s): (epoch time of the read's middle, the read's seconds, counters), or
        # None without counters. The server took its snapshot somewhere inside the read, which under load can take
        # 100 ms: the read's length is how far the snapshot may be from the boundary.
        self.readings: list[tuple[float, float, dict[str, float]] | None] = []

    def _due(self) -> float:
        return self.first + len(self.readings) * self.window_s

    def _read(self) -> None:
        before = time.time()
        values = self._probe()
        after = time.time()
        self.readings.append(None if values is None else ((before + after) / 2, after - before, values))

    def _probe(self) -> dict[str, float] | None:
        """The counters now, tried twice: a metrics endpoint that refuses one read (seen from Triton under starved
        cores) costs the windows around it their server figures, never the trial the clients measured."""
        if self.probe is None:
            return None
        try:
            return self.probe()
        except Exception:  # noqa: BLE001 - the server's own count is a check beside the clients' figures
            time.sleep(COUNTER_RETRY_S)
        try:
            return self.probe()
        except Exception as exc:  # noqa: BLE001
            log.warning("server counters unread at a window boundary (%s): the windows around it have no "
                        "server-side figures", exc)
            return None

    def read_through(self, boundary: int) -> None:
        """Read every boundary up to `boundary`, waiting for those still ahead."""
        while len(self.readings) <= boundary:
            time.sleep(max(0.0, self._due() - time.time()))
            self._read()

    def gather(self, refs: list[Any], remaining: Callable[[], float]) -> list[Any]:
        """`ray.get(refs)`, reading the counters at each boundary that passes meanwhile."""
        import ray

        while True:
            while time.time() >= self._due():
                self._read()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=min(max(0.0, self._due() - time.time()),
                                                                          remaining()))
            if len(ready) == len(refs):
                while time.time() >= self._due():  # the window's end has passed: read it before the next cut
                    self._read()
                return ray.get(refs)

    def around(self, first: int, last: int) -> tuple[dict[str, float] | None, dict[str, float] | None, float, float]:
        """Counters at boundaries `first` and `last`, the seconds between the two reads' middles and the two reads'
        seconds together (how far the span between the server's two snapshots may be from it)."""
        self.read_through(last)
        before, after = self.readings[first], self.readings[last]
        if before is None or after is None:
            return None, None, 0.0, 0.0
        return before[2], after[2], after[0] - before[0], before[1] + after[1]


def warmup_slowest_s(warmup: list[WarmupStats]) -> float:
    """The slowest request any client answered in its warm-up, in seconds."""
    return max(w.slowest_ms for w in warmup) / 1e3


def stretch_cap(window_s: float, slowest_s: float, left_s: float) -> int:
    """How many `window_s` windows one measured window may join: MAX_STRETCH, or enough to see the warm-up's slowest
    request end STRETCH_SLOWEST times over (a slow server is measured over a longer window, not failed for being
    slow), within `left_s` of the trial's time."""
    wanted = math.ceil(STRETCH_SLOWEST * slowest_s / window_s)
    return max(MAX_STRETCH, min(wanted, int(left_s // window_s)))


def silence_reason(span_s: float, slowest_s: float) -> str:
    """Why a trial's window in which no request ended (nothing answered, nothing failed) is what it is: a server that
    answered its warm-up well within the window and then nothing is stuck; one whose warm-up requests took as long
    as the window could hold (the trial's time ran short of `stretch_cap`'s) is slow."""
    seen = (f"no request ended in {span_s:.1f} s of measurement window (answered or failed), though the warm-up's "
            f"slowest took {slowest_s * 1e3:.0f} ms")
    if STRETCH_SLOWEST * slowest_s <= span_s:
        return f"{seen}: the server stopped answering (stuck, not slow)"
    return (f"{seen}: slower than the trial's time let a window grow; raise experiment.trial_timeout_s (or "
            f"experiment.window_s to {STRETCH_SLOWEST * slowest_s:.0f} s)")


class WindowStretch:
    """Windows of `window_s` joined until each holds `min_requests` completions and at least one request ended
    (answered or failed: a window in which nothing ended measured nothing), at most `most` of them: a window of 4
    requests moves 25 % with one request more or less, which no stability rule of 10 % can tell from a change.
    `starts`: the `window_s` boundary each joined window begins at; `cut`: the boundaries passed so far."""

    def __init__(self, min_requests: int, neighbours: int, most: int = MAX_STRETCH) -> None:
        self.min_requests, self.most = min_requests, most
        self.held: list[list[WindowSamples]] = [[] for _ in range(1 + neighbours)]  # per tenant, the windows joined
        self.starts: list[int] = []
        self.cut = 0

    def add(self, tenants: list[WindowSamples]) -> list[WindowSamples] | None:
        """One `window_s` window per tenant (the trial's first); the joined windows once the trial's holds enough,
        else None."""
        self.cut += 1
        for held, window in zip(self.held, tenants, strict=True):
            held.append(window)
        trial = self.held[0]
        short = sum(w.completed for w in trial) < self.min_requests or not any(w.ended for w in trial)
        if short and len(trial) < self.most:
            return None  # completions are exact sums over consecutive windows: nothing merged until it is whole
        self.starts.append(self.cut - len(trial))
        joined = [WindowSamples.merge(held) if len(held) > 1 else held[0] for held in self.held]
        self.held = [[] for _ in self.held]
        return joined


@dataclass
class Measurement:
    samples: WindowSamples  # the merged samples of the final, agreeing windows
    warmup: list[WarmupStats]
    # what the requests carried (the first actor's pool: every actor builds the same): images' payloads, or a
    # generative client's PromptPoolStats
    payloads: PoolStats
    actors_used: int
    windows: int
    stable: bool
    window_stats: list[tuple[float, float]]  # (the workload's throughput, latency percentile ms) of every window
    counters_before: dict[str, float] | None = None  # server counters at the final windows' boundaries
    counters_after: dict[str, float] | None = None
    counters_span_s: float = 0.0  # seconds between the two reads (the windows' length, give or take a read)
    counters_read_s: float = 0.0  # the two reads' seconds together: the span's uncertainty
    client_niceness: int | None = None  # the scheduling priority the clients sent at (the highest of the actors')
    series: list[dict[str, float]] | None = None  # every window over time (experiments.measure.metrics.time_series)
    # A shared card's other tenants (`neighbours` of `measure`): each one's merged samples over the same final windows
    neighbours: list[WindowSamples] | None = None


def split_load(trial: Trial, actors: int, shape: Shape | None = None) -> list[LoadPoint]:
    """Each actor's share of the trial's load (an actor may get none); the arrivals' shape goes to each."""
    return [LoadPoint(trial.load_mode, share, shape) for share in trial.load_mode.split(trial.load, actors)]


def actors_needed(trial: Trial, exp: ExperimentConfig) -> int:
    """How many client actors a trial starts with: fixed, or one per `client_concurrency_per_actor` loops."""
    return exp.client_actors or trial.load_mode.actors_for(trial.load, exp.client_concurrency_per_actor,
                                                           exp.max_client_actors)


def measure(actors: list[Any], spec: ClientSpec, trial: Trial, exp: ExperimentConfig,
            probe: CounterProbe | None = None, engine: str = "python",
            neighbours: tuple[ClientSpec, ...] = ()) -> Measurement:
    """Run one trial's load with `engine` (LoadEngine); raises on a client error or when it overruns
    `experiment.trial_timeout_s`.

    With `neighbours` (the other servers of a shared card), the actors are split evenly between `spec` and each of
    them, every one under the trial's full load at once: the trial's samples, its stability and the counters are the
    first server's; each neighbour's samples over the same final windows come beside them."""
    import ray

    specs = (spec, *neighbours)
    per_tenant = len(actors) // len(specs)
    if per_tenant < 1:
        raise ValueError(f"{len(actors)} client actors for {len(specs)} servers sharing a card: one each at least")
    shape = shape_of(exp, trial.load_mode)
    shares = [(actors[tenant * per_tenant + i], point, tenant) for tenant in range(len(specs))
              for i, point in enumerate(split_load(trial, per_tenant, shape)) if point.load > 0]
    used = [actor for actor, _, _ in shares]
    tenant_of = [tenant for _, _, tenant in shares]
    deadline = time.monotonic() + exp.trial_timeout_s
    stability = exp.stability
    workload = workload_named(exp.workload)
    ramp = int(exp.arrivals.ramp_steps) if trial.load_mode is LoadMode.RAMP else 0

    def remaining(reserve: float = 0.0) -> float:
        left = deadline - time.monotonic() - reserve
        if left <= 0:
            raise TimeoutError(f"trial exceeded experiment.trial_timeout_s={exp.trial_timeout_s}")
        return left

    try:
        started = ray.get([a.start.remote(specs[tenant], load, exp.max_in_flight, engine, exp.trial_timeout_s)
                           for a, load, tenant in shares], timeout=min(exp.request_timeout_s, remaining()))
        per_actor_warmup = -(-exp.warmup_requests // len(used))
        warm_timeout = remaining(reserve=exp.window_s * stability.windows)
        warmup = ray.get([a.wait_warm.remote(per_actor_warmup, exp.warmup_s, warm_timeout) for a in used],
                         timeout=warm_timeout + 5)
        start = time.time() + WINDOW_LEAD_S
        period = getattr(shape, "period_s", None)
        if period:  # arrivals on the epoch's grid of windows (gamma): the windows on the same grid, each one period
            start = math.ceil(start / period) * period
        counters = BoundaryCounters(probe, start, exp.window_s)
        windows: list[WindowSamples] = []
        beside: list[list[WindowSamples]] = [[] for _ in neighbours]  # each neighbour's windows
        # one window per step of a ramp; else windows joined until they hold enough, longer for a slow server
        most = 1 if ramp else stretch_cap(exp.window_s, warmup_slowest_s(warmup), remaining())
        stretch = WindowStretch(stability.min_requests, len(neighbours), most)
        while True:
            end = start + exp.window_s
            parts = counters.gather([a.collect.remote(start, end) for a in used], remaining)
            start = end
            tenants = [WindowSamples.merge([p for p, t in zip(parts, tenant_of, strict=True) if t == tenant])
                       for tenant in range(len(specs))]
            if (window := stretch.add(tenants)) is None:
                continue  # short of min_requests: it goes on into the next window
            windows.append(window[0])
            for own, part in zip(beside, window[1:], strict=True):
                own.append(part)
            if not window[0].ended and not ramp:  # nothing ended over the longest window: stuck (`silence_reason`)
                stable = False
                break
            if ramp:  # one window per step, all of them the trial's: rising loads are never stable
                stable = False
                if len(windows) >= ramp:
                    break
                continue
            recent = windows[-stability.windows:]
            stable = len(recent) == stability.windows and windows_stable(recent, stability.percent,
                                                                         stability.latency_percentile, workload)
            if stable or len(windows) >= stability.max_windows:
                break
        final = windows if ramp else windows[-stability.windows:]
        # Read while the load still runs: a server keeps serving its backlog after the clients stop.
        before, after, span_s, read_s = counters.around(stretch.starts[len(windows) - len(final)], stretch.cut)
    finally:
        try:
            ray.get([a.stop.remote() for a in used], timeout=exp.request_timeout_s + 5)
        except Exception:  # noqa: BLE001 - the pool is restarted after a failed trial anyway
            pass
    first = len(windows) - len(final)
    return Measurement(
        samples=WindowSamples.merge(final), warmup=warmup, payloads=started[0][0],
        actors_used=tenant_of.count(0),
        client_niceness=max(niceness for _, niceness in started),
        windows=len(windows), stable=stable,
        window_stats=[window_stats(w, stability.latency_percentile, workload) for w in windows],
        counters_before=before, counters_after=after, counters_span_s=span_s, counters_read_s=read_s,
        series=time_series(windows, SERIES_BINS_PER_WINDOW, good_deadline_ms(exp.slo)),
        neighbours=[WindowSamples.merge(own[first:]) for own in beside] if neighbours else None,
    )

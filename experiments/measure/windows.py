"""Measure one trial with the client actors: start load, drop the warm-up, then repeat windows until the last
few agree (perf_analyzer's stability rule); percentiles come from the merged raw samples of those windows."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from experiments.measure.load import LoadPoint, WarmupStats
from experiments.measure.metrics import window_stats, windows_stable
from experiments.measure.samples import WindowSamples
from experiments.plan import Trial
from serving.clients.base import ClientSpec

# Head start so every actor is loading before the common window opens.
WINDOW_LEAD_S = 0.05

# Snapshot of the server's cumulative counters (e.g. Triton's metrics endpoint), or None.
CounterProbe = Callable[[], dict[str, float] | None]


@dataclass
class Measurement:
    samples: WindowSamples  # the merged samples of the final, agreeing windows
    warmup: list[WarmupStats]
    payload_bytes: int
    actors_used: int
    windows: int
    stable: bool
    window_stats: list[tuple[float, float]]  # (img/s, latency percentile ms) of every window
    counters_before: dict[str, float] | None = None  # server counters around the final windows
    counters_after: dict[str, float] | None = None


def split_load(trial: Trial, actors: int) -> list[LoadPoint]:
    """Each actor's share of the trial's load (an actor may get none)."""
    return [LoadPoint(trial.load_mode, share) for share in trial.load_mode.split(trial.load, actors)]


def actors_needed(trial: Trial, exp: Any) -> int:
    """How many client actors a trial starts with: fixed, or one per `client_concurrency_per_actor` loops."""
    return exp.client_actors or trial.load_mode.actors_for(trial.load, exp.client_concurrency_per_actor,
                                                           exp.max_client_actors)


def measure(actors: list[Any], spec: ClientSpec, trial: Trial, exp: Any,
            probe: CounterProbe | None = None) -> Measurement:
    """Run one trial's load; raises on a client error or when it overruns `experiment.trial_timeout_s`."""
    import ray

    shares = [(a, point) for a, point in zip(actors, split_load(trial, len(actors)), strict=True) if point.load > 0]
    used = [actor for actor, _ in shares]
    deadline = time.monotonic() + exp.trial_timeout_s
    stability = exp.stability

    def remaining(reserve: float = 0.0) -> float:
        left = deadline - time.monotonic() - reserve
        if left <= 0:
            raise TimeoutError(f"trial exceeded experiment.trial_timeout_s={exp.trial_timeout_s}")
        return left

    try:
        payloads = ray.get([a.start.remote(spec, load, exp.max_in_flight) for a, load in shares],
                           timeout=min(exp.request_timeout_s, remaining()))
        per_actor_warmup = -(-exp.warmup_requests // len(used))
        warm_timeout = remaining(reserve=exp.window_s * stability.windows)
        warmup = ray.get([a.wait_warm.remote(per_actor_warmup, exp.warmup_s, warm_timeout) for a in used],
                         timeout=warm_timeout + 5)
        start = time.time() + WINDOW_LEAD_S
        time.sleep(max(0.0, start - time.time()))
        counters = [probe() if probe else None]
        windows: list[WindowSamples] = []
        while True:
            end = start + exp.window_s
            parts = ray.get([a.collect.remote(start, end) for a in used], timeout=remaining())
            windows.append(WindowSamples.merge(parts))
            counters.append(probe() if probe else None)
            recent = windows[-stability.windows:]
            stable = len(recent) == stability.windows and windows_stable(recent, stability.percent,
                                                                         stability.latency_percentile)
            if stable or len(windows) >= stability.max_windows:
                break
            start = end
    finally:
        try:
            ray.get([a.stop.remote() for a in used], timeout=exp.request_timeout_s + 5)
        except Exception:  # noqa: BLE001 - the pool is restarted after a failed trial anyway
            pass
    final = windows[-stability.windows:]
    return Measurement(
        samples=WindowSamples.merge(final), warmup=warmup, payload_bytes=int(payloads[0]), actors_used=len(used),
        windows=len(windows), stable=stable,
        window_stats=[window_stats(w, stability.latency_percentile) for w in windows],
        counters_before=counters[-len(final) - 1], counters_after=counters[-1],
    )

"""Measure one trial with the client actors: start load, drop the warm-up, cut one window, merge samples."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from experiments.load import WarmupStats
from experiments.samples import WindowSamples
from serving.clients.base import ClientSpec

# Head start so every actor is loading before the common window opens.
WINDOW_LEAD_S = 0.05


@dataclass
class Measurement:
    samples: WindowSamples
    warmup: list[WarmupStats]
    payload_bytes: int
    actors_used: int


def split_concurrency(concurrency: int, actors: int) -> list[int]:
    """Share `concurrency` request loops among actors as evenly as possible (actors with 0 stay idle)."""
    base, extra = divmod(concurrency, actors)
    return [base + (1 if i < extra else 0) for i in range(actors)]


def measure(actors: list[Any], spec: ClientSpec, concurrency: int, exp: Any) -> Measurement:
    """Run one trial's load; raises on a client error or when it overruns `experiment.trial_timeout_s`."""
    import ray

    shares = [(actor, share) for actor, share in zip(actors, split_concurrency(concurrency, len(actors)),
                                                     strict=True) if share > 0]
    used = [actor for actor, _ in shares]
    deadline = time.monotonic() + exp.trial_timeout_s

    def remaining(reserve: float = 0.0) -> float:
        left = deadline - time.monotonic() - reserve
        if left <= 0:
            raise TimeoutError(f"trial exceeded experiment.trial_timeout_s={exp.trial_timeout_s}")
        return left

    try:
        payloads = ray.get([actor.start.remote(spec, share) for actor, share in shares],
                           timeout=min(exp.request_timeout_s, remaining()))
        per_actor_warmup = -(-exp.warmup_requests // len(used))
        warm_timeout = remaining(reserve=exp.window_s)
        warmup = ray.get([a.wait_warm.remote(per_actor_warmup, exp.warmup_s, warm_timeout) for a in used],
                         timeout=warm_timeout + 5)
        window_start = time.time() + WINDOW_LEAD_S
        window_end = window_start + exp.window_s
        parts = ray.get([a.collect.remote(window_start, window_end) for a in used], timeout=remaining())
    finally:
        try:
            ray.get([a.stop.remote() for a in used], timeout=exp.request_timeout_s + 5)
        except Exception:  # noqa: BLE001 - the pool is restarted after a failed trial anyway
            pass
    return Measurement(WindowSamples.merge(parts), warmup, int(payloads[0]), len(used))

"""Waiting for a node of a tier, bounded and with progress. A lost node's replacement (`cluster.replace_lost_node`,
bound `cluster.lease_timeout_s`) is awaited here by watching the live nodes; a node the autoscaler starts for a tier
(bound `cluster.scale_up_timeout_s`) is awaited by the tier job's pending lease (`experiments.cluster.placement`),
with the same progress lines and the same NodeWaitTimeout. Nothing waits forever or silently."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from experiments.cluster.connection import ClusterView, TierUnavailableError

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 30.0
POLL_S = 1.0


class NodeWaitTimeout(TierUnavailableError):
    """No node of the tier joined within the bound: the tier fails, other tiers go on."""


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def wait_for_ref(ref: Any, timeout_s: float, progress: Callable[[float], None]) -> float | None:
    """Wait for the Ray object `ref`: None once it is ready, or the seconds waited once `timeout_s` passed; calls
    `progress(waited)` every PROGRESS_EVERY_S meanwhile."""
    import ray

    started = time.monotonic()
    while True:
        remaining = timeout_s - (time.monotonic() - started)
        ready, _ = ray.wait([ref], timeout=min(PROGRESS_EVERY_S, max(0.1, remaining)))
        if ready:
            return None
        waited = time.monotonic() - started
        if waited >= timeout_s:
            return waited
        progress(waited)


def wait_for_tier_node(tier: str, timeout_s: float, why: str, limit_key: str, exclude: Iterable[str] = (),
                       progress_every_s: float = PROGRESS_EVERY_S,
                       live_tiers: Callable[[], dict[str, list[str]]] | None = None) -> str:
    """The id of a live node of `tier` (other than `exclude`) once one is there; logs when it starts waiting,
    every `progress_every_s` while it waits, and when the node came; NodeWaitTimeout after `timeout_s`."""
    read = live_tiers or (lambda: ClusterView.read().tiers)
    excluded = set(exclude)
    started = time.monotonic()
    reported = started
    log.info("gpu=%s: waiting for a node of tier %s (%s); limit %s (%s)", tier, tier, why, minutes(timeout_s),
             limit_key)
    while True:
        fresh = [node for node in read().get(tier, []) if node not in excluded]
        waited = time.monotonic() - started
        if fresh:
            log.info("gpu=%s: node %s of tier %s is up after %s; continuing", tier, fresh[0][:12], tier,
                     minutes(waited))
            return fresh[0]
        if waited >= timeout_s:
            raise NodeWaitTimeout(f"gpu={tier}: no node of tier {tier} joined within {minutes(timeout_s)} "
                                  f"({limit_key}={timeout_s:g}) while waiting {why}")
        if time.monotonic() - reported >= progress_every_s:
            reported = time.monotonic()
            log.info("gpu=%s: waiting for a node of tier %s: %s, limit %s", tier, tier, minutes(waited),
                     minutes(timeout_s))
        time.sleep(min(POLL_S, max(0.0, timeout_s - waited)))

"""A tier's node lost mid-sweep (a spot instance taken back, a raylet that died): noticed through the lease actor
the tier job keeps on the node, then named in the user's terms from Ray's GCS (the node's address, the tier, when,
and why Ray says it went: raylet died, node removed, preempted), not as an opaque actor error."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# How long a probe of the lease actor may take before the node counts as unreachable, and how long to wait for
# the GCS to declare it dead (its health check misses a few heartbeats first) so the cause can be named.
PROBE_TIMEOUT_S = 10.0
DEATH_NOTICE_S = 45.0


@dataclass(frozen=True)
class NodeLoss:
    tier: str
    node_id: str
    address: str
    noticed_at: float  # epoch seconds
    cause: str

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.noticed_at))
        return f"node {self.address} ({self.node_id[:12]}) of tier {self.tier} was lost at {when} ({self.cause})"


class NodeLostError(RuntimeError):
    """The node a tier job holds is gone: what was running there is unaccounted for until recorded."""

    def __init__(self, loss: NodeLoss) -> None:
        super().__init__(loss.describe())
        self.loss = loss


# Ray's NodeDeathInfo.Reason (common.proto), as `ray.nodes()` gives it (a number), in the user's words.
DEATH_REASONS = {0: "node lost", 1: "node removed", 2: "raylet died", 3: "preempted", 4: "node removed (idle)"}


def death_cause(node: dict[str, Any] | None) -> str:
    """Why the GCS says a node went, in the user's words, with the GCS's own message beside."""
    if node is None:
        return "node removed from the cluster"
    if node.get("Alive"):
        return "node unreachable (Ray still lists it alive)"
    reason = node.get("DeathReason", 0)
    what = DEATH_REASONS.get(reason, str(reason)) if isinstance(reason, int) else str(reason)
    message = str(node.get("DeathReasonMessage", "")).strip()
    return f"{what}: {message}" if message else what


def _gcs_entry(node_id: str) -> dict[str, Any] | None:
    import ray

    return next((n for n in ray.nodes() if n["NodeID"] == node_id), None)


def probe_node(lease: Any, tier: str, node_id: str, address: str,
               death_notice_s: float = DEATH_NOTICE_S) -> NodeLoss | None:
    """None while the lease actor on the node answers; else the loss, its cause read from the GCS once the GCS
    has noticed (a node whose actor is unreachable but which the GCS still lists alive is reported unreachable)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        ray.get(lease.where.remote(), timeout=PROBE_TIMEOUT_S)
        return None
    except (RayActorError, GetTimeoutError) as exc:
        log.debug("lease actor on %s did not answer: %s", node_id[:12], exc)
    noticed = time.time()
    deadline = time.monotonic() + death_notice_s
    entry = _gcs_entry(node_id)
    while entry is not None and entry.get("Alive") and time.monotonic() < deadline:
        time.sleep(0.5)
        entry = _gcs_entry(node_id)
    return NodeLoss(tier, node_id, address, noticed, death_cause(entry))

"""Reach Ray for a tier job: start a private local Ray (cluster=local) or join one (cluster=address), check
the tier has a live node before anything is placed, and always let go of what was started."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from experiments.tiers import tier_resource, tiers_for_gpu, tiers_of_nodes

log = logging.getLogger(__name__)


class TierUnavailableError(RuntimeError):
    """The requested tier has no live node: say which tiers there are and how to add one."""


def missing_tier_message(tier: str, available: list[str]) -> str:
    have = ", ".join(sorted(available)) or "none"
    return (f"gpu={tier}: no live node of tier '{tier}' in the Ray cluster (tiers it has: {have}). "
            f"Join a node of that tier (`python -m runners.node --address HEAD:6379 --tier {tier}`) "
            f"or pick one of: {have}")


def local_node_tiers() -> list[str]:
    """Tiers this machine declares when the sweep starts Ray itself: `local`, plus its GPU's tier if known."""
    from serving.node import nvidia_smi

    gpus, _, _ = nvidia_smi()
    return ["local", *tiers_for_gpu(gpus)]


@contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """`ray.init` replaces the driver's SIGTERM handler (Python's `sys.exit` and a C-level abort): put back
    the one the runner set, so SIGTERM unwinds like Ctrl-C and every server is stopped."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


@contextmanager
def ray_cluster(cluster_cfg: Any, tier: str) -> Iterator[dict[str, list[str]]]:
    """Connected Ray with a live node of `tier`; yields live nodes by tier."""
    import ray

    started_here = False
    if cluster_cfg.address:
        with _keep_sigterm_handler():
            ray.init(address=cluster_cfg.address, namespace="tierbench", log_to_driver=False)
    else:
        declared = local_node_tiers()
        if tier not in declared:  # fail before Ray starts: nothing to clean up
            raise TierUnavailableError(missing_tier_message(tier, declared))
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        with _keep_sigterm_handler():
            ray.init(
                address="local",
                num_cpus=cluster_cfg.num_cpus,
                object_store_memory=cluster_cfg.object_store_memory,
                resources={tier_resource(t): 1 for t in declared},
                include_dashboard=False,
                namespace="tierbench",
                log_to_driver=False,
            )
        started_here = True
    try:
        tiers = tiers_of_nodes(ray.nodes())
        if tier not in tiers:
            raise TierUnavailableError(missing_tier_message(tier, list(tiers)))
        yield tiers
    finally:
        # Only what this process started or joined: never `ray stop` (it kills every Ray on the machine).
        ray.shutdown()
        if started_here:
            log.info("stopped the local Ray this sweep started")

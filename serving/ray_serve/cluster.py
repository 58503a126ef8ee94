"""What Ray Serve asks of Ray (`BackendPackage.ray_node_environment`, `cluster_environment`, `joined_cluster`):
Serve's processes are the cluster's own (one Serve instance per cluster, detached), not a server a host actor owns.

Direct ingress (`cluster.serve_direct_ingress`): the sweep job's runtime env switches it on. Actors the job creates
inherit it, Serve's controller, proxies and replicas included (Serve reads the switch when its processes start, so it
applies to a Serve instance this job starts, not to one already running). Serve then holds every ingress replica it
stops for a 30 s drain, for a load balancer to stop sending it traffic; a sweep deletes an app once its trials are
over, so the drain is cut to a second."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches

log = logging.getLogger(__name__)

# For a Ray node tierbench starts: Serve's per-request logs kept in its log files, not streamed to the sweep's console.
RAY_NODE_ENVIRONMENT = {"RAY_SERVE_LOG_TO_STDERR": "0"}
DIRECT_INGRESS_SWITCH = "RAY_SERVE_ENABLE_DIRECT_INGRESS"
DIRECT_INGRESS_ENVIRONMENT = {DIRECT_INGRESS_SWITCH: "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}


def cluster_environment(switches: ClusterSwitches) -> dict[str, str]:
    """Serve's direct-ingress switch, when the cluster's switches (settled before anything starts) turn it on."""
    return dict(DIRECT_INGRESS_ENVIRONMENT) if switches.get("serve_direct_ingress") else {}


@contextmanager
def joined_cluster() -> Iterator[None]:
    """On a cluster the sweep joined, shut down on leaving the Serve the sweep started there (Serve is detached: it
    would outlive the sweep); a Serve that was running before the sweep is left alone."""
    was_running = serve_running()
    yield
    if not was_running:
        shutdown_idle_serve()


def serve_running() -> bool:
    from ray.serve.context import _get_global_client

    try:
        return _get_global_client(raise_if_no_controller_running=False) is not None
    except Exception:  # noqa: BLE001 - no Serve controller reachable
        return False


def shutdown_idle_serve() -> None:
    """Shut down the Ray Serve this sweep started on a joined cluster, unless other apps still run on it."""
    from ray import serve

    if not serve_running():
        return
    try:
        apps = serve.status().applications
    except Exception:  # noqa: BLE001 - a dying controller: nothing to keep alive
        apps = {}
    if apps:
        log.info("leaving Ray Serve running: applications %s are still deployed", sorted(apps))
        return
    serve.shutdown()
    log.info("shut down the Ray Serve instance this sweep started")

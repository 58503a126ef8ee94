"""A server owned by a host actor on the tier's node (Triton, the FastAPI service, TorchServe): the actor placed with
a bounded wait, and stopped whatever state it is in, its server's logs brought back. The host's own process dies with
it (parent-death signal), so killing the actor never leaves a server behind."""

from __future__ import annotations

import logging
from typing import Any

from serving.backend import BackendContext

log = logging.getLogger(__name__)
STOP_MARGIN_S = 30.0  # beyond the server's own stop timeout: the actor call itself
COUNTERS_TIMEOUT_S = 30.0


def place_host(host_class: type, options: dict[str, Any], args: tuple[Any, ...], context: BackendContext,
               what: str) -> Any:
    """The actor of `host_class(*args)` with Ray `options`, once it runs on its node: a node whose resources are taken
    leaves an actor pending silently, so this fails (the actor killed) after `context.start_timeout_s`."""
    import ray

    actor = ray.remote(host_class).options(**options).remote(*args)
    try:
        ray.get(actor.where.remote(), timeout=context.start_timeout_s)
    except ray.exceptions.GetTimeoutError as exc:
        ray.kill(actor)
        raise TimeoutError(f"{context.name}: the {what} host actor is still pending after {context.start_timeout_s:g} "
                           f"s; it asks for {options}: are the node's resources taken?") from exc
    return actor


def stop_host(actor: Any, context: BackendContext, what: str) -> dict[str, str]:
    """Stop the host's server (its logs by file name), then kill the actor; a dead or stuck actor is killed all the
    same (its server dies with it) and gives no logs. None: no host, nothing to stop."""
    import ray

    if actor is None:
        return {}
    try:
        return ray.get(actor.stop.remote(context.stop_timeout_s), timeout=context.stop_timeout_s + STOP_MARGIN_S)
    except Exception as exc:  # noqa: BLE001 - the actor may be dead; its server dies with it (parent-death signal)
        log.warning("%s: stopping the %s host failed (%s); killing the actor", context.name, what, exc)
        return {}
    finally:
        ray.kill(actor)


def host_counters(actor: Any) -> dict[str, float]:
    """The server's cumulative counters (`Backend.server_counters`), scraped by its host on the server's node: the
    metrics port listens on the node's loopback."""
    import ray

    return ray.get(actor.counters.remote(), timeout=COUNTERS_TIMEOUT_S)

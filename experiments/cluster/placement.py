"""Where a tier job runs: it holds one node of its tier for the whole job (a lease, so two jobs never measure
on one node at once), pins its servers to that node, and places its client actors there too
(`clients.placement=colocated`) or on client-pool nodes (`separate`). Nothing waits forever: a placement that
cannot fit fails at once, one that stays pending fails after a timeout, both saying what was asked for."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from experiments.cluster.connection import ClusterView, TierUnavailableError
from experiments.cluster.node_loss import NodeLoss, probe_node
from experiments.cluster.tiers import CLIENT_POOL_RESOURCE, SLIVER, placement_options, tier_resource
from experiments.config.choices import ClientPlacement
from serving.node import current_location

log = logging.getLogger(__name__)

# Share of a node's tier resource (nodes declare 1) a tier job holds: a second job of the tier needs another
# node, while the job's own actors (SLIVER each) still fit beside it.
LEASE_SHARE = 0.9
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class PlacementError(RuntimeError):
    """An actor or replica cannot be placed, or stayed pending: what it asked for and what the nodes have."""


class NodeLease:
    """Holds most of a tier node's tier resource while the tier job runs; reports where it is."""

    def where(self) -> dict[str, str]:
        return current_location()


@dataclass
class TierPlacement:
    tier: str
    node_id: str
    hostname: str
    emulated: bool
    client_placement: str
    server_options: dict[str, Any]
    client_options: dict[str, Any]
    address: str = ""
    lease: Any = None  # the NodeLease actor holding the node: it answers while the node is alive

    def lost(self) -> NodeLoss | None:
        """None while the held node answers; else what became of it (`experiments.cluster.node_loss`)."""
        return probe_node(self.lease, self.tier, self.node_id, self.address) if self.lease is not None else None

    @property
    def emulated_tag(self) -> str:
        return "true" if self.emulated else "false"

    def tier_params(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "emulated": self.emulated_tag, "client_placement": self.client_placement}

    def client_params(self, clients: list[dict[str, str]]) -> dict[str, Any]:
        """Trial params saying where the load came from (one entry per client actor the trial used)."""
        return {"client_placement": self.client_placement,
                "client_node_ids": ",".join(c["node_id"] for c in clients),
                "client_hostnames": ",".join(c["hostname"] for c in clients)}


def _cpus(node: dict[str, Any]) -> float:
    return float(node.get("Resources", {}).get("CPU", 0.0))


def lease_tier_node(tier: str, view: ClusterView, timeout_s: float) -> tuple[Any, dict[str, str]]:
    """A NodeLease actor on a free node of `tier` and where it is; waits (with progress) while others hold them."""
    import ray

    nodes = view.tiers.get(tier, [])
    if not any(view.node(n)["Resources"].get(tier_resource(tier), 0) >= LEASE_SHARE for n in nodes):
        raise PlacementError(f"gpu={tier}: the tier's nodes declare less than {LEASE_SHARE} of {tier_resource(tier)}; "
                             f"start them with `python -m runners.node --tier {tier}` (declares 1)")
    lease = ray.remote(NodeLease).options(num_cpus=0, resources={tier_resource(tier): LEASE_SHARE}).remote()
    ref = lease.where.remote()
    started = time.monotonic()
    while True:
        ready, _ = ray.wait([ref], timeout=min(30.0, max(0.1, timeout_s - (time.monotonic() - started))))
        if ready:
            return lease, ray.get(ref)
        waited = time.monotonic() - started
        if waited >= timeout_s:
            ray.kill(lease)
            raise PlacementError(f"gpu={tier}: all {len(nodes)} node(s) of the tier were held by other sweeps for "
                                 f"{waited:.0f} s (cluster.lease_timeout_s={timeout_s:g}); add a node of the tier "
                                 "or try again later")
        log.info("gpu=%s: every node of the tier is held by another job (of this sweep or another); waited "
                 "%.0f s (up to %g s)", tier, waited, timeout_s)


def client_options(cfg: Any, view: ClusterView, tier: str, node_id: str) -> dict[str, Any]:
    """Ray options for the client actors, after checking they can fit and reach the servers."""
    placement = cfg.clients.placement
    exp = cfg.experiment
    actors = exp.client_actors or exp.max_client_actors  # 0: automatic, up to max_client_actors
    demand = actors * exp.client_num_cpus
    if placement == ClientPlacement.COLOCATED:
        node = view.node(node_id)
        if _cpus(node) < demand:
            raise PlacementError(
                f"{actors} client actors (experiment.client_actors / max_client_actors) x "
                f"experiment.client_num_cpus={exp.client_num_cpus} = {demand:g} CPU, but node {node_id[:12]} of "
                f"tier {tier} has {_cpus(node):g} CPU: lower them")
        return placement_options(tier, node_id)
    pool = view.client_pool()
    if not pool:
        raise TierUnavailableError(
            "clients.placement=separate: no live client-pool node in the Ray cluster. Join one with "
            "`python -m runners.node --address HEAD:6379 --client-pool`, or use clients.placement=colocated")
    if sum(_cpus(n) for n in pool) < demand or max(_cpus(n) for n in pool) < exp.client_num_cpus:
        raise PlacementError(
            f"{actors} client actors (experiment.client_actors / max_client_actors) x "
            f"experiment.client_num_cpus={exp.client_num_cpus} = {demand:g} CPU, but the client pool has "
            f"{[_cpus(n) for n in pool]} CPU per node: lower them")
    server_address = view.node(node_id).get("NodeManagerAddress")
    remote = [n for n in pool if n.get("NodeManagerAddress") != server_address]
    if remote and cfg.serving.host in LOOPBACK_HOSTS:
        raise PlacementError(
            f"serving.host={cfg.serving.host!r}: servers on {server_address} would listen on loopback only, out of "
            f"reach of client-pool nodes on {sorted({n.get('NodeManagerAddress') for n in remote})}. Set "
            "serving.host=0.0.0.0 (clients then use the server node's address; firewall the ports) or "
            "clients.placement=colocated")
    return {"resources": {CLIENT_POOL_RESOURCE: SLIVER}}


@contextmanager
def hold_tier_node(cfg: Any, view: ClusterView) -> Iterator[TierPlacement]:
    """Hold a node of the tier for the job; yields where servers and clients go. Releases it at the end."""
    import ray

    tier = cfg.gpu.name
    lease, where = lease_tier_node(tier, view, cfg.cluster.lease_timeout_s)
    try:
        node_id = where["node_id"]
        placement = TierPlacement(
            tier=tier, node_id=node_id, hostname=where["hostname"], emulated=view.is_emulated(node_id),
            client_placement=cfg.clients.placement, server_options=placement_options(tier, node_id),
            client_options=client_options(cfg, view, tier, node_id),
            address=str(view.node(node_id).get("NodeManagerAddress", "")), lease=lease)
        log.info("gpu=%s: holding node %s (%s)%s; clients %s", tier, node_id[:12], where["hostname"],
                 " [emulated]" if placement.emulated else "", cfg.clients.placement)
        yield placement
    finally:
        ray.kill(lease)

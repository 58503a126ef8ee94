"""Where a tier job runs: it holds one node of its tier for the whole job (a lease, so two jobs never measure
on one node at once), pins its servers to that node, and places its client actors there too
(`clients.placement=colocated`) or on client-pool nodes (`separate`). Nothing waits forever: a placement that
cannot fit fails at once, one that stays pending fails after a timeout, both saying what was asked for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments.cluster.autoscaling import read_autoscaling
from experiments.cluster.connection import ClusterView, TierUnavailableError
from experiments.cluster.node_loss import NodeLoss, probe_node
from experiments.cluster.tiers import (
    CLIENT_POOL_RESOURCE,
    NODE_LOCK_RESOURCE,
    SLIVER,
    placement_options,
    tier_resource,
)
from experiments.cluster.waiting import NodeWaitTimeout, minutes, wait_for_ref
from experiments.config.choices import ClientPlacement
from serving.node import NodeInfo, current_location

if TYPE_CHECKING:
    from experiments.config.schema import ClusterConfig, TierbenchConfig

log = logging.getLogger(__name__)

# Share of a node's tier resource (nodes declare 1) a tier job holds: a second job of the tier needs another
# node, while the job's own actors (SLIVER each) still fit beside it.
LEASE_SHARE = 0.9
LEASE_TRIES = 3  # a lease Ray cancelled before it ran is asked for again, up to this many times in all
NEVER_RAN = "never ran"  # in Ray's ActorDiedError for an actor cancelled before it started
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
    view: ClusterView | None = None  # the live nodes once the node was held (it may have just started)

    def describe(self, timeout_s: float, meanwhile: Callable[[], object] | None = None) -> NodeInfo:
        """The held node as a task run there sees it (`serving.probe`). A fresh Ray worker imports torch and every
        backend's packages first, at Ray's worker niceness (15): on a node whose CPUs other work keeps busy that took
        66 s where it takes 3 s idle, so the wait says so every PROGRESS_EVERY_S and fails with the fix. `meanwhile`
        runs here while the task runs there: the driver's own start-up work overlaps the node's."""
        import ray

        from serving.probe import describe_node

        ref = ray.remote(describe_node).options(num_cpus=0, **self.server_options).remote()
        if meanwhile is not None:
            meanwhile()

        def progress(waited: float) -> None:
            log.info("gpu=%s: node %s is still describing itself (a new worker imports torch and the backends' "
                     "packages): %.0f s of up to %g s (cluster.schedule_timeout_s)", self.tier, self.node_id[:12],
                     waited, timeout_s)

        if wait_for_ref(ref, timeout_s, progress) is not None:
            ray.cancel(ref, force=True)
            raise PlacementError(
                f"gpu={self.tier}: node {self.node_id[:12]} ({self.hostname}) did not describe itself within "
                f"cluster.schedule_timeout_s={timeout_s:g} s: the task imports torch and the backends' packages "
                "in a new Ray worker, which runs at niceness 15 behind anything else busy on the node. Free the "
                "node's CPUs, or raise cluster.schedule_timeout_s (e.g. 300)")
        return ray.get(ref)

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


@dataclass
class NodeTime:
    """How long a tier job kept a node up, the cost of the benchmark itself: from asking for it when the autoscaler
    had to start it (the node is billed while it boots), else from getting it, to letting it go."""

    asked_at: float
    scaled_up: bool  # no live node of the tier when the job asked: the autoscaler started one for it
    node_id: str = ""
    placed_at: float | None = None
    released_at: float | None = None

    @property
    def uptime_s(self) -> float:
        start = self.asked_at if self.scaled_up else (self.placed_at or self.asked_at)
        return max(0.0, (self.released_at or time.time()) - start)


def takes_node_whole(tier: str, view: ClusterView, cluster_cfg: ClusterConfig) -> bool:
    """Whether the lease asks for the node's lock too: when every node that could answer it declares one, the live
    nodes of the tier or, with none alive, the autoscaler's node types that offer it. Without the lock in the demand
    the autoscaler would answer a card's tier and its shared tier with one new node, and both jobs would measure
    there at once."""
    nodes = view.tiers.get(tier, [])
    if nodes:
        return all(view.node(n)["Resources"].get(NODE_LOCK_RESOURCE, 0) >= 1 for n in nodes)
    autoscaling = read_autoscaling(cluster_cfg)
    offering = autoscaling.offering(tier) if autoscaling else []
    return bool(offering) and all(t.locks_node for t in offering)


def lease_tier_node(tier: str, view: ClusterView, cluster_cfg: ClusterConfig) -> tuple[Any, dict[str, str], NodeTime]:
    """A NodeLease actor on a free node of `tier`, where it is, and since when the job holds a node.

    With no live node of the tier, the pending lease is the demand the cluster's autoscaler answers by starting a
    node of a type that declares the tier: wait for it up to `cluster.scale_up_timeout_s`. With live nodes all held
    by other jobs, wait up to `cluster.lease_timeout_s`. Progress is logged either way; on timeout the lease is
    killed, which withdraws the demand."""
    import ray

    nodes = view.tiers.get(tier, [])
    if nodes and not any(view.node(n)["Resources"].get(tier_resource(tier), 0) >= LEASE_SHARE for n in nodes):
        raise PlacementError(f"gpu={tier}: the tier's nodes declare less than {LEASE_SHARE} of {tier_resource(tier)}; "
                             f"start them with `python -m runners.node --tier {tier}` (declares 1)")
    scale_up = not nodes
    timeout_s = cluster_cfg.scale_up_timeout_s if scale_up else cluster_cfg.lease_timeout_s
    node_time = NodeTime(asked_at=time.time(), scaled_up=scale_up)
    resources = {tier_resource(tier): LEASE_SHARE}
    if takes_node_whole(tier, view, cluster_cfg):
        resources[NODE_LOCK_RESOURCE] = 1.0  # the node whole: no other tier's job measures on it meanwhile
    if scale_up:
        log.info("gpu=%s: no live node of tier %s: asking the autoscaler for one; limit %s "
                 "(cluster.scale_up_timeout_s)", tier, tier, minutes(timeout_s))

    def progress(waited: float) -> None:
        if scale_up:
            log.info("gpu=%s: waiting for a node of tier %s: %s, limit %s", tier, tier, minutes(waited),
                     minutes(timeout_s))
        else:
            log.info("gpu=%s: every node of the tier is held by another job (of this sweep or another); waited "
                     "%.0f s (up to %g s)", tier, waited, timeout_s)

    for attempt in range(1, LEASE_TRIES + 1):
        lease = ray.remote(NodeLease).options(num_cpus=0, resources=resources).remote()
        ref = lease.where.remote()
        waited = wait_for_ref(ref, timeout_s, progress)
        if waited is not None or not _cancelled_before_it_ran(ref) or attempt == LEASE_TRIES:
            break
        log.warning("gpu=%s: Ray cancelled the node lease before it ran (its control store took it for "
                    "unreferenced, seen on a starved machine); asking again (%d of %d)", tier, attempt + 1,
                    LEASE_TRIES)
    if waited is not None:
        ray.kill(lease)
        if scale_up:
            raise NodeWaitTimeout(
                f"gpu={tier}: the autoscaler started no node of tier {tier} within {minutes(timeout_s)} "
                f"(cluster.scale_up_timeout_s={timeout_s:g}); the tier's demand is withdrawn. `ray status` on "
                "the head and the autoscaler's log (logs/monitor.* in the head's Ray session folder) say why: "
                "cloud quota or capacity, or the cluster's max_workers reached")
        raise PlacementError(f"gpu={tier}: all {len(nodes)} node(s) of the tier were held by other tier "
                             "jobs (another sweep's, or this sweep's other tiers of the same node) for "
                             f"{waited:.0f} s (cluster.lease_timeout_s={timeout_s:g}); add a node of the tier "
                             "or try again later")
    where = ray.get(ref)
    node_time.node_id, node_time.placed_at = where["node_id"], time.time()
    if scale_up:
        log.info("gpu=%s: node %s of tier %s is up after %s", tier, where["node_id"][:12], tier,
                 minutes(node_time.placed_at - node_time.asked_at))
    return lease, where, node_time


def _cancelled_before_it_ran(ref: Any) -> bool:
    """Whether the ready `ref` is the lease's death before it ran, "all references removed" while this job still
    held it: seen on a starved machine, where Ray's control store lost touch with the lease's owner. A lease that
    ran and died (its node lost) is not this: it is raised as it is."""
    import ray
    from ray.exceptions import ActorDiedError

    try:
        ray.get(ref, timeout=0)
    except ActorDiedError as died:
        return NEVER_RAN in str(died)
    return False


def client_options(cfg: TierbenchConfig, view: ClusterView, tier: str, node_id: str) -> dict[str, Any]:
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
def hold_tier_node(cfg: TierbenchConfig, view: ClusterView,
                   on_release: Callable[[NodeTime], None] | None = None) -> Iterator[TierPlacement]:
    """Hold a node of the tier for the job; yields where servers and clients go. Releases it at the end, then
    tells `on_release` how long the job kept the node up."""
    import ray

    tier = cfg.gpu.name
    lease, where, node_time = lease_tier_node(tier, view, cfg.cluster)
    try:
        node_id = where["node_id"]
        if not any(n["NodeID"] == node_id for n in view.nodes):  # a node the autoscaler just started
            view = ClusterView.read(view.emulated_config)
        placement = TierPlacement(
            tier=tier, node_id=node_id, hostname=where["hostname"], emulated=view.is_emulated(node_id),
            client_placement=cfg.clients.placement, server_options=placement_options(tier, node_id),
            client_options=client_options(cfg, view, tier, node_id),
            address=str(view.node(node_id).get("NodeManagerAddress", "")), lease=lease, view=view)
        log.info("gpu=%s: holding node %s (%s)%s; clients %s", tier, node_id[:12], where["hostname"],
                 " [emulated]" if placement.emulated else "", cfg.clients.placement)
        yield placement
    finally:
        ray.kill(lease)  # nothing of this job holds the node now: an autoscaler may let it go when idle
        node_time.released_at = time.time()
        if on_release is not None:
            on_release(node_time)

"""An emulated multi-node Ray cluster on this machine (`cluster=emulated`): a head plus one node per entry of
`cluster.nodes`, each declaring its tier (or the client pool) like a rented node joined with `runners.node`.

For development and tests of multi-tier sweeps without GPUs: every node runs on the same CPUs, so its numbers
say nothing about a GPU tier; each node declares the emulated marker and every result is tagged emulated=true.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from experiments.cluster.tiers import TIER_LABEL, node_declaration

if TYPE_CHECKING:
    from experiments.config.schema import ClusterConfig

log = logging.getLogger(__name__)

def describe_nodes(cluster_cfg: ClusterConfig) -> str:
    roles = [node.tier or ("client pool" if node.client_pool else "plain") for node in cluster_cfg.nodes]
    return f"head + {len(roles)} nodes ({', '.join(roles)})"


def start_emulated_cluster(cluster_cfg: ClusterConfig) -> Any:
    """A started `ray.cluster_utils.Cluster` (it stops its processes at exit should nobody call shutdown)."""
    from ray.cluster_utils import Cluster

    started = time.monotonic()
    log.info("starting an emulated Ray cluster on this machine: %s", describe_nodes(cluster_cfg))
    # Nodes keep Ray's own choice of address (this machine's): with 127.0.0.1, `ray.init` rewrites the head's
    # address to that one and then waits forever for a GCS that is not there.
    common = {"object_store_memory": cluster_cfg.object_store_memory}
    cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
        **common, "num_cpus": cluster_cfg.num_cpus or 0, "include_dashboard": False,
        "resources": node_declaration([], emulated=True)})
    try:
        for node in cluster_cfg.nodes:
            tiers = [node.tier] if node.tier else []
            cluster.add_node(**common, num_cpus=node.num_cpus,
                             resources=node_declaration(tiers, client_pool=node.client_pool, emulated=True),
                             labels={TIER_LABEL: node.tier} if node.tier else {})
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    log.info("emulated Ray cluster up at %s in %.1f s", cluster.address, time.monotonic() - started)
    return cluster

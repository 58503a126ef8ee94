"""The tiers a cluster's autoscaler can start: its node types, read from the cluster config it was launched with
(`experiments.config.autoscaling` reads one).

Ray 2.60's autoscaler does not publish its node types to the GCS (`ray._private.state.state.get_cluster_config()`
stays empty), so they are read from the config itself: the file `cluster.autoscaling_config` names (a Ray cluster
YAML as `ray up` takes, or a KubeRay `RayCluster` manifest), else the bootstrap config `ray up` leaves on the head
node (`~/ray_bootstrap_config.yaml`), read there by a small Ray task. A node type offers a tier when its resources
declare `tier_<name>` and it may run at least one worker; the pending lease actor of a tier job is then the demand
the autoscaler answers (`experiments.cluster.placement`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from experiments.config.autoscaling import (
    BOOTSTRAP_CONFIG,
    CONFIG_KEY,
    Autoscaling,
    load_autoscaling,
    parse_autoscaling,
)

if TYPE_CHECKING:
    from experiments.config.schema import ClusterConfig

log = logging.getLogger(__name__)


def _read_head_bootstrap_config() -> str | None:
    path = Path(BOOTSTRAP_CONFIG).expanduser()
    return path.read_text() if path.is_file() else None


def read_autoscaling(cluster_cfg: ClusterConfig, timeout_s: float = 30.0) -> Autoscaling | None:
    """The autoscaler's node types for a joined cluster (`cluster.address`); None when there is no autoscaler
    config to read (a hand-joined cluster, or one this program starts itself)."""
    if cluster_cfg.autoscaling_config:
        return load_autoscaling(str(cluster_cfg.autoscaling_config))
    if not cluster_cfg.address:
        return None
    import ray

    task = ray.remote(_read_head_bootstrap_config).options(num_cpus=0, resources={"node:__internal_head__": 0.001})
    try:
        text = ray.get(task.remote(), timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - the head did not answer: judge by the live nodes alone
        log.warning("could not read the autoscaler's node types (%s on the head node: %s); only live nodes count. "
                    "Name the cluster YAML with %s=PATH", BOOTSTRAP_CONFIG, exc, CONFIG_KEY)
        return None
    return parse_autoscaling(yaml.safe_load(text), f"{BOOTSTRAP_CONFIG} on the head node") if text else None

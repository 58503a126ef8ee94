"""The cloud cluster config is a valid Ray cluster-launcher file whose node types declare tiers the sweep knows."""

from __future__ import annotations

import yaml

from experiments.cluster.tiers import CLIENT_POOL_RESOURCE, RESOURCE_PREFIX, TIER_LABEL, known_tiers
from serving.paths import REPO_ROOT


def test_gcp_cluster_yaml_passes_rays_schema_and_declares_known_tiers() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((REPO_ROOT / "deploy" / "ray-cluster-gcp.yaml").read_text())
    validate_config(prepare_config(raw))
    tiers, pools = set(), 0
    for node_type in raw["available_node_types"].values():
        declared = [r.removeprefix(RESOURCE_PREFIX) for r in node_type["resources"] if r.startswith(RESOURCE_PREFIX)]
        for tier in declared:
            assert node_type["labels"][TIER_LABEL] == tier
            assert node_type["resources"]["GPU"] >= 1
        tiers.update(declared)
        pools += CLIENT_POOL_RESOURCE in node_type["resources"]
    assert tiers and tiers <= set(known_tiers()) and pools == 1
    assert raw["available_node_types"][raw["head_node_type"]]["resources"] == {"CPU": 0}

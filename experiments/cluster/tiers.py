"""GPU tiers as Ray sees them: each tier node declares the custom resource `tier_<name>` (and the label
`gpu-tier=<name>`); actors of a tier ask for a sliver of it, pinned to the one node the tier job holds. Ray's own
`accelerator_type` is not used (it names an RTX 4090 `G`). Client-pool nodes declare `client_pool`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.config.compose import CONF_DIR
from experiments.config.schema import RESOURCE_PREFIX, GpuTierConfig

TIER_LABEL = "gpu-tier"
CLIENT_POOL_RESOURCE = "client_pool"
# Declared by every node of an emulated cluster (several nodes on one machine): results get emulated=true.
EMULATED_RESOURCE = "tierbench_emulated"
NODE_ID_LABEL = "ray.io/node-id"  # Ray's own label on every node (Ray >= 2.49)
# Enough for every actor and replica a tier job places: each asks for this much of its tier's resource.
SLIVER = 0.001
CONF_GPU_DIR = CONF_DIR / "gpu"


def tier_resource(tier: str) -> str:
    return f"{RESOURCE_PREFIX}{tier}"


def placement_options(tier: str, node_id: str | None = None) -> dict[str, Any]:
    """Ray actor options that put an actor on a node of `tier`; on that very node when `node_id` is given.

    Only `resources` and `label_selector`, the options Ray Serve also accepts for its replicas."""
    options: dict[str, Any] = {"resources": {tier_resource(tier): SLIVER}}
    if node_id:
        options["label_selector"] = {NODE_ID_LABEL: node_id}
    return options


def node_declaration(tiers: list[str], client_pool: bool = False, emulated: bool = False) -> dict[str, float]:
    """The custom resources a node starts with to declare its tiers (and its other roles)."""
    resources = {tier_resource(t): 1.0 for t in tiers}
    if client_pool:
        resources[CLIENT_POOL_RESOURCE] = 1.0
    if emulated:
        resources[EMULATED_RESOURCE] = 1.0
    return resources


def known_tiers(conf_dir: Path = CONF_GPU_DIR) -> dict[str, GpuTierConfig]:
    """Every tier config under conf/gpu/, by name, typed by its schema."""
    return {path.stem: _tier(path) for path in sorted(conf_dir.glob("*.yaml"))}


def _tier(path: Path) -> GpuTierConfig:
    values = OmegaConf.load(path)
    values.pop("defaults", None)  # the file's defaults list names its schema, merged here
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GpuTierConfig), values))


def gpu_matches_tier(tier_cfg: GpuTierConfig, gpu_names: tuple[str, ...] | list[str]) -> bool:
    """Whether one of these GPU names matches the tier's `gpu_name_patterns` (case-insensitive substrings)."""
    patterns = [p.lower() for p in tier_cfg.gpu_name_patterns]
    return any(p in gpu.lower() for p in patterns for gpu in gpu_names)


def tiers_for_gpu(gpu_names: tuple[str, ...] | list[str], conf_dir: Path = CONF_GPU_DIR) -> list[str]:
    """Tiers whose `gpu_name_patterns` match one of this node's GPU names."""
    return [name for name, tier in known_tiers(conf_dir).items() if gpu_matches_tier(tier, gpu_names)]


def tier_gpu_problem(tier_cfg: GpuTierConfig, gpu_names: tuple[str, ...] | list[str]) -> str | None:
    """Why a node with these GPUs is not a node of this tier; None when it is, or when the tier needs no GPU
    (`requires_gpu: false`, e.g. `local`). One rule for runners.node, runners.doctor and the tier job."""
    if not tier_cfg.requires_gpu or gpu_matches_tier(tier_cfg, gpu_names):
        return None
    found = f"GPU {', '.join(gpu_names)}" if gpu_names else "no NVIDIA GPU"
    return (f"tier {tier_cfg.name} ({tier_cfg.display_name}) needs a GPU matching "
            f"{list(tier_cfg.gpu_name_patterns)}, and this node has {found}")


def tiers_of_nodes(nodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Live nodes by tier, from `ray.nodes()`."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        for resource in node.get("Resources", {}):
            if resource.startswith(RESOURCE_PREFIX):
                out.setdefault(resource.removeprefix(RESOURCE_PREFIX), []).append(node["NodeID"])
    return out

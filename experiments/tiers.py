"""GPU tiers as Ray sees them: each tier node declares the custom resource `tier_<name>`; actors of a tier ask
for a sliver of it. Ray's own `accelerator_type` is not used (it names an RTX 4090 `G`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

RESOURCE_PREFIX = "tier_"
# Enough for every actor and replica a tier job places: each asks for this much of its tier's resource.
SLIVER = 0.001
CONF_GPU_DIR = Path(__file__).resolve().parents[1] / "conf" / "gpu"


def tier_resource(tier: str) -> str:
    return f"{RESOURCE_PREFIX}{tier}"


def placement_options(tier: str) -> dict[str, Any]:
    """Ray actor options that put an actor on a node of `tier`."""
    return {"resources": {tier_resource(tier): SLIVER}}


def known_tiers(conf_dir: Path = CONF_GPU_DIR) -> dict[str, Any]:
    """Every tier config under conf/gpu/, by name."""
    return {path.stem: OmegaConf.load(path) for path in sorted(conf_dir.glob("*.yaml"))}


def tiers_for_gpu(gpu_names: tuple[str, ...] | list[str], conf_dir: Path = CONF_GPU_DIR) -> list[str]:
    """Tiers whose `gpu_name_patterns` match one of this node's GPU names (case-insensitive substrings)."""
    matched = []
    for name, tier in known_tiers(conf_dir).items():
        patterns = [p.lower() for p in tier.get("gpu_name_patterns", [])]
        if any(p in gpu.lower() for p in patterns for gpu in gpu_names):
            matched.append(name)
    return matched


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

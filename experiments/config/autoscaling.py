"""What the autoscaler of a cluster can start, as its cluster config says: the node types of a Ray cluster YAML (as
`ray up` takes it) or of a KubeRay `RayCluster` manifest, and the tiers they offer. A node type offers a tier when its
resources declare `tier_<name>` and it may run at least one worker; one that also declares `tierbench_node` runs one
tier job at a time, as a node `python -m runners.node` starts does. Read here from a file on this machine (the
`cluster.autoscaling_config` that validation checks); `experiments.cluster.autoscaling` reads the one on the head node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.config.errors import ConfigError
from experiments.config.schema import NODE_LOCK_RESOURCE, RESOURCE_PREFIX

BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"  # where `ray up` puts the cluster config on the head node
CONFIG_KEY = "cluster.autoscaling_config"


@dataclass(frozen=True)
class NodeType:
    name: str
    tiers: tuple[str, ...]
    max_workers: int  # -1: no limit of its own
    locks_node: bool = False  # declares NODE_LOCK_RESOURCE: a tier job's lease can take its node whole

    def describe(self) -> str:
        tiers = f"tier {', '.join(self.tiers)}" if self.tiers else "no tier"
        most = "no limit" if self.max_workers < 0 else f"up to {self.max_workers}"
        return f"{self.name} ({tiers}, {most})"


@dataclass(frozen=True)
class Autoscaling:
    """What the autoscaler can start, and where that was read."""

    source: str
    node_types: tuple[NodeType, ...]
    idle_timeout_s: float | None = None

    def tiers(self) -> set[str]:
        return {tier for node_type in self.node_types if node_type.max_workers != 0 for tier in node_type.tiers}

    def offering(self, tier: str) -> list[NodeType]:
        return [t for t in self.node_types if tier in t.tiers and t.max_workers != 0]

    def types_for(self, tier: str) -> list[str]:
        return [t.name for t in self.offering(tier)]

    def describe(self) -> str:
        types = "; ".join(t.describe() for t in self.node_types) or "none"
        return f"node types in {self.source}: {types}"


def _tiers(resources: dict[str, Any] | None) -> tuple[str, ...]:
    return tuple(sorted(r.removeprefix(RESOURCE_PREFIX) for r in (resources or {}) if r.startswith(RESOURCE_PREFIX)))


def _node_type(name: str, resources: dict[str, Any] | None, max_workers: int) -> NodeType:
    resources = resources or {}
    return NodeType(name, _tiers(resources), max_workers, float(resources.get(NODE_LOCK_RESOURCE, 0)) >= 1)


def _ray_cluster_yaml(doc: dict[str, Any], source: str) -> Autoscaling:
    cluster_max = int(doc.get("max_workers", -1))
    head = doc.get("head_node_type")
    types = []
    for name, spec in (doc.get("available_node_types") or {}).items():
        spec = spec or {}
        most = 0 if name == head else int(spec.get("max_workers", cluster_max))
        types.append(_node_type(name, spec.get("resources"), most))
    idle = doc.get("idle_timeout_minutes")
    return Autoscaling(source, tuple(types), None if idle is None else float(idle) * 60)


def _start_param_resources(value: Any) -> dict[str, Any]:
    """KubeRay's `rayStartParams.resources`: a JSON object in a string, often quoted once more for the shell."""
    if isinstance(value, dict):
        return value
    text = str(value or "").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].replace('\\"', '"')
    return json.loads(text) if text else {}


def _kuberay_manifest(doc: dict[str, Any], source: str) -> Autoscaling:
    spec = doc.get("spec") or {}
    types = []
    for group in spec.get("workerGroupSpecs") or []:
        resources = {**_start_param_resources((group.get("rayStartParams") or {}).get("resources")),
                     **(group.get("resources") or {})}
        types.append(_node_type(str(group.get("groupName", "?")), resources, int(group.get("maxReplicas", 0))))
    idle = (spec.get("autoscalerOptions") or {}).get("idleTimeoutSeconds")
    return Autoscaling(source, tuple(types), None if idle is None else float(idle))


def parse_autoscaling(doc: Any, source: str) -> Autoscaling:
    """Node types of a Ray cluster YAML (`available_node_types`) or a KubeRay RayCluster (`workerGroupSpecs`)."""
    if isinstance(doc, dict) and doc.get("kind") == "RayCluster":
        return _kuberay_manifest(doc, source)
    if isinstance(doc, dict) and isinstance(doc.get("available_node_types"), dict):
        return _ray_cluster_yaml(doc, source)
    raise ConfigError(f"{CONFIG_KEY}={source!r} is not allowed: it has neither `available_node_types` (a Ray cluster "
                      "YAML, as `ray up` takes) nor `kind: RayCluster` (KubeRay); name the file the cluster was "
                      "launched with")


def load_autoscaling(path: str) -> Autoscaling:
    """The node types of the cluster config at `path` (on this machine); ConfigError naming the key otherwise."""
    file = Path(path).expanduser()
    try:
        doc = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{CONFIG_KEY}={path!r} is not allowed: cannot read it ({exc}). Give the cluster YAML the "
                          "cluster was launched with (`ray up <file>`), or leave it null to read "
                          f"{BOOTSTRAP_CONFIG} on the head node") from None
    try:
        return parse_autoscaling(doc, str(path))
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{CONFIG_KEY}={path!r} is not allowed: its node types cannot be read ({exc})") from None

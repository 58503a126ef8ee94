"""The deployment configs under deploy/ are what Ray's own code accepts, offer only tiers the sweep knows as nodes the
autoscaler may start (min 0, max > 0), each on a machine whose GPU is its tier's card, and install a GPU stack of the
CUDA major their images carry. No Ray started."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import yaml

from experiments.cluster.tiers import (
    CLIENT_POOL_RESOURCE,
    RESOURCE_PREFIX,
    TIER_LABEL,
    known_tiers,
    node_declaration,
    shared_tiers_of,
    tier_gpu_problem,
)
from serving.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
CLUSTER_YAMLS = ["ray-cluster-gcp.yaml", "ray-cluster-aws.yaml"]
KUBERAY_MANIFEST = DEPLOY / "kuberay-raycluster.yaml"
BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"  # where `ray up` puts the config; the sweep's tier check reads it
# CUDA of NVIDIA's Triton containers, from their release notes ("Release 24.10 is based on CUDA 12.6.2 which requires
# NVIDIA Driver release 560 or later"). A new container tag fails the test below until its row is added here.
TRITON_CONTAINER_CUDA = {"24.10": ((12, 6), 560)}
# The GPU each machine type the deploy files rent carries, as nvidia-smi --query-gpu=name reports it (None: no GPU):
# the sweep's tier check refuses a node whose GPU is not in its tier's gpu_names. GCP's A2 machines carry the A100
# SXM4 40GB (a2-ultragpu the 80GB), A3 the H100 80GB SXM; EC2's p4d the A100 SXM4 40GB (p4de the 80GB), p5 the H100
# 80GB SXM; GKE names its GPU node pools' cards in the node label cloud.google.com/gke-accelerator. A machine type
# the deploy files name and this table lacks fails the tests below until its row is added.
MACHINE_GPU: dict[str, str | None] = {
    "a2-highgpu-1g": "NVIDIA A100-SXM4-40GB",  # GCP
    "a3-highgpu-1g": "NVIDIA H100 80GB HBM3",
    "n2-standard-8": None,
    "n2-standard-16": None,
    "p4d.24xlarge": "NVIDIA A100-SXM4-40GB",  # AWS
    "p5.48xlarge": "NVIDIA H100 80GB HBM3",
    "m6i.2xlarge": None,
    "c6i.4xlarge": None,
    "nvidia-tesla-a100": "NVIDIA A100-SXM4-40GB",  # GKE accelerators
    "nvidia-h100-80gb": "NVIDIA H100 80GB HBM3",
}
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
# What Kubernetes accepts as a pod name's part: KubeRay names a group's pods after it.
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def gpu_extra_cuda_major(extra: str) -> int:
    """`gpu-cu12` -> 12, for the extras pyproject.toml defines."""
    return int(re.fullmatch(r"gpu-cu(\d+)", extra).group(1))


def torch_cuda_major(version: str) -> int:
    """CUDA major of PyPI's torch build (docs/gpu-nodes.md#setting-up-a-node): 2.6-2.10 CUDA 12, 2.11 and later
    CUDA 13."""
    major, minor = (int(part) for part in version.split(".")[:2])
    assert (major, minor) >= (2, 6), f"torch {version}: older than the builds tierbench documents"
    return 12 if (major, minor) <= (2, 10) else 13


def declared_tiers(node_type: dict[str, Any]) -> list[str]:
    return [r.removeprefix(RESOURCE_PREFIX) for r in node_type.get("resources", {}) if r.startswith(RESOURCE_PREFIX)]


def tier_of(node_type: dict[str, Any]) -> str | None:
    """The card's tier a node type declares; the tiers sharing that card (`h100_sxm_shared2` beside `h100_sxm`), which
    `runners.node` declares with it, are not counted."""
    declared = declared_tiers(node_type)
    cards = [t for t in declared if t not in shared_tiers_of(declared)]
    assert len(cards) <= 1, f"one card's tier per node type (and the tiers sharing it), got {declared}"
    return cards[0] if cards else None


def assert_tier_node_types(node_types: dict[str, dict[str, Any]], head: str) -> dict[str, str]:
    """Every tier a node type declares is a conf/gpu tier needing a GPU, on GPU nodes the autoscaler may start from
    zero; the head declares no tier and no CPU (nothing is measured there). Returns node type -> tier."""
    tiers = known_tiers()
    offered = {name: tier_of(node_type) for name, node_type in node_types.items()}
    offered = {name: tier for name, tier in offered.items() if tier}
    assert offered, "no node type declares a tier_<name> resource"
    assert head not in offered and node_types[head]["resources"]["CPU"] == 0
    for name, tier in offered.items():
        node_type = node_types[name]
        assert tier in tiers, f"node type {name} declares tier_{tier}, and conf/gpu has no {tier}.yaml"
        assert tiers[tier].requires_gpu and node_type["resources"]["GPU"] >= 1, name
        assert node_type["min_workers"] == 0, f"{name}: min_workers must be 0 (started on demand, stopped when idle)"
        assert node_type["max_workers"] >= 1, f"{name}: max_workers 0 offers no node, the tier check would refuse it"
        # What `runners.node --tier` declares (the node lock included: one tier job on the node at a time)
        custom = {k: float(v) for k, v in node_type["resources"].items() if k not in ("CPU", "GPU", "memory")}
        expected = node_declaration([tier])
        assert custom == expected, f"{name}: declares {custom}, where runners.node declares {expected}"
    assert sum(CLIENT_POOL_RESOURCE in t["resources"] for t in node_types.values()) == 1
    return offered


def assert_machines_are_their_tiers(node_types: dict[str, dict[str, Any]], machines: dict[str, str | None],
                                    where: str) -> None:
    """Each node type's machine (`machines`: node type -> machine type or GKE accelerator, None where the node type
    names none) is in MACHINE_GPU, and a node type declaring tiers runs on a machine whose GPU every one of them
    accepts: the node the sweep's tier check (`tier_gpu_problem`, as `refuse_wrong_gpu` runs it) lets through.
    A node type without tiers gets a machine without a GPU."""
    tiers = known_tiers()
    for name, node_type in node_types.items():
        machine = machines.get(name)
        declared = declared_tiers(node_type)
        if machine is None:
            assert not declared, f"{where}: node type {name} declares tier {declared} and names no machine"
            continue
        assert machine in MACHINE_GPU, (f"{where}: node type {name} runs on {machine}, which MACHINE_GPU lacks: add "
                                        "the GPU nvidia-smi reports on it")
        gpu = MACHINE_GPU[machine]
        if not declared:
            assert gpu is None, f"{where}: node type {name} declares no tier on {machine}, a machine with {gpu}"
        for tier in declared:
            assert tier in tiers, f"{where}: node type {name} declares tier_{tier}, and conf/gpu has no {tier}.yaml"
            problem = tier_gpu_problem(tiers[tier], [gpu] if gpu else [])
            assert problem is None, (f"{where}: node type {name} declares tier {tier} on {machine}, whose GPU is "
                                     f"{gpu!r}, not in conf/gpu/{tier}.yaml's gpu_names {tiers[tier].gpu_names}: "
                                     f"the sweep would refuse the node ({problem})")


def cluster_yaml_machines(node_types: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    """Node type -> its machine type (GCP machineType, AWS InstanceType)."""
    return {name: spec.get("node_config", {}).get("machineType") or spec.get("node_config", {}).get("InstanceType")
            for name, spec in node_types.items()}


def installed_extras_and_torch(commands: list[str]) -> tuple[set[str], list[str]]:
    text = "\n".join(commands)
    extras = {e.strip() for group in re.findall(r"/tierbench\[([^\]]+)\]", text) for e in group.split(",")}
    return extras, re.findall(r"\btorch==([\d.]+)", text)


@pytest.mark.parametrize("name", CLUSTER_YAMLS)
def test_cluster_yaml_passes_rays_schema_and_offers_known_tiers_from_zero(name: str) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((DEPLOY / name).read_text())
    validate_config(prepare_config(raw))
    offered = assert_tier_node_types(raw["available_node_types"], raw["head_node_type"])
    for node_type, tier in offered.items():
        assert raw["available_node_types"][node_type]["labels"] == {TIER_LABEL: tier}
    assert_machines_are_their_tiers(raw["available_node_types"], cluster_yaml_machines(raw["available_node_types"]),
                                    name)
    assert raw["idle_timeout_minutes"] > 0  # written in the file, not left to Ray's default
    assert any(f"--autoscaling-config={BOOTSTRAP_CONFIG}" in c for c in raw["head_start_ray_commands"])


@pytest.mark.parametrize("name", CLUSTER_YAMLS)
def test_gpu_nodes_install_the_stack_of_their_images_cuda_major(name: str) -> None:
    raw = yaml.safe_load((DEPLOY / name).read_text())
    defined = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    tag = re.fullmatch(r"nvcr\.io/nvidia/tritonserver:(\d\d\.\d\d)-py3", raw["docker"]["image"]).group(1)
    assert tag in TRITON_CONTAINER_CUDA, f"Triton container {tag}: add its CUDA (release notes) to this test"
    (container_cuda, _), min_driver = TRITON_CONTAINER_CUDA[tag]
    node_types = raw["available_node_types"]
    for node_type in assert_tier_node_types(node_types, raw["head_node_type"]):
        spec = node_types[node_type]
        commands = raw["setup_commands"] + spec.get("worker_setup_commands", raw.get("worker_setup_commands", []))
        extras, torch_pins = installed_extras_and_torch(commands)
        assert extras <= defined, f"{node_type} installs extras pyproject.toml lacks: {extras - defined}"
        gpu_extras = {e for e in extras if e.startswith("gpu-")}
        assert len(gpu_extras) == 1 and "cpu" not in extras, f"{node_type}: one GPU extra, never with [cpu]: {extras}"
        cuda = gpu_extra_cuda_major(gpu_extras.pop())
        assert cuda == container_cuda, f"{node_type}: [gpu-cu{cuda}] in a CUDA {container_cuda} Triton container"
        assert torch_pins and all(torch_cuda_major(v) == cuda for v in torch_pins), f"{node_type}: torch {torch_pins}"
        # GCP names the host image's CUDA stack and driver in its family (common-cu129-ubuntu-2204-nvidia-580).
        host = re.search(r"-cu(\d\d)(\d)-.*nvidia-(\d+)", str(spec["node_config"]))
        if raw["provider"]["type"] == "gcp":
            assert host, f"{node_type}: a Deep Learning VM family naming its CUDA and driver"
            assert int(host.group(1)) == cuda and int(host.group(3)) >= min_driver, host.group(0)


def test_kuberay_manifest_offers_tier_groups_from_zero_as_rays_autoscaler_reads_them() -> None:
    import ray
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    manifest = yaml.safe_load(KUBERAY_MANIFEST.read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayCluster"
    spec = manifest["spec"]
    assert spec["enableInTreeAutoscaling"] is True and spec["autoscalerOptions"]["idleTimeoutSeconds"] > 0
    assert spec["rayVersion"] == ray.__version__  # tierbench pins Ray; the pods must run the same one
    # Ray's own translation (what the autoscaler sidecar runs on this manifest) parses rayStartParams.resources
    # and validates the result against the cluster schema.
    config = _derive_autoscaling_config_from_ray_cr(manifest)
    offered = assert_tier_node_types(config["available_node_types"], config["head_node_type"])
    groups = {group["groupName"]: group for group in spec["workerGroupSpecs"]}
    for group_name in groups:
        assert DNS_1123_LABEL.fullmatch(group_name), f"groupName {group_name!r}: its pods' names need [a-z0-9-]"
    machines = {name: group["template"]["spec"].get("nodeSelector", {}).get(GKE_ACCELERATOR_LABEL)
                for name, group in groups.items()}
    assert_machines_are_their_tiers(config["available_node_types"], machines, KUBERAY_MANIFEST.name)
    for group_name in offered:
        group = groups[group_name]
        assert group["minReplicas"] == 0 and group["replicas"] == 0, group_name
        container = group["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1, group_name
    pods = [spec["headGroupSpec"], *groups.values()]
    images = {container["image"] for pod in pods for container in pod["template"]["spec"]["containers"]}
    assert len(images) == 1, f"one image (one Python and Ray) on every pod, got {images}"


@pytest.mark.parametrize(("machine", "tier", "card_tier"), [
    ("a2-highgpu-1g", "a100", "a100_40gb"),
    ("p5.48xlarge", "h100", "h100_sxm"),
    ("nvidia-h100-80gb", "h100_sxm_3g40gb", "h100_sxm"),
])
def test_a_node_type_declaring_a_tier_its_machines_card_is_not_fails(machine: str, tier: str, card_tier: str) -> None:
    node_types = {"gpu": {"resources": {"CPU": 8, "GPU": 1, f"{RESOURCE_PREFIX}{tier}": 1}}}
    with pytest.raises(AssertionError) as failure:
        assert_machines_are_their_tiers(node_types, {"gpu": machine}, "deploy/x.yaml")
    for named in ("node type gpu", machine, repr(MACHINE_GPU[machine]), f"tier {tier}", f"tier {card_tier}"):
        assert named in str(failure.value)
    with pytest.raises(AssertionError, match="MACHINE_GPU lacks"):
        assert_machines_are_their_tiers(node_types, {"gpu": "g6.xlarge"}, "deploy/x.yaml")

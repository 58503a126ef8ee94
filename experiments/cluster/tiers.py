"""GPU tiers as Ray sees them: each tier node declares the custom resource `tier_<name>` (and the label
`gpu-tier=<name>`); actors of a tier ask for a sliver of it, pinned to the one node the tier job holds. Ray's own
`accelerator_type` is not used (it names an RTX 4090 `G`). Client-pool nodes declare `client_pool`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError
from experiments.config.schema import NODE_LOCK_RESOURCE, RESOURCE_PREFIX, GpuTierConfig
from experiments.config.shares import card_names
from serving.node import MigDevice, MigState

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
    """The custom resources a node starts with to declare its tiers (and its other roles): a card's node declares the
    tiers that share its card among servers too."""
    resources = {tier_resource(t): 1.0 for t in with_shared_tiers(tiers)}
    if tiers:
        resources[NODE_LOCK_RESOURCE] = 1.0
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
    if "gpu_name_patterns" in values:
        raise ConfigError(f"{path}: gpu_name_patterns=({list(values.gpu_name_patterns)}) is no longer read: a tier "
                          f"names its GPU exactly now, gpu_names: [its NVML names, as nvidia-smi --query-gpu=name "
                          "prints them] and gpu_memory_gib: [low, high] (or [] for any)")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GpuTierConfig), values))


def _normal(name: str) -> str:
    return " ".join(name.lower().split())


def _gpus(gpu_names: Sequence[str], memory_mib: Sequence[int | None]) -> list[tuple[str, int | None]]:
    """(name, total memory in MiB or None where not known) per GPU."""
    return [(name, memory_mib[i] if i < len(memory_mib) else None) for i, name in enumerate(gpu_names)]


def gpu_is_of_tier(tier_cfg: GpuTierConfig, name: str, memory_mib: int | None = None) -> bool:
    """Whether one GPU (or one MIG device) has the tier's identity: one of its exact NVML names (case and spacing
    aside) and, where both are known, its memory within the tier's `gpu_memory_gib`."""
    if _normal(name) not in {_normal(n) for n in tier_cfg.gpu_names}:
        return False
    if memory_mib is None or not tier_cfg.gpu_memory_gib:
        return True
    low, high = tier_cfg.gpu_memory_gib
    return low <= memory_mib / 1024 <= high


def gpu_matches_tier(tier_cfg: GpuTierConfig, gpu_names: Sequence[str], memory_mib: Sequence[int | None] = (),
                     mig: MigState | None = None) -> bool:
    """Whether this node has the tier's identity: for a MIG slice tier (`mig_profile`), a MIG device of its name
    and memory among those its processes see (CUDA_VISIBLE_DEVICES); for a whole card, one of its GPUs with MIG
    off (a card in MIG mode is partitioned: its servers would run on one slice), unless CUDA_VISIBLE_DEVICES
    shows this node's processes MIG slices only."""
    mig = mig or MigState()
    if tier_cfg.mig_profile:
        return any(gpu_is_of_tier(tier_cfg, d.name, d.memory_mib) for d in mig.seen)
    if mig.pins_slices:
        return False
    return any(gpu_is_of_tier(tier_cfg, name, memory) and not mig.on(i)
               for i, (name, memory) in enumerate(_gpus(gpu_names, memory_mib)))


def tiers_for_gpu(gpu_names: Sequence[str], memory_mib: Sequence[int | None] = (),
                  conf_dir: Path = CONF_GPU_DIR, mig: MigState | None = None) -> list[str]:
    """Tiers one of this node's GPUs (or the MIG slices its processes see) is exactly; a node that is a card is also
    the tiers that share it among servers (`shared_tiers_of`), which are not listed here."""
    return [name for name, tier in known_tiers(conf_dir).items()
            if not _shared_card(tier) and gpu_matches_tier(tier, gpu_names, memory_mib, mig)]


def shared_tiers_of(cards: Sequence[str], conf_dir: Path = CONF_GPU_DIR) -> list[str]:
    """The tiers that are one of these cards shared by servers at once (`share_of` one of them, no MIG profile): a
    node that is the card is those tiers too."""
    return [name for name, tier in known_tiers(conf_dir).items() if _shared_card(tier) and tier.share_of in cards]


def with_shared_tiers(tiers: Sequence[str]) -> list[str]:
    """These tiers and the tiers sharing their cards, each once: what a node of these tiers declares."""
    return list(dict.fromkeys([*tiers, *shared_tiers_of(tiers)]))


def _shared_card(tier: GpuTierConfig) -> bool:
    """A card shared by servers at once: a share of a card that is not a MIG slice."""
    return bool(tier.share_of) and not tier.mig_profile


def identity(tier_cfg: GpuTierConfig) -> str:
    """The tier's identity in words, e.g. `a GPU named 'NVIDIA H100 PCIe' with 79-81 GiB` (`a MIG slice named ...`
    for a slice tier)."""
    names = " or ".join(repr(n) for n in tier_cfg.gpu_names) or "(no GPU names: add gpu_names)"
    low_high = tier_cfg.gpu_memory_gib
    memory = f" with {low_high[0]:g}-{low_high[1]:g} GiB" if low_high else ""
    return f"{'a MIG slice' if tier_cfg.mig_profile else 'a GPU'} named {names}{memory}"


def describe_slices(devices: Sequence[MigDevice]) -> str:
    """MIG devices by profile, e.g. `3g.40gb x 2, 1g.10gb`."""
    counts = Counter(d.profile or d.name for d in devices)
    return ", ".join(f"{profile} x {n}" if n > 1 else profile for profile, n in counts.items())


PIN_HINT = "start the node with CUDA_VISIBLE_DEVICES=MIG-<uuid> from `nvidia-smi -L`"


def _slice_mig_problem(tier_cfg: GpuTierConfig, gpu_names: Sequence[str], mig: MigState) -> str | None:
    """Why a node whose card is the slice tier's card is not a node of the slice tier (MIG off, other slices,
    CUDA_VISIBLE_DEVICES naming other slices); None where the node lacks the card."""
    profile = tier_cfg.mig_profile
    cards = {_normal(n) for n in card_names(tier_cfg)}
    parents = [i for i, name in enumerate(gpu_names) if _normal(name) in cards]
    named = [d for d in mig.devices if _normal(d.name) in {_normal(n) for n in tier_cfg.gpu_names}]
    if not parents:
        return None
    if mig.pins_slices:
        visible = f"CUDA_VISIBLE_DEVICES={','.join(mig.visible or ())}"
        seen = ", ".join(f"{d.uuid} ({d.profile or d.name} of GPU {d.gpu})" for d in mig.seen)
        fit = f" ({', '.join(d.uuid for d in named if d.uuid)})" if named else ""
        what = (f"this node's processes see MIG slice {seen} only ({visible})" if seen else
                f"{visible} names no MIG device of this node")
        return (f"{what}: start the node with CUDA_VISIBLE_DEVICES naming a {profile} slice's UUID{fit} from "
                "`nvidia-smi -L`")
    on = [i for i in parents if mig.on(i)]
    if not on:
        i = parents[0]
        return (f"MIG is not enabled on GPU {i} ({gpu_names[i]}): enable it with `sudo nvidia-smi -i {i} -mig 1`, "
                f"create the slice with `sudo nvidia-smi mig -i {i} -cgi {profile} -C`, and {PIN_HINT}")
    i = on[0]
    slices = mig.on_gpu(i)
    if named:  # the slice is there, with other memory than the tier's
        d = named[0]
        memory = f"{d.memory_mib / 1024:.1f} GiB" if d.memory_mib else "unknown memory"
        return f"its {profile} slice of GPU {d.gpu} ({d.name!r}) has {memory}"
    what = f"slices {describe_slices(slices)}, none of them {profile}" if slices else "no slices yet"
    return (f"GPU {i} ({gpu_names[i]}) is in MIG mode with {what}: create one with `sudo nvidia-smi mig -i {i} -cgi "
            f"{profile} -C` where the card has room, and {PIN_HINT}")


def _card_mig_problem(tier_cfg: GpuTierConfig, gpu_names: Sequence[str], memory_mib: Sequence[int | None],
                      mig: MigState) -> str | None:
    """Why a node with the whole-card tier's card is not a node of it: the card is in MIG mode, or this node's
    processes see MIG slices only; None where the node lacks the card."""
    cards = [i for i, (name, memory) in enumerate(_gpus(gpu_names, memory_mib)) if gpu_is_of_tier(tier_cfg, name,
                                                                                                 memory)]
    if not cards:
        return None
    partitioned = [i for i in cards if mig.on(i)]
    if len(partitioned) < len(cards) and mig.pins_slices:
        return (f"this node's processes see MIG slices only (CUDA_VISIBLE_DEVICES={','.join(mig.visible or ())}), not "
                "the whole card: start the node without CUDA_VISIBLE_DEVICES naming slices")
    i = partitioned[0]
    slices = mig.on_gpu(i)
    into = f", partitioned into {describe_slices(slices)}" if slices else ""
    return (f"GPU {i} ({gpu_names[i]}) is in MIG mode{into}: its servers would run on one slice while the figures "
            f"were priced as the whole card; disable MIG with `sudo nvidia-smi -i {i} -mig 0` to measure the whole "
            "card")


def _unpinned_problem(tier_cfg: GpuTierConfig, mig: MigState) -> str:
    """A slice tier's slice is on the node, among other MIG devices, and CUDA_VISIBLE_DEVICES names none."""
    fits = [d for d in mig.devices if gpu_is_of_tier(tier_cfg, d.name, d.memory_mib)]
    pin = (f"CUDA_VISIBLE_DEVICES={fits[0].uuid} (a {tier_cfg.mig_profile} slice of GPU {fits[0].gpu}; "
           "`nvidia-smi -L` lists them)" if fits and fits[0].uuid else
           f"CUDA_VISIBLE_DEVICES=MIG-<uuid> of a {tier_cfg.mig_profile} slice from `nvidia-smi -L`")
    return (f"tier {tier_cfg.name} ({tier_cfg.display_name}) needs {identity(tier_cfg)}, and this node has "
            f"{len(mig.devices)} MIG devices ({describe_slices(mig.devices)}) with CUDA_VISIBLE_DEVICES naming none of "
            f"them, so which slice its servers would get is not known: start the node with {pin}")


def cpu_tier_problem(tier_cfg: GpuTierConfig, gpu_names: Sequence[str], cpu_count: int | None) -> str | None:
    """Why a node is not a node of this CPU tier (its CPUs, and no GPU); None when it is, or the tier names no CPUs."""
    if tier_cfg.cpus is None:
        return None
    wanted = f"tier {tier_cfg.name} ({tier_cfg.display_name}) is a CPU node of {tier_cfg.cpus} logical CPUs"
    if gpu_names:
        return (f"{wanted} and no GPU, and this node has GPU {', '.join(repr(n) for n in gpu_names)}: its GPU "
                "variants would be priced as a CPU node")
    if cpu_count is not None and cpu_count != tier_cfg.cpus:
        return f"{wanted}, and this node has {cpu_count}"
    return None


def cpu_priced_gpu_problem(tier_cfg: GpuTierConfig, gpu_names: Sequence[str],
                           conf_dir: Path = CONF_GPU_DIR) -> str | None:
    """Why a GPU node may not run under a tier of any machine (`local`) still at its file's price, a CPU node's: its
    GPU variants would be priced as a CPU VM. None without a GPU, or once the price is the user's own."""
    if not gpu_names or tier_cfg.cpus is not None:
        return None
    filed = known_tiers(conf_dir).get(tier_cfg.name)
    if filed is None or filed.gpu_names or float(filed.price_per_hour_usd) != float(tier_cfg.price_per_hour_usd):
        return None
    cards = ", ".join(repr(n) for n in gpu_names)
    return (f"tier {tier_cfg.name} ({tier_cfg.display_name}) is priced as a CPU machine "
            f"(${float(tier_cfg.price_per_hour_usd):g}/h: {tier_cfg.price_source or 'its file'}), and this node has "
            f"GPU {cards}: its GPU figures would be priced as a CPU VM's. Give what this machine costs "
            f"(gpu.price_per_hour_usd=USD gpu.price_source='...'), or add a tier for its GPU (conf/gpu/<tier>.yaml "
            "with its NVML name in gpu_names and its price; `python -m runners.prices` lists offers of it)")


def cpu_tiers_for(cpu_count: int, gpu_names: Sequence[str] = (), conf_dir: Path = CONF_GPU_DIR) -> list[str]:
    """The CPU tiers this node is exactly (their CPUs, no GPU)."""
    return [name for name, tier in known_tiers(conf_dir).items()
            if tier.cpus is not None and not tier.requires_gpu and cpu_tier_problem(tier, gpu_names, cpu_count) is None]


def tier_gpu_problem(tier_cfg: GpuTierConfig, gpu_names: Sequence[str], memory_mib: Sequence[int | None] = (),
                     conf_dir: Path = CONF_GPU_DIR, cpu_count: int | None = None,
                     mig: MigState | None = None) -> str | None:
    """Why a node with this hardware is not a node of this tier, naming the tier it is, if any; None when it is, or
    when the tier asks for nothing (`requires_gpu: false` without `cpus`, e.g. `local`). `mig`: the node's MIG
    mode, slices and CUDA_VISIBLE_DEVICES (None: no GPU in MIG mode). One rule for runners.node, runners.doctor and
    the tier job."""
    if not tier_cfg.requires_gpu:
        return cpu_tier_problem(tier_cfg, gpu_names, cpu_count) or cpu_priced_gpu_problem(tier_cfg, gpu_names,
                                                                                            conf_dir)
    mig = mig or MigState()
    if gpu_matches_tier(tier_cfg, gpu_names, memory_mib, mig):
        if tier_cfg.mig_profile and not mig.pinned:
            return _unpinned_problem(tier_cfg, mig)
        return None
    others = [t for t in tiers_for_gpu(gpu_names, memory_mib, conf_dir, mig) if t != tier_cfg.name]
    wanted = f"tier {tier_cfg.name} ({tier_cfg.display_name}) needs {identity(tier_cfg)}"
    partitioned = (_slice_mig_problem(tier_cfg, gpu_names, mig) if tier_cfg.mig_profile else
                   _card_mig_problem(tier_cfg, gpu_names, memory_mib, mig))
    if partitioned:
        return f"{wanted}, and {partitioned}" + (f"; it is a node of tier {' or '.join(others)}" if others else "")
    found = ("GPU " + ", ".join(f"{name!r}" + (f" ({memory / 1024:.1f} GiB)" if memory else "")
                                for name, memory in _gpus(gpu_names, memory_mib))) if gpu_names else "no NVIDIA GPU"
    where = (f"; it is a node of tier {' or '.join(others)}" if others else
             "; no tier in conf/gpu/ has it: add its NVML name to a tier's gpu_names, or a conf/gpu/<tier>.yaml with "
             "its price" if gpu_names else "")
    return f"{wanted}, and this node has {found}{where}"


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

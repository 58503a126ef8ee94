"""A tier that is a share of a card: a MIG slice (`gpu.mig_profile`), or a card shared by servers running on it at
once (`gpu.gpu_share` 1/N without a profile: N tenants), `gpu.gpu_share` of the card whose tier is `gpu.share_of`,
priced at that share of the card's price. Its checks (one clear error naming the key, the value and the fix), the
params its trials log, and the card's NVML names its slice's names are made of."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.config.errors import refuse

if TYPE_CHECKING:
    from experiments.config.schema import GpuTierConfig

# A MIG profile as `nvidia-smi -L` names its devices: `1g.10gb`, `3g.40gb`, a compute instance's `1c.3g.20gb`, a
# profile with all media engines `1g.10gb+me`.
MIG_PROFILE_RE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)?$")
# What NVML puts between a card's name and its slice's profile: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
MIG_INFIX = " MIG "
# The trial and tier params of a share of a card (logged only where the tier is one).
SHARE_PARAMS = ("gpu_share", "mig_profile", "share_of", "tenants")
# The most servers a shared card's tier runs on it at once (each one's load, clients and server on the node).
MAX_TENANTS = 8


def is_share(gpu: GpuTierConfig) -> bool:
    """Whether the tier is less than a whole card, or a MIG slice (7g.80gb: the whole card, in MIG mode)."""
    return bool(gpu.mig_profile) or float(gpu.gpu_share) < 1.0 or bool(gpu.share_of)


def tenants(gpu: GpuTierConfig) -> int:
    """How many servers share the card at once: N on a shared card's tier (`gpu_share` 1/N, no MIG profile), each
    under the trial's load, so each is measured beside the others and priced at its share; 1 for a whole card or a
    MIG slice (a slice's compute is its own)."""
    if gpu.mig_profile or float(gpu.gpu_share) >= 1.0:
        return 1
    return max(1, round(1.0 / float(gpu.gpu_share)))


def share_params(gpu: GpuTierConfig) -> dict[str, Any]:
    """`gpu_share`, `mig_profile`, `share_of`, `tenants` for a share of a card; nothing for a whole card (its params
    stay as they were)."""
    if not is_share(gpu):
        return {}
    return {"gpu_share": float(gpu.gpu_share), "mig_profile": gpu.mig_profile or "", "share_of": gpu.share_of or "",
            "tenants": tenants(gpu)}


def slices_per_card(share: float) -> int:
    """How many tiers of this share one card holds at most (1/7: 7; 3/7: 2)."""
    return max(1, math.floor(1.0 / share + 1e-9))


def card_names(gpu: GpuTierConfig) -> list[str]:
    """The NVML names of the card a MIG slice tier is a slice of ("NVIDIA H100 80GB HBM3" for "NVIDIA H100 80GB HBM3
    MIG 1g.10gb"); the tier's own names for a whole card."""
    if not gpu.mig_profile:
        return list(gpu.gpu_names)
    out = []
    for name in gpu.gpu_names:
        head, sep, _ = _cased(" ".join(name.split())).rpartition(MIG_INFIX)
        out.append(head.strip() if sep else name)
    return out


def _cased(name: str) -> str:
    """`name` with its ` mig ` infix in NVML's case, so the card's part can be cut off whatever the case."""
    at = name.lower().rfind(MIG_INFIX.lower())
    return name if at < 0 else name[:at] + MIG_INFIX + name[at + len(MIG_INFIX):]


def _is_mig_name(name: str, profile: str) -> bool:
    head, sep, tail = _cased(" ".join(str(name).split())).rpartition(MIG_INFIX)
    return bool(sep and head.strip()) and tail.strip().lower() == profile.lower()


def _read_tier(path: Path) -> GpuTierConfig:
    from omegaconf import OmegaConf

    from experiments.config.schema import GpuTierConfig

    values = OmegaConf.load(path)
    values.pop("defaults", None)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GpuTierConfig), values))


def card_tier(gpu: GpuTierConfig, conf_dir: Path | None = None) -> GpuTierConfig | None:
    """The tier `gpu.share_of` names (conf/gpu/<share_of>.yaml), None where it names none or no such file."""
    from experiments.config import compose

    if not gpu.share_of:
        return None
    path = (conf_dir or compose.CONF_DIR / "gpu") / f"{gpu.share_of}.yaml"
    return _read_tier(path) if path.is_file() else None


def check_share(gpu: GpuTierConfig, key: str = "gpu", conf_dir: Path | None = None) -> list[str]:
    """What is wrong with what a share of a card says it is (the tier at `key`): its share in (0, 1], the card's
    tier, and, for a MIG slice, its profile and the MIG devices' NVML names made of the card's; the first problem
    only."""
    from experiments.config import compose

    folder = conf_dir or compose.CONF_DIR / "gpu"
    share = gpu.gpu_share
    if not isinstance(share, int | float) or isinstance(share, bool) or not 0 < share <= 1:
        return [refuse(f"{key}.gpu_share", share, "the share of one card the tier is, in (0, 1]: 1 for a whole card, "
                                                  "e.g. 0.14285714 (1/7) for a 1g.10gb slice of an H100")]
    profile = gpu.mig_profile
    mig_names = [n for n in gpu.gpu_names if MIG_INFIX.lower() in f" {n.lower()} "]
    if profile is None:
        if mig_names:
            return [refuse(f"{key}.mig_profile", None, f"{key}.gpu_names name MIG devices ({mig_names}): set "
                           f"{key}.mig_profile to their profile (e.g. 1g.10gb), {key}.gpu_share to its share of the "
                           f"card and {key}.share_of to the card's tier")]
        count = tenants(gpu)
        if share < 1 and (count < 2 or count > MAX_TENANTS or abs(share * count - 1) > 1e-3):
            return [refuse(f"{key}.gpu_share", share, f"a card shared by N servers at once is 1/N of it, N from 2 to "
                                                      f"{MAX_TENANTS} (0.5, 0.33333333, 0.25, ...); a MIG slice sets "
                                                      f"{key}.mig_profile too")]
    else:
        if not MIG_PROFILE_RE.match(str(profile)):
            return [refuse(f"{key}.mig_profile", profile, "a MIG profile as `nvidia-smi -L` names the slice, e.g. "
                                                          "1g.10gb or 3g.40gb (null: a whole card)")]
        if not gpu.requires_gpu:
            return [refuse(f"{key}.requires_gpu", gpu.requires_gpu, "a MIG slice is a GPU tier: requires_gpu: true")]
        wrong = [n for n in gpu.gpu_names if not _is_mig_name(n, profile)]
        if not gpu.gpu_names or wrong:
            return [refuse(f"{key}.gpu_names", list(gpu.gpu_names),
                           f"a MIG slice's NVML names are its card's with ' MIG {profile}', e.g. "
                           f"['NVIDIA H100 80GB HBM3 MIG {profile}'] (as nvidia-smi -L lists the slice)")]
    if share < 1 and not gpu.share_of:
        return [refuse(f"{key}.share_of", None, f"a share of a card ({share:g}) names the card's tier, e.g. "
                                                f"{key}.share_of=h100_sxm: its price x gpu_share is this tier's")]
    if not gpu.share_of:
        return []
    tiers = sorted(p.stem for p in folder.glob("*.yaml"))
    if gpu.share_of == gpu.name or gpu.share_of not in tiers:
        return [refuse(f"{key}.share_of", gpu.share_of, f"the tier of the whole card, another of conf/gpu/ "
                                                        f"({', '.join(tiers)})")]
    card = card_tier(gpu, folder)
    if card is None or is_share(card):
        return [refuse(f"{key}.share_of", gpu.share_of, "a whole card's tier (no mig_profile, gpu_share 1, no "
                                                        "share_of of its own)")]
    if profile:
        theirs = {" ".join(n.lower().split()) for n in card.gpu_names}
        foreign = [n for n in card_names(gpu) if " ".join(n.lower().split()) not in theirs]
        if foreign:
            return [refuse(f"{key}.share_of", gpu.share_of,
                           f"its card's NVML names {list(card.gpu_names)} are not those this slice's names "
                           f"are made of ({foreign}): name the tier of the card the slice is cut from")]
    return []

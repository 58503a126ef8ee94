"""Which offers are a tier: gpuhunt names a GPU by a short name and its memory per GPU, tiers by NVML name, and the
card table here (`CARDS`, `FORM_RULES`) maps the one to the other. Where one gpuhunt name is two cards (an H100 80 GB
is an SXM or a PCIe card) an offer counts only when its instance type says which."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.prices.catalog import Offer


@dataclass(frozen=True)
class Card:
    """A GPU as NVML names it, and as gpuhunt does: its short name, its memory per GPU (GB) and, where one gpuhunt
    name and memory are two cards, the form factor that tells them apart."""

    nvml: str
    gpuhunt: str
    memory_gb: float
    form: str = ""  # SXM | PCIe, only where gpuhunt's name and memory are more than one card


# The mapping: NVML name (a tier's gpu_names) -> gpuhunt's GPU. gpuhunt names the SXM and PCIe H100 80 GB both `H100`,
# and the SXM4 and PCIe A100 (40 or 80 GB) both `A100`; the H100 NVL is `H100NVL` (94 GB), the H200 NVL `H200NVL`.
# A tier whose GPU is not here is left alone, saying so: add its card.
CARDS: tuple[Card, ...] = (
    Card("NVIDIA H100 80GB HBM3", "H100", 80, "SXM"),
    Card("NVIDIA H100 PCIe", "H100", 80, "PCIe"),
    Card("NVIDIA H100 NVL", "H100NVL", 94),
    Card("NVIDIA H200", "H200", 141),
    Card("NVIDIA H200 NVL", "H200NVL", 141),
    Card("NVIDIA A100-SXM4-80GB", "A100", 80, "SXM"),
    Card("NVIDIA A100 80GB PCIe", "A100", 80, "PCIe"),
    Card("NVIDIA A100-SXM4-40GB", "A100", 40, "SXM"),
    Card("NVIDIA A100-PCIE-40GB", "A100", 40, "PCIe"),
    Card("NVIDIA A10G", "A10G", 24),
    Card("NVIDIA A10", "A10", 24),
    Card("NVIDIA L4", "L4", 24),
    Card("NVIDIA L40S", "L40S", 48),
    Card("NVIDIA L40", "L40", 48),
    Card("Tesla T4", "T4", 16),
    Card("NVIDIA GeForce RTX 4090", "RTX4090", 24),
)


@dataclass(frozen=True)
class FormRule:
    """An offer's instance type that says its card's form factor: `pattern` searched in it (case aside), for offers
    of `provider` (gpuhunt's name; "" any)."""

    provider: str
    pattern: str
    form: str
    why: str


# Where gpuhunt's name and memory are two cards (H100 80 GB, A100 40 or 80 GB): the instance types that say which.
# Before these, an instance type that is a card's NVML name says it (RunPod's GPU types are: "NVIDIA H100 80GB HBM3").
# An offer none of them decides is left out; an offer two of them disagree on too.
FORM_RULES: tuple[FormRule, ...] = (
    FormRule("", r"sxm", "SXM", "its instance type says SXM (Lambda gpu_8x_h100_sxm5, Nebius gpu-h100-sxm ...)"),
    FormRule("", r"pcie", "PCIe", "its instance type says PCIe (Lambda gpu_1x_h100_pcie ...)"),
    FormRule("aws", r"^p4de?\.|^p5\.", "SXM", "AWS sells the A100 (p4d, p4de) and H100 (p5) on SXM boards only"),
    FormRule("gcp", r"^a2-|^a3-", "SXM", "GCP's A2 (A100) and A3 (H100) machine types are SXM boards"),
    FormRule("azure", r"ND\d+a?m?sr_(A100_)?v4", "SXM", "Azure's ND A100 v4 series are SXM4 boards"),
    FormRule("azure", r"NC\d+ads_A100_v4", "PCIe", "Azure's NC A100 v4 series are PCIe cards"),
    FormRule("verda", r".", "SXM", "gpuhunt lists Verda's A100 and H100 from its SXM4/SXM5 instance types only"),
)


def _normal(name: str) -> str:
    return " ".join(str(name).lower().split())


def _squash(name: str) -> str:
    return re.sub(r"[\s_-]+", "", str(name).lower())


def card_of(nvml_name: str) -> Card | None:
    """The card of an NVML name (case and spacing aside, as tiers compare them); None: not in CARDS."""
    return next((c for c in CARDS if _normal(c.nvml) == _normal(nvml_name)), None)


def cards_for(offer: Offer) -> list[Card]:
    """The cards gpuhunt's name and memory of the offer's GPU can be (NVIDIA's only)."""
    if not offer.gpu_count or (offer.gpu_vendor or "nvidia") != "nvidia" or not offer.gpu_name:
        return []
    named = [c for c in CARDS if _squash(c.gpuhunt) == _squash(offer.gpu_name)]
    if offer.gpu_memory is None:
        return named
    return [c for c in named if abs(c.memory_gb - offer.gpu_memory) <= 0.07 * c.memory_gb]


def offer_form(offer: Offer) -> str | None:
    """The form factor the offer's instance type says (SXM, PCIe), or None where it says none (or two)."""
    exact = card_of(offer.instance_name)
    if exact is not None and exact.form:
        return exact.form
    forms = {r.form for r in FORM_RULES
             if (not r.provider or r.provider == offer.provider) and re.search(r.pattern, offer.instance_name, re.I)}
    return forms.pop() if len(forms) == 1 else None


@dataclass
class Match:
    """The offers of a tier's identity, the ones of its gpuhunt name whose card could not be told (with why), and
    why the tier is left alone (None: it is not)."""

    offers: list[Offer] = field(default_factory=list)
    undecided: list[Offer] = field(default_factory=list)
    left: str | None = None
    note: str = ""


def match_tier(tier: Any, offers: Sequence[Offer]) -> Match:
    """The offers that are `tier` (a GpuTierConfig): its GPU exactly, or for a CPU tier its vCPUs on an instance
    type the tier names."""
    if not tier.requires_gpu:
        return _match_cpu_tier(tier, offers)
    if getattr(tier, "share_of", None):  # a MIG slice or a shared card: no catalog lists it; its card's price, shared
        return Match(left=f"a share of a card ({tier.gpu_share:g} of tier {tier.share_of}): its price is that share "
                          f"of tier {tier.share_of}'s; refresh that tier, then set this one's price_per_hour_usd, "
                          "price_source and price_seen from it")
    cards = [c for c in (card_of(n) for n in tier.gpu_names) if c is not None]
    unmapped = [n for n in tier.gpu_names if card_of(n) is None]
    if not cards:
        names = ", ".join(repr(n) for n in tier.gpu_names) or "(none: gpu_names is empty)"
        return Match(left=f"no gpuhunt name for its GPU {names}: add the card to CARDS in "
                          f"experiments/prices/cards.py")
    found = Match(note=(f"not in the mapping: {unmapped}" if unmapped else ""))
    for offer in offers:
        candidates = cards_for(offer)
        if not any(c in cards for c in candidates):
            continue
        if len(candidates) > 1:  # one gpuhunt name and memory, several cards: the instance type must say which
            form = offer_form(offer)
            candidates = [c for c in candidates if c.form == form] if form else candidates
        if len(candidates) > 1:
            found.undecided.append(offer)
        elif candidates and candidates[0] in cards:
            found.offers.append(offer)
    if not found.offers:
        if found.undecided:
            card = cards[0]
            siblings = [c.nvml for c in CARDS if (c.gpuhunt, c.memory_gb) == (card.gpuhunt, card.memory_gb)]
            found.left = (f"ambiguous card: gpuhunt names {' and '.join(repr(s) for s in siblings)} alike "
                          f"({card.gpuhunt} {card.memory_gb:g} GB), and the instance types of its offers do not say "
                          f"{card.form} ({examples(found.undecided)}); not priced as the other card")
        else:
            found.left = "no match: the catalog has no offer of " + " or ".join(
                f"{c.gpuhunt} {c.memory_gb:g} GB" + (f" {c.form}" if c.form else "") for c in cards)
    return found


def examples(offers: Sequence[Offer], most: int = 3) -> str:
    seen: list[str] = []
    for o in offers:
        text = f"{o.provider} {o.instance_name}"
        if text not in seen:
            seen.append(text)
    return ", ".join(seen[:most]) + (f" and {len(seen) - most} more" if len(seen) > most else "")


def _match_cpu_tier(tier: Any, offers: Sequence[Offer]) -> Match:
    if tier.cpus is None:
        return Match(left="a CPU tier of any machine (no `cpus`): no catalog offer is its identity")
    sized = [o for o in offers if not o.gpu_count and o.cpu == tier.cpus]
    text = f"{tier.display_name} {tier.price_source}"
    named = [o for o in sized
             if re.search(rf"(?<![\w.-]){re.escape(o.instance_name)}(?![\w.-])", text, re.I)]
    if named:
        return Match(offers=named)
    if not sized:
        return Match(left=f"no match: the catalog has no offer with {tier.cpus} vCPUs and no GPU")
    return Match(left=f"a CPU tier: the catalog has {len(sized)} offers of {tier.cpus} vCPUs and no GPU, and its "
                      f"display_name and price_source name none of their instance types ({examples(sized)}); name "
                      f"the instance type there")


def cheapest(offers: Iterable[Offer]) -> Offer | None:
    """The cheapest per GPU, of the single-GPU (or CPU) offers where there are any, else of the multi-GPU ones."""
    offers = list(offers)
    single = [o for o in offers if o.gpu_count <= 1]
    pool = single or offers
    return min(pool, key=lambda o: (o.per_gpu, o.provider, o.instance_name, o.location), default=None)

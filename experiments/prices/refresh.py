"""A refresh of the tiers' prices: for each tier, the cheapest offers of its card as alternative prices (and the
primary price with --primary, pinned prices kept), planned as the tier file's new text, written, and said in words."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.config.prices import NAME_RE, PRIMARY
from experiments.prices.cards import Match, card_of, cheapest, examples, match_tier
from experiments.prices.catalog import Catalog, Offer, split_list
from experiments.prices.errors import PriceRefreshError
from experiments.prices.tier_files import DAY_RE, EditError, TierFile, edit_tier_text

# Providers as the tier files name them (gpu.prices.<name>.provider); another is written as gpuhunt names it.
PROVIDER_NAMES = {"aws": "AWS", "azure": "Azure", "gcp": "Google Cloud", "lambdalabs": "Lambda", "runpod": "RunPod",
                  "vastai": "Vast.ai", "nebius": "Nebius", "oci": "Oracle Cloud", "verda": "Verda",
                  "cloudrift": "CloudRift", "crusoe": "Crusoe", "digitalocean": "DigitalOcean", "hotaisle": "Hot Aisle",
                  "jarvislabs": "JarvisLabs", "seeweb": "Seeweb", "vultr": "Vultr", "daytona": "Daytona"}
DEFAULT_PREFIX = "gpuhunt"
# What each alternative price entry of a kind is called (<prefix>_<suffix>) and its `kind`.
KINDS = (("on_demand", "on_demand", False), ("spot", "interruptible", True))  # (suffix, kind, spot)
ENTRY_KEYS = ("usd_per_hour", "kind", "provider", "source", "seen")


# -- the tiers and what changes -------------------------------------------------------------------------------------

def select_tiers(tiers: dict[str, TierFile], names: Sequence[str]) -> list[TierFile]:
    wanted = split_list(names)
    unknown = [n for n in wanted if n not in tiers]
    if unknown:
        raise PriceRefreshError(f"--tiers={','.join(wanted)}: no tier {unknown} in the conf dir (its tiers: "
                                f"{', '.join(tiers)}); name them as gpu=<tier> does")
    return [tiers[n] for n in wanted] if wanted else list(tiers.values())


@dataclass
class Change:
    """One price of a tier: what it was, what the catalog offers, and what became of it."""

    name: str  # primary, or the alternative price's name
    was: float | None
    now: float | None
    offer: Offer | None
    action: str  # added | updated | unchanged | pinned | no offer | kept
    why: str = ""


@dataclass
class TierPlan:
    tier: TierFile
    match: Match
    changes: list[Change]
    new_text: str

    @property
    def changed(self) -> bool:
        return self.new_text != self.tier.text

    def diff(self) -> str:
        path = self.tier.path.resolve()
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        return "".join(difflib.unified_diff(self.tier.text.splitlines(keepends=True),
                                            self.new_text.splitlines(keepends=True), f"{shown}",
                                            f"{shown} (refreshed)"))


def entry_values(offer: Offer, kind: str, seen: str | None = None) -> dict[str, Any]:
    """An alternative price entry for `offer`: its price per GPU, kind, provider, source and the catalog's day."""
    return {"usd_per_hour": round(offer.per_gpu, 5), "kind": kind,
            "provider": PROVIDER_NAMES.get(offer.provider, offer.provider), "source": offer.source(),
            "seen": seen or offer.catalog.seen}


def plan_tier(tier_file: TierFile, offers: Sequence[Offer], prefix: str = DEFAULT_PREFIX,
              primary: bool = False) -> TierPlan:
    """What refreshing one tier changes: `<prefix>_on_demand` and `<prefix>_spot` from the cheapest offers of its
    identity (and, with `primary`, the primary price from the on-demand one), a pinned price left as it is; and
    the tier file's new text."""
    tier = tier_file.tier
    match = match_tier(tier, offers)
    changes: list[Change] = []
    edits: list[tuple[tuple[str, ...], Any]] = []
    primary_offer = None
    if match.left is None:
        for suffix, kind, spot in KINDS:
            name = f"{prefix}_{suffix}"
            existing = (tier.prices or {}).get(name)
            was = float(existing["usd_per_hour"]) if existing and "usd_per_hour" in existing else None
            offer = cheapest(o for o in match.offers if o.spot == spot)
            if suffix == "on_demand":
                primary_offer = offer
            if offer is None:
                what = "spot" if spot else "on-demand"
                changes.append(Change(name, was, None, None, "no offer", f"no {what} offer matches"
                                      + (": left as it was" if existing else "")))
                continue
            if existing and existing.get("pinned") is True:
                changes.append(Change(name, was, offer.per_gpu, offer, "pinned", "its entry says pinned: true"))
                continue
            values = entry_values(offer, kind)
            old = {k: existing.get(k) for k in ENTRY_KEYS} if existing else None
            if old is not None and _same(old, values):
                changes.append(Change(name, was, offer.per_gpu, offer, "unchanged"))
                continue
            changes.append(Change(name, was, offer.per_gpu, offer, "updated" if existing else "added"))
            edits += [(("prices", name, key), value) for key, value in values.items()]
    was = float(tier.price_per_hour_usd)
    if not primary:
        changes.insert(0, Change(PRIMARY, was, None, None, "kept", "changes only with --primary"))
    elif tier.price_pinned:
        changes.insert(0, Change(PRIMARY, was, primary_offer.per_gpu if primary_offer else None, primary_offer,
                                 "pinned", "the tier says price_pinned: true"))
    elif primary_offer is None:
        changes.insert(0, Change(PRIMARY, was, None, None, "kept", "no on-demand offer to take it from"))
    else:
        values = entry_values(primary_offer, "on_demand")
        new = {"price_per_hour_usd": values["usd_per_hour"], "price_source": values["source"],
               "price_seen": values["seen"]}
        old = {"price_per_hour_usd": was, "price_source": tier.price_source, "price_seen": tier.price_seen}
        same = _same(old, new)
        changes.insert(0, Change(PRIMARY, was, primary_offer.per_gpu, primary_offer, "unchanged" if same else "updated",
                                 "" if same else "--primary: the on-demand offer"))
        if not same:
            edits = [((key,), value) for key, value in new.items()] + edits
    try:
        new_text = edit_tier_text(tier_file.text, edits) if edits else tier_file.text
    except EditError as exc:
        return TierPlan(tier_file, Match(left=f"its file: {exc}"), [], tier_file.text)
    return TierPlan(tier_file, match, changes, new_text)


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    def norm(v: Any) -> Any:
        return round(float(v), 5) if isinstance(v, int | float) and not isinstance(v, bool) else str(v or "")
    return all(norm(old.get(k)) == norm(v) for k, v in new.items())


# -- the whole refresh ----------------------------------------------------------------------------------------------

def check_prefix(prefix: str) -> str:
    if not NAME_RE.match(prefix or "") or prefix == PRIMARY:
        raise PriceRefreshError(f"--prefix={prefix!r}: not a price name: lower-case letters, digits and _, starting "
                                f"with a letter (the entries are <prefix>_on_demand and <prefix>_spot)")
    return prefix


def check_seen(seen: str | None) -> str | None:
    if seen is None:
        return None
    try:
        if DAY_RE.match(seen):
            return dt.date.fromisoformat(seen).isoformat()
    except ValueError:
        pass
    raise PriceRefreshError(f"--seen={seen!r}: not a day; give the day the catalog's prices were seen as YYYY-MM-DD, "
                            f"e.g. --seen 2026-11-20")


def refresh(tiers: Sequence[TierFile], offers: Sequence[Offer], prefix: str = DEFAULT_PREFIX,
            primary: bool = False) -> list[TierPlan]:
    return [plan_tier(t, offers, prefix, primary) for t in tiers]


def write(plans: Sequence[TierPlan]) -> list[Path]:
    """Write the tier files that change; the paths written."""
    written = []
    for plan in plans:
        if plan.changed:
            plan.tier.path.write_text(plan.new_text)
            written.append(plan.tier.path)
    return written


# -- what it says ---------------------------------------------------------------------------------------------------

def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4g}/h" if value < 10 else f"${value:,.2f}/h"


def render_catalog(catalog: Catalog) -> str:
    lines = ["catalog:"]
    for f in catalog.files:
        skipped = f", {f.skipped} malformed rows skipped" if f.skipped else ""
        lines.append(f"  {f.label()}: {f.offers} offers{skipped}, seen {f.seen} (from its {f.dated_by})")
    for f in catalog.superseded:
        lines.append(f"  {f.label()}: not used, an older catalog of {f.provider} than the one above")
    return "\n".join(lines)


def identity_text(tier: Any) -> str:
    """What a tier is matched as, in words."""
    if not tier.requires_gpu:
        return f"{tier.cpus} vCPUs and no GPU, on an instance type it names" if tier.cpus is not None else \
            "any machine"
    cards = [c for c in (card_of(n) for n in tier.gpu_names) if c]
    return " or ".join(f"gpuhunt's {c.gpuhunt} {c.memory_gb:g} GB" + (f", {c.form} only" if c.form else "")
                       for c in cards) or "no gpuhunt name"


def render_plan(plan: TierPlan) -> str:
    tier = plan.tier.tier
    out = [f"{plan.tier.name} ({tier.display_name}): {identity_text(tier)}"]
    if plan.match.left:
        out.append(f"  left alone: {plan.match.left}")
        out.append(f"  {'primary':<22} {_usd(float(tier.price_per_hour_usd)):>11}  (as it was)")
        return "\n".join(out)
    width = max(22, *(len(c.name) for c in plan.changes))
    out.append(f"  {'price':<{width}} {'was':>11} {'offer':>11}  what")
    for c in plan.changes:
        what = c.action + (f": {c.why}" if c.why else "")
        if c.offer is not None and c.action in ("added", "updated", "unchanged", "pinned"):
            what += f"; {c.offer.provider} {c.offer.describe()}"
        out.append(f"  {c.name:<{width}} {_usd(c.was):>11} {_usd(c.now):>11}  {what}")
    if plan.match.undecided:
        n = len(plan.match.undecided)
        out.append(f"  left out: {n} offer{'s' if n != 1 else ''} whose instance type does not say which card "
                   f"({examples(plan.match.undecided)})")
    if plan.match.note:
        out.append(f"  note: {plan.match.note}")
    return "\n".join(out)

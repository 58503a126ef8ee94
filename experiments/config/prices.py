"""The prices of a tier: the primary one (`gpu.price_per_hour_usd`, which the cost metrics use) and any number
of alternatives under `gpu.prices` (spot, other providers). Every price is logged as a param so the report
can give cost figures at each and say which price a figure uses. And what an image costs at a price: the one
formula the trial metrics, the SLO search and the report use, for the nodes a trial's figures were served by (an
endpoint's replicas behind its URL, `endpoint_nodes`, each rented at the tier's price; a launched server is one)."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments.config.errors import refuse
from serving.metric import cost_per

if TYPE_CHECKING:
    from experiments.config.schema import GpuTierConfig

PRIMARY = "primary"
# A month of a node kept up: 365 x 24 / 12 hours, the figure cloud price lists use.
HOURS_PER_MONTH = 730
# `pinned: true`: the price is the user's own, and `python -m runners.prices` (docs/prices.md) leaves it as it is.
PRICE_KEYS = ("usd_per_hour", "kind", "provider", "source", "seen", "pinned")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# The trial param naming the GPU nodes that served a trial's load, each paid at the tier's price: an endpoint's
# replicas behind its URL (serving/endpoint/). A trial without it ran on one node (a server tierbench launched).
NODES_PARAM = "endpoint_nodes"
# The trial param holding the hourly price its cost figures used, where that is not the tier's price (nodes > 1).
PRICED_PARAM = "priced_usd_per_hour"


# A price older than this (days since it was seen) is called stale by the report.
PRICE_MAX_AGE_DAYS = 90
SEEN_RE = re.compile(r"^(\d{4})(?:-(\d{1,2}))?(?:-(\d{1,2}))?$")


def seen_date(seen: str) -> dt.date | None:
    """The day a price was seen: `2026-03-10`, or the first of the month or year it names (`2026-11`, `2026`);
    None when it names none."""
    match = SEEN_RE.match(str(seen or "").strip())
    if not match:
        return None
    year, month, day = (int(part) if part else 1 for part in match.groups())
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


@dataclass(frozen=True)
class Price:
    """One way to pay for a tier, with where and when it was seen."""

    name: str
    usd_per_hour: float
    kind: str = "on_demand"  # on_demand | spot | interruptible | reserved | ...
    provider: str = ""
    source: str = ""
    seen: str = ""

    @property
    def param(self) -> str:
        """The trial/tier param holding this price: `price_per_hour_usd` for the primary one."""
        return "price_per_hour_usd" if self.name == PRIMARY else f"price_{self.name}_per_hour_usd"

    def label(self) -> str:
        """How the report names it, e.g. `runpod_spot $0.34/h (spot, RunPod, seen 2026-03-10)`."""
        kind = self.kind.replace("_", "-") if self.name != PRIMARY else ""
        details = [d for d in (kind, self.provider, f"seen {self.seen}" if self.seen else "") if d]
        return f"{self.name} ${self.usd_per_hour:g}/h" + (f" ({', '.join(details)})" if details else "")


def node_count(value: Any) -> int:
    """The nodes a trial's figures were served by, from its `endpoint_nodes` param as logged or read back (an int, a
    string from MLflow, NaN from a frame): absent or empty, 1."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return 1
    return int(float(value))


def trial_nodes(params: Mapping[str, Any]) -> int:
    """The nodes behind a trial's throughput, from its params."""
    return node_count(params.get(NODES_PARAM))


def fleet_usd_per_hour(usd_per_hour: Any, nodes: Any = 1) -> Any:
    """What `nodes` nodes cost per hour at `usd_per_hour` each: the price every cost figure of a trial served by
    them divides by its throughput. Numbers or pandas Series alike."""
    return usd_per_hour * nodes


def cost_per_1k_images(usd_per_hour: Any, throughput_img_s: Any, nodes: Any = 1) -> Any:
    """$ per 1k images = nodes x price per hour / 3600 / throughput x 1000: what an image costs while the nodes that
    served the trial's throughput are kept as busy as in the trial. Numbers or pandas Series alike."""
    return cost_per(fleet_usd_per_hour(usd_per_hour, nodes), throughput_img_s, 1000.0)


def images_per_usd(usd_per_hour: Any, throughput_img_s: Any, nodes: Any = 1) -> Any:
    """Images a dollar buys at that throughput: the inverse of the cost (a free tier has none to give)."""
    return throughput_img_s * 3600.0 / fleet_usd_per_hour(usd_per_hour, nodes)


def check_prices(gpu: GpuTierConfig, key: str = "gpu") -> list[str]:
    """What is wrong with the tier's alternative prices (`<key>.prices`): each a lower-case identifier (it becomes a
    param name) with usd_per_hour >= 0 (and `pinned`, where given, true or false); the first problem only."""
    for name, entry in (gpu.prices or {}).items():
        where = f"{key}.prices.{name}"
        if not NAME_RE.match(str(name)) or name == PRIMARY:
            return [f"{where}: the name {name!r} is not allowed: use lower-case letters, digits and _ (not 'primary'), "
                    f"e.g. {key}.prices.runpod_spot"]
        if not hasattr(entry, "keys"):
            return [refuse(where, entry, f"give a mapping, e.g. {where}={{usd_per_hour:0.34,kind:spot,source:URL,"
                                         "seen:2026-03-10}")]
        unknown = sorted(set(entry.keys()) - set(PRICE_KEYS))
        if unknown:
            return [f"{where}.{unknown[0]} is not a price key: use {list(PRICE_KEYS)}"]
        usd = entry.get("usd_per_hour")
        if not isinstance(usd, int | float) or isinstance(usd, bool) or usd < 0:
            return [refuse(f"{where}.usd_per_hour", usd, "set a price >= 0 in USD per hour")]
        pinned = entry.get("pinned", False)
        if not isinstance(pinned, bool):
            return [refuse(f"{where}.pinned", pinned, "true (the price is yours: runners.prices leaves it alone) or "
                                                      "false")]
    return []


def tier_prices(gpu: GpuTierConfig) -> list[Price]:
    """The primary price first, then the alternatives in config order."""
    prices = [Price(PRIMARY, float(gpu.price_per_hour_usd), "", "", str(gpu.price_source or ""),
                    str(gpu.price_seen or ""))]
    for name, entry in (gpu.prices or {}).items():
        prices.append(Price(str(name), float(entry["usd_per_hour"]), str(entry.get("kind") or "on_demand"),
                            str(entry.get("provider") or ""), str(entry.get("source") or ""),
                            str(entry.get("seen") or "")))
    return prices


def trial_price_params(gpu: GpuTierConfig) -> dict[str, float]:
    """The alternative prices as trial params (`price_<name>_per_hour_usd`); the primary is logged already."""
    return {p.param: p.usd_per_hour for p in tier_prices(gpu) if p.name != PRIMARY}


def tier_price_params(gpu: GpuTierConfig) -> dict[str, Any]:
    """Alternative prices with their details, for the tier run (`price_<name>_{per_hour_usd,kind,...}`)."""
    out: dict[str, Any] = {}
    for p in tier_prices(gpu):
        if p.name == PRIMARY:
            continue
        out[p.param] = p.usd_per_hour
        for key in ("kind", "provider", "source", "seen"):
            out[f"price_{p.name}_{key}"] = getattr(p, key)
    return out


def prices_from_params(params: dict[str, Any]) -> list[Price]:
    """Rebuild a tier's prices from its tier-run params (the inverse of the two functions above)."""
    prices = []
    if params.get("price_per_hour_usd") not in (None, ""):
        prices.append(Price(PRIMARY, float(params["price_per_hour_usd"]), "", "",
                            str(params.get("price_source") or ""), str(params.get("price_seen") or "")))
    for key, value in params.items():
        match = re.fullmatch(r"price_([a-z][a-z0-9_]*)_per_hour_usd", key)
        if match and value not in (None, ""):
            name = match.group(1)
            prices.append(Price(name, float(value), str(params.get(f"price_{name}_kind") or "on_demand"),
                                str(params.get(f"price_{name}_provider") or ""),
                                str(params.get(f"price_{name}_source") or ""),
                                str(params.get(f"price_{name}_seen") or "")))
    return prices

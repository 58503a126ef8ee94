"""The report's "Slices and shared cards": where a sweep measured a share of a card (`gpu.share_of`: a MIG slice, or
the card shared by servers at once) and the whole card's tier, each one's cheapest point at its primary price (within
the SLO where one is given), what 1k images cost on each, and how many shares it takes to serve the card's
throughput."""

from __future__ import annotations

import math
from fractions import Fraction

import pandas as pd

from experiments.config.shares import slices_per_card
from experiments.report import tables
from experiments.report.answer import point_name
from experiments.report.data import SweepData, TierInfo
from experiments.report.render import Document, format_frame, rate, usd
from experiments.report.tables import THROUGHPUT

COST = "cost_per_1k_usd"  # tables.priced_points: a point's $/1k at the price it is listed at


def share_text(share: float) -> str:
    """A share of a card as a fraction, e.g. `1/7`, `3/7` (`the whole card` for 1)."""
    if share >= 1:
        return "the whole card"
    fraction = Fraction(share).limit_denominator(16)
    return f"{fraction.numerator}/{fraction.denominator}" if abs(float(fraction) - share) < 1e-4 else f"{share:.3g}"


def _hourly(info: TierInfo, card: TierInfo) -> str:
    """The slice's primary price against its share of the card's, e.g. `$0.57 (1/7 of $3.99)`."""
    if not info.prices or not card.prices:
        return "-"
    mine, theirs = info.prices[0].usd_per_hour, card.prices[0].usd_per_hour
    share = share_text(info.gpu_share)
    expected = theirs * info.gpu_share
    if abs(mine - expected) <= 0.01:
        return f"${mine:g} ({share} of ${theirs:g})"
    above = (mine / expected - 1) if expected > 0 else math.inf
    return f"${mine:g} ({abs(above):.0%} {'above' if above > 0 else 'below'} {share} of ${theirs:g})"


def slices_section(doc: Document, data: SweepData, labels: dict[str, str],
                   slo_p99_ms: float | None = None) -> list[str]:
    """The section, where a slice tier and its card's tier both have a priced point; returns the summary's lines."""
    pairs = [(tier, info) for tier, info in sorted(data.tiers.items())
             if info.share_of and info.share_of in data.tiers]
    sustained = data.sustained
    if not pairs or sustained.empty:
        return []
    priced = tables.priced_points(sustained, {name: info.prices for name, info in data.tiers.items()})
    if priced.empty:
        return []
    limit = slo_p99_ms if slo_p99_ms is not None else math.inf
    within = f" with p99 ≤ {slo_p99_ms:g} ms" if slo_p99_ms is not None else ""
    rows, lines, missing = [], [], []
    for tier, info in pairs:
        card = info.share_of
        pick = tables.slo_pick(priced[priced["tier"] == tier], limit)
        whole = tables.slo_pick(priced[priced["tier"] == card], limit)
        name = labels.get(tier, tier)
        if pick is None or whole is None:
            lacking = " and ".join(labels.get(t, t) for t, p in ((tier, pick), (card, whole)) if p is None)
            missing.append(f"{name} against {labels.get(card, card)}: no point of {lacking}{within or ' was priced'}")
            continue
        needed = float(whole[THROUGHPUT]) / float(pick[THROUGHPUT])
        fit = slices_per_card(info.gpu_share)
        what = info.mig_profile or f"{info.tenants} servers at once"
        rows.append({"share": f"{name} ({what}, {share_text(info.gpu_share)})",
                     "share's cheapest point": point_name(pick, labels).strip("*"),
                     "share img/s": float(pick[THROUGHPUT]), "share $/1k": float(pick[COST]),
                     "card's cheapest point": point_name(whole, labels).strip("*"),
                     "card img/s": float(whole[THROUGHPUT]), "card $/1k": float(whole[COST]),
                     "shares for the card's img/s": f"{needed:.1f} (a card holds {fit})",
                     "share $/h": _hourly(info, data.tiers[card])})
        if abs(float(pick[COST]) - float(whole[COST])) <= 0.01 * float(whole[COST]):
            cheaper = "the same within 1 %"
        else:
            cheaper = (f"the {'slice' if info.mig_profile else 'share'} is cheaper" if pick[COST] < whole[COST] else
                       "the whole card is cheaper")
        shares = "slices" if info.mig_profile else "servers"
        reach = (f"more than a card holds: the whole card serves more than its {shares} together" if needed > fit else
                 f"the card's {fit} {shares} together would serve {fit / needed:.1f}x the whole card's")
        lines.append(f"{'MIG slice' if info.mig_profile else 'Shared card'} {name}: {usd(float(pick[COST]))} per 1k "
                     f"images against {usd(float(whole[COST]))} on the whole card ({labels.get(card, card)}), "
                     f"{cheaper}; {needed:.1f} {shares} serve the card's throughput ({reach})")
    if not rows and not missing:
        return []
    doc.h(1, "Slices and shared cards")
    doc.p(f"A share tier is a share of its card (`gpu.gpu_share`: 1/7 for a 1g.10gb MIG slice, one of the card's 7 "
          "compute slices; 1/2 for a card two servers share), priced at that share of the card's tier's price. Each "
          f"share against its whole card, both at their cheapest point at their primary price{within}: what 1k "
          "images cost on each, and how many such shares it takes to serve the card's throughput, beside how many "
          "the card holds. A MIG slice has its own compute, cache and memory paths, so each would serve as the one "
          "measured; a shared card's server was measured while its neighbours, copies of it, took the same load on "
          "the same card, so its figures include their contention (`card_throughput_img_s`, `tenant_fairness`).")
    if rows:
        frame = format_frame(pd.DataFrame(rows), {"share img/s": rate, "share $/1k": usd, "card img/s": rate,
                                                  "card $/1k": usd})
        doc.table(frame, [False, False, True, True, False, True, True, False, False])
    if missing:
        doc.p("Not compared: " + "; ".join(missing) + ".")
    return lines

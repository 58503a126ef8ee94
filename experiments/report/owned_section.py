"""The report's "Rent or own": for each tier priced as owned hardware (`gpu.owned`), its cheapest rented point
priced both ways, what its owned hour is made of, and the utilisation at which owning starts to pay."""

from __future__ import annotations

import pandas as pd

from experiments.report.answer import point_name
from experiments.report.data import SweepData
from experiments.report.render import Document, format_frame, rate, usd

COST = "cost_per_1k_images_usd"


def rent_or_own_section(doc: Document, data: SweepData, labels: dict[str, str]) -> list[str]:
    """The section (only where a tier has ownership assumptions); returns the summary's lines."""
    owned = {tier: info for tier, info in data.tiers.items() if info.owned is not None}
    ok = data.ok
    if not owned or ok.empty or COST not in ok:
        return []
    doc.h(1, "Rent or own")
    doc.p("Each tier's cheapest point at its primary (rented) price, priced again as hardware you own: the purchase "
          "written off over the hours the node serves (life x 8,760 h x utilisation), plus the energy it draws while "
          "serving (its GPUs' mean power measured over the windows, and the host's watts you set) at your tariff. "
          "Owning pays above the break-even utilisation.")
    rows, lines = [], []
    for tier, info in sorted(owned.items()):
        points = ok[(ok["tier"] == tier) & ok[COST].notna()]
        if points.empty or not info.prices:
            continue
        pick = points.loc[points[COST].idxmin()]
        own = info.owned
        watts = float(pick["gpu_power_w"]) if pd.notna(pick.get("gpu_power_w")) else None
        rent_hour = float(info.prices[0].usd_per_hour)
        owned_cost = own.cost_per_1k_images(float(pick["throughput_img_s"]), watts)
        even = own.break_even_utilisation(rent_hour, watts)
        rows.append({"point": point_name(pick, labels).strip("*"), "img/s": float(pick["throughput_img_s"]),
                     "GPU power": f"{watts:.0f} W" if watts is not None else "not measured",
                     "rent $/1k": float(pick[COST]), "own $/1k": owned_cost,
                     "own $/h": f"${own.purchase_usd_per_hour:.3g} + ${own.energy_usd_per_hour(watts):.3g} energy",
                     "owning pays above": f"{even:.0%} utilisation" if even is not None and even <= 1 else
                     ("never (energy alone costs more than the rent)" if even is None else
                      f"never ({even:.0%} utilisation needed)")})
        assumptions = (f"{labels.get(tier, tier)}: ${own.hardware_usd:,.0f} over {own.life_years:g} years at "
                       f"{own.utilisation:.0%} utilisation, ${own.usd_per_kwh:g}/kWh, host {own.host_watts:g} W"
                       + (f" ({own.source})" if own.source else ""))
        doc.p(f"Assumptions, {assumptions}.")
        cheaper = "own" if owned_cost < float(pick[COST]) else "rent"
        lines.append(f"rent or own on {labels.get(tier, tier)}: {usd(float(pick[COST]))} rented vs {usd(owned_cost)} "
                     f"owned per 1k images at {own.utilisation:.0%} utilisation ({cheaper} is cheaper)")
    if rows:
        frame = format_frame(pd.DataFrame(rows), {"img/s": rate, "rent $/1k": usd, "own $/1k": usd})
        doc.table(frame, [False, True, True, True, True, False, False])
    return lines

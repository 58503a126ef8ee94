"""A generative sweep's "Capacity plan in tokens" (`--peak-rps`, `--headroom`, or the sweep's `capacity.peak_rps`):
per tier, the nodes that serve a peak of requests/s at its best measured point within the TTFT and TPOT targets (the
most output tokens/s per node; without targets, the most of any stable point), each request as long as that point's
measured answers, and what they cost per hour and per month at each listed price. Sized from the measured grid: a
generative sweep has no load search yet, so the capacity is the best point measured, not the highest load within the
targets. Numbers from `points.TokenPlan`."""

from __future__ import annotations

import pandas as pd

from experiments.config.prices import HOURS_PER_MONTH
from experiments.report.capacity import primary
from experiments.report.data import SweepData
from experiments.report.generative.answer import point_name
from experiments.report.generative.points import Targets, TokenPlan, capacity_points
from experiments.report.render import Document, count, format_frame, rate, usd


def plans(data: SweepData, targets: Targets, peak_rps: float, headroom: float) -> list[TokenPlan]:
    """Each tier's plan, at the point `capacity_points` chooses; tiers with none left out."""
    return [TokenPlan(tier, point, peak_rps, headroom)
            for tier, point in capacity_points(data.sustained, targets).items()]


def capacity_section(doc: Document, data: SweepData, labels: dict[str, str], targets: Targets, peak_rps: float,
                     headroom: float) -> list[str]:
    """The section; returns the summary line (the cheapest tier for the peak at its primary price)."""
    doc.h(1, "Capacity plan in tokens")
    within = f"within {targets.describe()}" if targets else "with no TTFT or TPOT target (give `--ttft-p99-ms`, " \
                                                            "`--tpot-p99-ms`)"
    doc.p(f"Nodes for a peak of {peak_rps:,g} requests/s + {headroom * 100:g} % headroom, {within}: per tier, nodes = "
          "⌈peak requests/s × output tokens per request × (1 + headroom) ÷ output tokens/s per node⌉, at the tier's "
          "measured point with the most output tokens/s per node within the targets (stable ones first), each "
          "request as long as that point's measured answers (its mean output tokens). **Sized from the measured grid "
          "point**: a generative sweep has no load search yet, so a node's capacity is the best load the sweep "
          "measured, not the "
          "highest load within the targets; measure higher loads to find more. "
          f"$/month = $/hour × {HOURS_PER_MONTH} h.")
    found = plans(data, targets, peak_rps, headroom)
    missing = sorted(set(data.tiers) - {plan.tier for plan in found})
    if not found:
        doc.p(f"No tier has a measured point {within} that served output tokens: no plan.")
        return [f"capacity plan: no tier has a point {within}"]
    rows = []
    for plan in found:
        for price in data.tiers[plan.tier].prices:
            rows.append({"tier": labels.get(plan.tier, plan.tier), "point": point_name(plan.point, labels).strip("*"),
                         "tok/request": plan.tokens_per_request, "tok/s per node": plan.per_node_tokens_s,
                         "tok/s needed": float(plan.required_tokens_s), "nodes": plan.nodes,
                         "price": f"{price.name} ${price.usd_per_hour:g}/h",
                         "$/hour": float(plan.usd_per_hour(price)), "$/month": float(plan.usd_per_month(price))})
    frame = pd.DataFrame(rows)
    out = format_frame(frame, {"tok/request": rate, "tok/s per node": rate, "tok/s needed": rate, "nodes": count,
                               "$/hour": usd, "$/month": usd}, best={"$/month": "min"})
    doc.table(out, [False, False, True, True, True, True, False, True, True])
    unstable = [plan for plan in found if bool(plan.point.get("unstable", False))]
    if unstable:
        doc.note("Sized from an unstable point (its windows never agreed): "
                 + ", ".join(point_name(plan.point, labels) for plan in unstable) + ". Measure it again before buying.")
    if missing:
        doc.p(f"No point {within} on: {', '.join(labels.get(t, t) for t in missing)}.")
    at_primary = [(plan, primary(data.tiers[plan.tier].prices)) for plan in found]
    monthly = [(plan, plan.usd_per_month(price)) for plan, price in at_primary if price is not None]
    if not monthly:
        return []
    best, cost = min(monthly, key=lambda pair: (pair[1], pair[0].nodes))
    return [f"capacity plan for {peak_rps:,g} req/s peak (+{headroom * 100:g} %): cheapest {best.nodes} × "
            f"{point_name(best.point, labels).strip('*')} at {usd(float(cost))}/month (primary price; sized from "
            "the measured grid, no load search)"]

"""The report's "Prices" (every price a cost figure may use, with its source and date) and "What this benchmark
cost" (each tier's node up time while the sweep held it, at the tier's primary price)."""

from __future__ import annotations

import pandas as pd

from experiments.report.data import SweepData
from experiments.report.render import Document, format_frame, usd, usd_per_hour


def prices_section(doc: Document, data: SweepData) -> None:
    doc.h(1, "Prices")
    doc.p("Cost figures use each tier's **primary** price unless a column names another one. "
          "A figure is only as good as its price: check the source and date, and override with "
          "`gpu.price_per_hour_usd=...` or add `gpu.prices.<name>` in the tier's YAML.")
    rows = [{"tier": info.label, "price": p.name, "$/h": p.usd_per_hour, "kind": p.kind or "—",
             "provider": p.provider or "—", "source": p.source or "—", "seen": p.seen or "—"}
            for info in data.tiers.values() for p in info.prices]
    frame = format_frame(pd.DataFrame(rows), {"$/h": usd_per_hour})
    doc.table(frame, [False, False, True, False, False, False, False])


def benchmark_cost_section(doc: Document, data: SweepData) -> list[str]:
    """What the sweep itself cost: each tier's node up time while the sweep held it, at the tier's price; returns
    the line for the summary (none when no tier logged its node time)."""
    held = [info for info in data.tiers.values() if info.sweep_cost_usd is not None]
    if not held:
        return []
    doc.h(1, "What this benchmark cost")
    doc.p("Node up time while the sweep held each tier's node (from asking the autoscaler for it, when it had to "
          "start one), at the tier's primary price. Not included: an autoscaler's idle timeout after the sweep let "
          "the node go, and the head node.")
    rows = [{"tier": info.label, "node up time": f"{info.node_uptime_s / 60:.1f} min",
             "cost": usd(info.sweep_cost_usd)} for info in held]
    total = sum(info.sweep_cost_usd for info in held)
    minutes = sum(info.node_uptime_s for info in held) / 60
    rows.append({"tier": "all tiers", "node up time": f"{minutes:.1f} min", "cost": usd(total)})
    doc.table(pd.DataFrame(rows), [False, True, True])
    return [f"this benchmark kept {len(held)} tier node(s) up for {minutes:.1f} min: {usd(total)}"]

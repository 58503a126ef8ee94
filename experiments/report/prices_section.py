"""The report's "Prices" (every price a cost figure may use, with its source and date) and "What this benchmark
cost" (each tier's node up time while the sweep held it, at the tier's primary price)."""

from __future__ import annotations

import datetime as dt

import pandas as pd

from experiments.config.prices import PRICE_MAX_AGE_DAYS, seen_date
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


def stale_prices_note(data: SweepData, max_age_days: int = PRICE_MAX_AGE_DAYS) -> str | None:
    """Which prices were older than `max_age_days` when the tier's trials ran (or have no date at all); None when
    every price is current. A cost figure is only as current as its price."""
    stale = []
    for tier, info in data.tiers.items():
        used = _last_trial_date(data.trials, tier)
        for price in info.prices:
            seen = seen_date(price.seen)
            if seen is None:
                stale.append(f"{info.label} {price.name} ${price.usd_per_hour:g}/h (no date given)")
            elif (used - seen).days > max_age_days:
                stale.append(f"{info.label} {price.name} ${price.usd_per_hour:g}/h (seen {price.seen}, "
                             f"{(used - seen).days} days before the trials)")
    if not stale:
        return None
    return (f"**Prices older than {max_age_days} days**: {'; '.join(stale)}. Cloud prices move (the same H100 offer "
            "has moved by a third within months): refresh them from gpuhunt's catalog of cloud offers with "
            "`python -m runners.prices` (docs/prices.md; it shows the change, `--write` applies it), or check each "
            "source, then set `price_per_hour_usd` and `price_seen` (or the entry under `prices`) in "
            "`conf/gpu/<tier>.yaml`, or override them for one sweep (`gpu.price_per_hour_usd=... "
            "gpu.price_seen=YYYY-MM-DD`), and run the report again.")


def _last_trial_date(trials: pd.DataFrame, tier: str) -> dt.date:
    """When the tier's last trial started (MLflow gives a timestamp, or milliseconds); today when none did."""
    starts = trials.loc[trials["tier"] == tier, "start_time"].dropna() if "start_time" in trials else pd.Series()
    if starts.empty:
        return dt.date.today()
    last = starts.max()
    return (pd.to_datetime(last, unit="ms") if isinstance(last, int | float) else pd.Timestamp(last)).date()

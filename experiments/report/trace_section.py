"""The report's "Traffic from a trace": what each trace replay (`experiment.load_mode=trace`) offered and served, its
latency from each request's intended time, and what that traffic costs: the $ per 1k images actually served on the
node that replayed it (idle time in the troughs paid for, unlike a saturated trial's figure), and the capacity plan
for the trace's peak from the sweep's SLO search. How to read it: docs/trace-replay.md."""

from __future__ import annotations

import pandas as pd

from experiments.config.capacity import Traffic
from experiments.config.prices import cost_per_1k_images
from experiments.report.capacity import operating_points, single_plans
from experiments.report.capacity_section import measured_together, plan_target
from experiments.report.data import SweepData
from experiments.report.noise import interval
from experiments.report.render import Document, count, format_frame, ms, rate, usd

TRACE = "trace"
COST = "cost_per_1k_images_usd"
DOCS = "docs/trace-replay.md"


def trace_trials(data: SweepData) -> pd.DataFrame:
    """The trace replays that were measured (status ok)."""
    ok = data.ok
    if ok.empty or "load_mode" not in ok.columns:
        return ok.iloc[0:0]
    return ok[ok["load_mode"] == TRACE]


def trace_traffic(row: pd.Series, headroom: float) -> Traffic:
    """The traffic a replay offered, in images/s: its peak (the trial's request rate x images per request) and its
    average (the peak x the trace's mean over its peak)."""
    peak = float(row["request_rate"]) * int(row["batch_size"])
    return Traffic(peak * float(row["trace_mean_to_peak"]), peak, headroom)


def _replays_table(doc: Document, trials: pd.DataFrame, labels: dict[str, str]) -> None:
    rows = []
    for _, r in trials.iterrows():
        offered = trace_traffic(r, 0.0)
        spread = interval(r, COST)
        rows.append({"tier": labels.get(r["tier"], r["tier"]), "stack": r["stack"], "b": int(r["batch_size"]),
                     "trace": str(r.get("trace") or ""), "peak img/s": offered.peak_img_s,
                     "average img/s offered": offered.average_img_s, "img/s served": float(r["throughput_img_s"]),
                     "p50 ms": float(r["latency_p50_ms"]), "p99 ms": float(r["latency_p99_ms"]),
                     "late": int(r.get("late_requests", 0) or 0),
                     "overloaded": "yes" if bool(r.get("overloaded")) else "no",
                     "$/1k img served": float(r[COST]) if pd.notna(r.get(COST)) else float("nan"),
                     "_low": spread.low if spread else float("nan"), "_high": spread.high if spread else float("nan")})
    frame = pd.DataFrame(rows)
    ends = frame[["_low"]].rename(columns={"_low": "$/1k img served"}), frame[["_high"]].rename(
        columns={"_high": "$/1k img served"})
    frame = frame.drop(columns=["_low", "_high"])
    out = format_frame(frame, {"peak img/s": rate, "average img/s offered": rate, "img/s served": rate, "p50 ms": ms,
                               "p99 ms": ms, "$/1k img served": usd}, default=count,
                       intervals=ends if ends[0]["$/1k img served"].notna().any() else None)
    doc.table(out, [False, False, True, False, True, True, True, True, True, True, False, True])


def _plans_for_peaks(doc: Document, trials: pd.DataFrame, data: SweepData, labels: dict[str, str],
                     headroom: float, asked_ms: float | None) -> list[str]:
    target = plan_target(data, asked_ms)
    points = operating_points(data.slo, target) if target is not None else []
    if not points:
        doc.p("No SLO search result to size nodes with, so no capacity plan for the trace's peak. Search the highest "
              "load within a p99 target under a steady load in the same sweep (e.g. `experiment.load_mode=poisson "
              "experiment.slo.p99_ms=MS sweep_id=" + data.sweep_id + "`), then report again.")
        return []
    prices = {tier: info.prices for tier, info in data.tiers.items()}
    lines, rows = [], []
    for traffic in sorted({trace_traffic(r, headroom) for _, r in trials.iterrows()},
                          key=lambda t: (t.peak_img_s, t.average_img_s)):
        plans = single_plans(points, prices, traffic)
        for tier in sorted({p.point.tier for p in plans}):
            plan = next(p for p in plans if p.point.tier == tier)  # the tier's cheapest
            spread = plan.usd_per_month_range
            rows.append({"trace peak img/s": traffic.peak_img_s, "average img/s": traffic.average_img_s,
                         "tier": labels.get(tier, tier), "point": f"{plan.point.stack} b{plan.point.batch_size}",
                         "nodes": f"{plan.nodes}" + (f" ({plan.nodes_range[0]}–{plan.nodes_range[1]})"
                                                      if plan.nodes_range else ""),
                         "price": plan.price.label(),
                         "$/month": usd(float(plan.usd_per_month)) + (f" ({usd(spread.low)}–{usd(spread.high)})"
                                                                       if spread else ""),
                         "$/1k img at the trace's average": cost_per_1k_images(float(plan.usd_per_hour),
                                                                               traffic.average_img_s)})
        if plans:
            first = plans[0]
            lines.append(f"trace traffic (peak {traffic.peak_img_s:,g} img/s, average {traffic.average_img_s:,.1f}): "
                         f"{first.nodes} × {first.point.name(labels)} at {first.price.label()}, "
                         f"{usd(float(first.usd_per_month))}/month")
    out = format_frame(pd.DataFrame(rows), {"trace peak img/s": rate, "average img/s": rate,
                                            "$/1k img at the trace's average": usd})
    doc.p(f"Nodes for each replay's peak + {headroom * 100:g} % headroom, within p99 ≤ {target:g} ms, from the SLO "
          "search (as in “Capacity plan”; each tier's cheapest plan), and what they cost per 1k images of the "
          "trace's average traffic: the nodes sized for the peak are paid for all day.")
    doc.table(out, [True, True, False, False, True, False, True, True])
    together = measured_together(points, labels)
    if together is not None:
        doc.note(together)
    return lines


def trace_section(doc: Document, data: SweepData, labels: dict[str, str], headroom: float,
                  asked_ms: float | None) -> list[str]:
    """Add "Traffic from a trace" when the sweep replayed one; returns its lines for the answer."""
    trials = trace_trials(data)
    if trials.empty:
        return []
    doc.h(1, "Traffic from a trace")
    doc.p("Each replay compresses the whole trace into one measurement window (`experiment.window_s`) and loops it, "
          "its busiest step scaled to the trial's request rate (peak img/s = that rate × images per request; the "
          "average is the peak × the trace's mean over its peak). Arrivals are open loop, Poisson within each step "
          "of the trace; latency counts from each request's intended time; `late`: requests sent more than 5 ms "
          "after it; overloaded: completions fell behind arrivals over the windows. **$/1k img served**: the tier's "
          "price per hour (× the nodes behind an endpoint's URL) over the images actually served while replaying "
          "the trace, the idle troughs "
          f"paid for (a saturated trial's figure assumes a node that is always busy). ({DOCS})")
    _replays_table(doc, trials, labels)
    lines = [f"trace replay {labels.get(r['tier'], r['tier'])} · {r['stack']} · b{int(r['batch_size'])} at peak "
             f"{float(r['request_rate']):g} req/s: {usd(float(r[COST]))} per 1k images served, p99 "
             f"{float(r['latency_p99_ms']):.1f} ms" + (" (overloaded)" if bool(r.get("overloaded")) else "")
             for _, r in trials.iterrows() if pd.notna(r.get(COST))]
    doc.h(2, "Capacity plan for the trace's peak")
    return lines + _plans_for_peaks(doc, trials, data, labels, headroom, asked_ms)

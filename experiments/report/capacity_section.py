"""The report's "Capacity plan" (`--traffic-img-s`, a sweep's `capacity.*`): nodes per tier and operating point for
the peak traffic within the p99 target, with their $/hour and $/month at every listed price, cheapest first; mixed
tiers where one tier's node count rounds up badly; $/month against traffic; and for a tier without SLO results the
command that measures them. Numbers from `experiments.report.capacity`; how to read it: docs/capacity-plan.md."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import pandas as pd

from experiments.config.capacity import Traffic
from experiments.config.compose import options
from experiments.config.prices import HOURS_PER_MONTH, Price, cost_per_1k_images
from experiments.report import marks, plots
from experiments.report.capacity import (
    Mix,
    Plan,
    Point,
    best_points,
    cost_steps,
    crossovers,
    mixed_plans,
    operating_points,
    primary,
    single_plans,
    slo_targets,
    tier_rivals,
)
from experiments.report.data import ReportError, SweepData, TierInfo
from experiments.report.noise import overlap_verdict
from experiments.report.render import Document, count, format_frame, rate, usd
from experiments.report.served import marked_table

MAX_ROWS = 30  # plans shown, cheapest first
MAX_CROSSOVERS = 8  # named in the text; the plot shows them all
PLOT = "capacity_cost.png"


def plan_target(data: SweepData, asked_ms: float | None) -> float | None:
    """The p99 target of the plan: the one asked for, else the tightest the sweep's SLO searches used."""
    if asked_ms is not None:
        return asked_ms
    targets = slo_targets(data.slo)
    return targets[0] if targets else None


def refuse_unpriced(data: SweepData, asked_ms: float | None) -> None:
    """A tier the plan would size but cannot price is refused before anything is written."""
    target = plan_target(data, asked_ms)
    if target is None:
        return
    for tier in sorted({p.tier for p in operating_points(data.slo, target)}):
        info = data.tiers.get(tier)
        if info is None or primary(info.prices) is None:
            raise ReportError(f"tier {tier!r}: price_per_hour_usd=None is not allowed in a capacity plan: its runs "
                              "carry no price to multiply its nodes by; run the tier again with one "
                              f"(gpu={tier} gpu.price_per_hour_usd=USD sweep_id={data.sweep_id}), or leave out the "
                              "traffic (--traffic-img-s, capacity.traffic_img_s)")


def measure_command(info: TierInfo, sweep_id: str, target_ms: float | None) -> str:
    """The sweep that adds this tier's SLO search to the sweep (same sweep_id: its measured trials are kept)."""
    args = [f"gpu={info.name}"]
    if info.experiment in options("experiment"):
        args.append(f"experiment={info.experiment}")
    if info.model in options("model"):
        args.append(f"model={info.model}")
    if info.emulated:
        args.append("cluster=emulated")
    args += [f"experiment.slo.p99_ms={target_ms:g}" if target_ms else "experiment.slo.p99_ms=MS",
             f"sweep_id={sweep_id}"]
    return shlex.join(["python", "-m", "runners.sweep", *args])


def measured_together(points: list[Point], labels: dict[str, str]) -> str | None:
    """What the plan assumes of points whose SLO search measured several nodes at once (an endpoint's replicas behind
    one URL); None when every point was measured on one node."""
    fleets = [p for p in points if p.measured_nodes > 1]
    if not fleets:
        return None
    named = "; ".join(f"{p.name(labels)}: {p.measured_nodes} nodes behind its URL, img/s per node = their highest "
                      f"throughput within the target ÷ {p.measured_nodes}" for p in fleets)
    return (f"Measured on several nodes at once ({named}). Its plan counts nodes of that share, which assumes its "
            "load balancer gave each node an equal share and that a node holds the same p99 at that share alone; "
            "neither was measured (a fleet of another size may queue differently).")


def _plan_intervals(shown: list[Plan], frame: pd.DataFrame, nodes: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The (low, high) ends shown after the per-node throughput, the node count and the $/hour and $/month, from the
    throughput interval of the SLO search's repeats (the fewest nodes come from its high end); NaN for a point
    measured once; None when no point has an interval."""
    if all(p.nodes_range is None for p in shown):
        return None
    nan = float("nan")
    ends = []
    for end in (0, 1):
        rows = []
        for plan in shown:
            spread, counts, month = plan.point.img_s_interval, plan.nodes_range, plan.usd_per_month_range
            rows.append({"img/s per node": nan, nodes: nan, "$/hour": nan, "$/month": nan} if counts is None else
                        {"img/s per node": (spread.low, spread.high)[end], nodes: counts[end],
                         "$/hour": counts[end] * plan.price.usd_per_hour, "$/month": (month.low, month.high)[end]})
        ends.append(pd.DataFrame(rows, index=frame.index))
    return ends[0], ends[1]


def _plans_table(doc: Document, plans: list[Plan], labels: dict[str, str], traffic: Traffic) -> None:
    shown = plans[:MAX_ROWS]
    nodes = f"nodes (peak +{traffic.headroom * 100:g} %)"
    frame = pd.DataFrame({
        "tier": [labels.get(p.point.tier, p.point.tier) for p in shown],
        "stack": [p.point.stack for p in shown],
        "b": [p.point.batch_size for p in shown],
        "img/s per node": [p.point.img_s for p in shown],
        "req/s per node": [p.point.requests_s for p in shown],
        nodes: [p.nodes for p in shown],
        "capacity img/s": [float(p.capacity_img_s) for p in shown],
        "price": [p.price.label() for p in shown],
        "$/hour": [float(p.usd_per_hour) for p in shown],
        "$/month": [float(p.usd_per_month) for p in shown],
        "$/1k img at average": [cost_per_1k_images(float(p.usd_per_hour), traffic.average_img_s) for p in shown],
    })
    figure_marks = pd.DataFrame({"img/s per node": [marks.UNSTABLE if p.point.unstable else "" for p in shown]},
                                index=frame.index)
    out = format_frame(frame, {"img/s per node": rate, "req/s per node": rate, "capacity img/s": rate, "$/hour": usd,
                               "$/month": usd, "$/1k img at average": usd}, default=count, marks=figure_marks,
                       intervals=_plan_intervals(shown, frame, nodes))
    out["img/s per node"] = [("≥ " if p.point.limited else "") + cell for p, cell in zip(shown, out["img/s per node"],
                                                                                           strict=True)]
    marked_table(doc, out, [False, False, True, True, True, True, True, False, True, True, True],
                 figure_marks["img/s per node"], "plans")
    if len(plans) > MAX_ROWS:
        doc.p(f"{len(plans) - MAX_ROWS} dearer plan(s) left out.")


def _prices_used(doc: Document, plans: list[Plan], labels: dict[str, str]) -> None:
    seen: dict[tuple[str, str], Price] = {}
    for plan in plans:
        seen.setdefault((plan.point.tier, plan.price.name), plan.price)
    doc.bullets([f"{labels.get(tier, tier)} · {price.label()}: source {price.source or 'not given'}"
                 + ("" if price.seen else ", date not given") for (tier, _), price in sorted(seen.items())])


def noise_verdict(plans: list[Plan], labels: dict[str, str]) -> str | None:
    """Whether the cheapest plan and the cheapest of another tier differ beyond noise: their $/month ranges (node
    counts at the throughput intervals' ends) overlap or not. None without two tiers, or without intervals."""
    rivals = tier_rivals(plans)
    if rivals is None:
        return None
    pick, rival = rivals
    ours, theirs = pick.usd_per_month_range, rival.usd_per_month_range
    if ours is None or theirs is None:
        return None

    def named(plan: Plan, spread) -> str:  # noqa: ANN001 - an Interval
        low, high = plan.nodes_range
        nodes = f"{plan.nodes} nodes ({low}–{high})" if low != high else f"{plan.nodes} nodes"
        return (f"{nodes} of {plan.point.name(labels)} at {plan.price.label()}, {usd(float(plan.usd_per_month))}/month "
                f"({usd(spread.low)}–{usd(spread.high)})")

    tier = labels.get(pick.point.tier, pick.point.tier)
    return overlap_verdict(ours, theirs, f"the cheapest plan of another tier, {named(rival, theirs)}",
                           f"the cheapest plan's, {named(pick, ours)}", tier,
                           labels.get(rival.point.tier, rival.point.tier))


def _mix_text(mix: Mix, labels: dict[str, str]) -> str:
    used = [plan for plan in (mix.first, mix.second) if plan.nodes]
    return " + ".join(f"{plan.nodes} × {plan.point.name(labels)}" for plan in used)


def _mixes(doc: Document, mixes: list[Mix], labels: dict[str, str], traffic: Traffic) -> list[str]:
    doc.h(2, "Mixed plans (primary prices)")
    doc.p(f"For each pair of tiers, each at its point with the most img/s per node and its primary price: every node "
          f"count of the first tier from 0 to what covers {float(traffic.required_img_s):,g} img/s alone, each with "
          "the fewest nodes of the second that cover the rest; the cheapest combination is kept (exact: no rounding "
          "but the ceilings). A mixed plan needs a load balancer that gives each node a share in proportion to its "
          "img/s per node, so that no node passes the load it was measured at within the target.")
    rows, lines = [], []
    for mix in mixes:
        best = mix.best_alone
        saving = best.usd_per_hour - mix.usd_per_hour
        verdict = (f"mix saves {usd(float(saving))}/hour ({usd(float(saving) * HOURS_PER_MONTH)}/month, "
                   f"{float(saving / best.usd_per_hour):.0%}) over {labels.get(best.point.tier, best.point.tier)} "
                   "alone" if mix.wins else
                   f"no mix beats {labels.get(best.point.tier, best.point.tier)} alone")
        rows.append({"tiers": " + ".join(labels.get(p.point.tier, p.point.tier) for p in (mix.first, mix.second)),
                     "cheapest combination": _mix_text(mix, labels), "capacity img/s": float(mix.capacity_img_s),
                     "$/hour": float(mix.usd_per_hour), "$/month": float(mix.usd_per_hour) * HOURS_PER_MONTH,
                     "each alone": "; ".join(f"{p.nodes} × {labels.get(p.point.tier, p.point.tier)} "
                                             f"{usd(float(p.usd_per_hour))}/hour" for p in mix.alone),
                     "verdict": verdict})
        if mix.wins:
            lines.append(f"mixed: {_mix_text(mix, labels)} at primary prices: {usd(float(mix.usd_per_hour))}/hour, "
                         f"{usd(float(mix.usd_per_hour) * HOURS_PER_MONTH)}/month ({verdict})")
    out = format_frame(pd.DataFrame(rows), {"capacity img/s": rate, "$/hour": usd, "$/month": usd})
    doc.table(out, [False, False, True, True, True, False, False])
    return lines


def _curves(doc: Document, folder: Path, images: dict[str, Path], points: list[Point], data: SweepData,
            labels: dict[str, str], traffic: Traffic) -> None:
    best = {tier: point for tier, point in best_points(points).items() if primary(data.tiers[tier].prices)}
    up_to = 2 * traffic.peak_img_s
    steps = {tier: cost_steps(point, primary(data.tiers[tier].prices), traffic.headroom, up_to)
             for tier, point in best.items()}
    found = crossovers(steps)
    doc.h(2, "$/month against traffic")
    names = {tier: f"{labels.get(tier, tier)} ({point.stack} b{point.batch_size}, {rate(point.img_s)} img/s per node, "
                   f"{usd(primary(data.tiers[tier].prices).usd_per_hour)}/h)" for tier, point in best.items()}
    curves = {names[tier]: [(float(x), float(c)) for x, c in curve] for tier, curve in steps.items()}
    crossings = [(float(c.traffic_img_s), float(next(cost for x, cost in steps[c.cheaper] if x > c.traffic_img_s)))
                 for c in found]
    images[PLOT] = plots.capacity_cost(curves, traffic, up_to, crossings, folder / PLOT)
    doc.image(PLOT, f"$/month against peak traffic (0 to {up_to:,g} img/s), one step line per tier: its point with "
                    f"the most img/s per node at its primary price, nodes for the peak +{traffic.headroom * 100:g} %; "
                    "dashed: this plan's peak; ×: crossovers")
    if not found:
        doc.p("No crossover: " + (f"{labels.get(next(iter(best)), next(iter(best)))} is the only tier with SLO "
                                  "results." if len(best) == 1 else "one tier is the cheapest (or tied) at every "
                                  f"traffic up to {up_to:,g} img/s."))
        return
    said = [f"above {float(c.traffic_img_s):,.1f} img/s, {labels.get(c.cheaper, c.cheaper)} costs less than "
            f"{labels.get(c.before, c.before)}" for c in found[:MAX_CROSSOVERS]]
    more = f"; and {len(found) - MAX_CROSSOVERS} more (see the plot)" if len(found) > MAX_CROSSOVERS else ""
    doc.p(f"Crossovers (peak traffic where the cheapest tier changes; a tie keeps the tier that led): "
          f"{'; '.join(said)}{more}. The steps are nodes: where one tier's node count rounds up badly, another "
          "tier, or a mix (above), is cheaper.")


def capacity_section(doc: Document, images: dict[str, Path], folder: Path, data: SweepData, labels: dict[str, str],
                     traffic: Traffic, asked_ms: float | None) -> list[str]:
    """Add "Capacity plan"; returns its lines for the answer."""
    doc.h(1, "Capacity plan")
    target = plan_target(data, asked_ms)
    points = operating_points(data.slo, target) if target is not None else []
    missing = [info for tier, info in sorted(data.tiers.items()) if tier not in {p.tier for p in points}]
    within = f"p99 ≤ {target:g} ms" if target is not None else "a p99 target"
    doc.p(f"Nodes of each tier for {traffic.describe()}, within {within}, at every operating point the "
          f"SLO search measured: nodes = ⌈peak × (1 + {traffic.headroom:g}) ÷ img/s per node⌉, where img/s per node "
          "is what the highest load whose p99 stayed within the target served (its goodput where the search had a "
          "deadline; section “SLO search”; ≥: the search stopped "
          "at its load limit, so a node serves at least that). Traffic is in images/s; a point at batch b takes it "
          "as requests of b images (req/s per node = img/s ÷ b): clients that send fewer images per request need a "
          f"point at their batch size, or a server that batches. $/month = $/hour × {HOURS_PER_MONTH}. "
          "$/1k img at average: the plan's $/hour over the images the average traffic brings, idle capacity paid "
          "for. Cheapest first, at every listed price. Where the search's probes were measured several times "
          "(experiment.repeats), (low–high) after a figure is its 95 % interval: img/s per node from the repeats, "
          "nodes at the interval's high and low end, and their $/hour and $/month (docs/confidence-intervals.md).")
    others = [t for t in slo_targets(data.slo) if not math.isclose(t, target)] if target is not None else []
    if others:
        doc.note(f"The sweep also searched p99 ≤ {', '.join(f'{t:g}' for t in others)} ms: "
                 "`python -m runners.report --slo-p99-ms MS` plans at another target.")
    lines: list[str] = []
    plans = single_plans(points, {t: i.prices for t, i in data.tiers.items()}, traffic)
    together = measured_together(points, labels)
    if together is not None and plans:
        doc.note(together)
    if plans:
        _plans_table(doc, plans, labels, traffic)
        doc.p("Prices (as in the section “Prices”):")
        _prices_used(doc, plans, labels)
        first = plans[0]
        spread = first.usd_per_month_range
        lines.append(f"capacity plan for {traffic.describe()}, within {within}: {first.nodes} × "
                     f"{first.point.name(labels)} at {first.price.label()}: {usd(float(first.usd_per_hour))}/hour, "
                     f"{usd(float(first.usd_per_month))}/month"
                     + (f" (95 %: {first.nodes_range[0]}–{first.nodes_range[1]} nodes, {usd(spread.low)}–"
                        f"{usd(spread.high)}/month)" if spread is not None else ""))
        verdict = noise_verdict(plans, labels)
        if verdict is not None:
            doc.p(verdict)
            lines.append(verdict)
        mixes = mixed_plans(points, {t: i.prices for t, i in data.tiers.items()}, traffic)
        if mixes:
            lines += _mixes(doc, mixes, labels, traffic)
        _curves(doc, folder, images, points, data, labels, traffic)
    else:
        doc.p(f"No tier has an SLO search result within {within}, so no node count can be given.")
    if missing:
        doc.h(2, "Tiers without SLO results")
        doc.p(f"These tiers have no SLO search result at {within}: this sweep measured them, but not the highest load "
              "within the target. Run (with the other overrides the sweep ran with; the same sweep_id keeps its "
              "measured trials and adds the search), then report again:")
        commands = {info.name: measure_command(info, data.sweep_id, target) for info in missing}
        doc.bullets([f"{labels.get(tier, tier)}: `{command}`" for tier, command in commands.items()])
        lines += [f"{labels.get(tier, tier)}: no SLO result within {within}; measure it: {command}"
                  for tier, command in commands.items()]
    return lines

"""The report's "Cost per image across tiers": $ per 1k images and images per $ side by side, the Pareto frontier
and its plots, the operating points within the p99 target cheapest first, and each tier's ratios over the baseline
tier. From the trials whose server kept up (`sustained`): an overloaded trial is in no cost figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.report import plots, tables
from experiments.report.ceiling_section import Floor
from experiments.report.data import NODES
from experiments.report.noise import interval_ends, pivot_ends
from experiments.report.render import Document, count, format_frame, ms, rate, ratio, usd, usd_per_hour
from experiments.report.served import STACK_NOTE, load_marks, marked_table, point_numeric
from experiments.report.tables import MARKS, P50, P99, THROUGHPUT


def cross_tier_section(doc: Document, images: dict[str, Path], folder: Path, sustained: pd.DataFrame,
                       labels: dict[str, str], prices: dict, slo_p99_ms: float | None,
                       baseline_tier: str | None, floors: dict[str, Floor] | None = None) -> None:
    """Cost tables, the Pareto frontier and its plots: from the trials whose server kept up (`sustained`). `floors`:
    what each tier's image would cost at its best in-process throughput, drawn on the Pareto plot."""
    doc.h(1, "Cost per image across tiers")
    doc.p(f"$ per 1k images = price per hour / 3600 / throughput × 1000: the cost of keeping the tier busy at "
          f"that operating point, at each tier's primary price. {STACK_NOTE}")
    tiers = sorted(sustained["tier"].unique())
    if len(tiers) == 1:
        doc.p(f"One tier in this sweep: its cost per operating point at each of its prices is in the section "
              f"“Tier {labels[tiers[0]]}” below.")
    for metric, fmt, best, title in (("cost_per_1k_images_usd", usd, "min", "$ per 1k images (primary price)"),
                                     ("images_per_usd", count, "max", "Images per $ (primary price)")):
        if len(tiers) == 1:
            break
        pivot = tables.cost_by_tier(sustained, metric)
        if pivot.empty:
            continue
        pivot_marks = tables.cost_by_tier(sustained, MARKS).reindex(index=pivot.index, columns=pivot.columns)
        names = {c: labels.get(c, c) for c in pivot.columns}
        ends = pivot_ends(sustained, metric, lambda name: tables.cost_by_tier(sustained, name), names)
        pivot, pivot_marks = pivot.rename(columns=names), pivot_marks.rename(columns=names)
        doc.h(2, title)
        out = format_frame(pivot, {c: fmt for c in pivot.columns}, best={c: best for c in pivot.columns},
                           marks=pivot_marks, intervals=ends).reset_index()
        out.columns = ["stack", "b", "load", *out.columns[3:]]
        marked_table(doc, out, point_numeric(out), pivot_marks.where(pivot.notna()))
    frontier = tables.pareto_frontier(sustained)
    doc.h(2, "Pareto frontier: p99 latency vs $ per 1k images")
    doc.p("No other operating point is both faster (p99) and cheaper. For a p99 target, the cheapest choice is the "
          "last row whose p99 is within it.")
    f = frontier[["tier", "stack", "batch_size", "load", P99, P50, THROUGHPUT, "cost_per_1k_images_usd"]]
    f = f.assign(tier=f["tier"].map(labels), load=f["load"].astype(str))
    shown = {P99: "p99 ms", P50: "p50 ms", THROUGHPUT: "img/s", "cost_per_1k_images_usd": "$/1k img"}
    out = format_frame(f.rename(columns={"batch_size": "b", **shown}),
                       {"p99 ms": ms, "p50 ms": ms, "img/s": rate, "$/1k img": usd},
                       marks=load_marks(f, frontier[MARKS]), intervals=interval_ends(frontier, shown))
    marked_table(doc, out, [False, *point_numeric(out.iloc[:, 1:])], frontier[MARKS], "points")
    pick = None
    if slo_p99_ms is not None:
        chosen = tables.slo_pick(tables.priced_points(sustained, prices), slo_p99_ms)
        if chosen is not None:
            pick = chosen.rename({"cost_per_1k_usd": "cost_per_1k_images_usd"})
    images["pareto.png"] = plots.pareto(sustained, frontier, labels, folder / "pareto.png", slo_p99_ms, pick,
                                        floors)
    doc.image("pareto.png", "p99 latency vs $ per 1k images (primary prices), Pareto frontier in black; hollow "
                            "markers: unstable trials" + ("; dashed: each tier's floor, at its best in-process "
                                                          "throughput" if floors else ""))
    images["cost_per_1k.png"] = plots.cost_bars(sustained, prices, labels, folder / "cost_per_1k.png")
    doc.image("cost_per_1k.png", "Lowest $ per 1k images per backend stack and tier; ticks: other listed prices; "
                                 "hatched: unstable")
    if slo_p99_ms is not None:
        _slo_table(doc, tables.priced_points(sustained, prices), labels, slo_p99_ms)
    if len(tiers) > 1:
        _cross_tier_ratios(doc, sustained, tiers, labels, baseline_tier)


def _cross_tier_ratios(doc: Document, sustained: pd.DataFrame, tiers: list[str], labels: dict[str, str],
                       baseline_tier: str | None) -> None:
    base = baseline_tier if baseline_tier in tiers else tiers[0]
    doc.h(2, f"Cross-tier ratios (each tier over {labels[base]})")
    doc.p("Ratio = other tier / baseline at the same operating point: p50 > 1 means slower, throughput > 1 "
          "means more img/s, cost > 1 means dearer per image (primary prices). A ratio carries the marks of both "
          "its trials.")
    for other in (t for t in tiers if t != base):
        ratios = tables.cross_tier(sustained, base, other)
        if ratios.empty:
            doc.p(f"{labels[other]} and {labels[base]} share no operating point.")
            continue
        ratio_marks = tables.cross_tier(sustained, base, other, values=MARKS)
        doc.h(3, f"{labels[other]} / {labels[base]}")
        cols = {c: (ratio if c.endswith("_ratio") else usd if c.startswith("cost") else
                    ms if c.startswith("p50") else rate) for c in ratios.columns}
        out = format_frame(ratios, cols, marks=ratio_marks).reset_index()
        out.columns = ["stack", "b", "load", *[c.replace("_", " ") for c in out.columns[3:]]]
        marked_table(doc, out, point_numeric(out), ratio_marks)


def _slo_table(doc: Document, priced: pd.DataFrame, labels: dict[str, str], slo: float) -> None:
    doc.h(2, f"Operating points meeting p99 ≤ {slo:g} ms, cheapest first")
    cands = tables.slo_candidates(priced, slo).head(15)
    if cands.empty:
        doc.p("None.")
        return
    # $/h is what the point's nodes cost at that price: `4 × primary` for an endpoint's 4 replicas behind its URL.
    price = [f"{n} × {name}" if n > 1 else name for name, n in zip(cands["price"], cands[NODES], strict=True)]
    out = cands[["tier", "stack", "batch_size", "load", P99, THROUGHPUT, "price", "usd_per_hour",
                 "cost_per_1k_usd"]].assign(tier=cands["tier"].map(labels), load=cands["load"].astype(str), price=price)
    shown = {P99: "p99 ms", THROUGHPUT: "img/s", "cost_per_1k_usd": "$/1k img"}
    out = format_frame(out.rename(columns={"batch_size": "b", "usd_per_hour": "$/h", **shown}),
                       {"p99 ms": ms, "img/s": rate, "$/h": usd_per_hour, "$/1k img": usd},
                       marks=load_marks(out, cands[MARKS]), intervals=interval_ends(cands, shown))
    marked_table(doc, out, [False, False, True, False, True, True, False, True, True], cands[MARKS], "rows")

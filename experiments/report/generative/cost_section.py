"""A generative sweep's "Cost per 1M tokens across tiers": $ per 1M output tokens by point and tier, the two Pareto
frontiers (TTFT p99, and TPOT p99, against $ per 1M output tokens) with their plots, and the points within the targets
cheapest first at every listed price. From the trials whose server kept up: an overloaded trial is in no cost figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.report import tables
from experiments.report.data import NODES
from experiments.report.generative import plots
from experiments.report.generative.points import (
    COST,
    OUTPUT_RATE,
    POINT,
    TOTAL_COST,
    TPOT,
    TTFT,
    Targets,
    at_price,
    cheapest,
    ranked,
)
from experiments.report.noise import interval_ends
from experiments.report.render import Document, format_frame, ms, rate, usd, usd_per_hour
from experiments.report.served import load_marks, marked_table
from experiments.report.tables import MARKS

STACK_NOTE = ("A stack is `backend variant/protocol/input format` (chat_stream, completions_stream, chat, "
              "completions); a load is `cN` (N conversations in flight, closed loop) or `poisson-rR` / `constant-rR` "
              "(open-loop arrivals at R requests/s).")
# The frontiers: the latency on the x axis, its name, the target that bounds it and the plot's file.
FRONTIERS = ((TTFT, "TTFT p99", "pareto_ttft.png"), (TPOT, "TPOT p99", "pareto_tpot.png"))
SHOWN = {TTFT: "TTFT p99 ms", TPOT: "TPOT p99 ms", OUTPUT_RATE: "output tok/s", COST: "$/1M out",
         TOTAL_COST: "$/1M total"}
FORMATS = {"TTFT p99 ms": ms, "TPOT p99 ms": ms, "output tok/s": rate, "$/1M out": usd, "$/1M total": usd,
           "$/h": usd_per_hour}


def point_table(rows: pd.DataFrame, labels: dict[str, str], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Priced points as a table's cells: tier, stack, load, `extra` columns as they are, then the figures (with their
    intervals, the load cell with its marks)."""
    figures = [m for m in SHOWN if m in rows.columns]
    frame = rows[["tier", *POINT, *extra, *figures]].assign(tier=rows["tier"].map(lambda t: labels.get(t, t)),
                                                           load=rows["load"].astype(str))
    frame = frame.rename(columns=SHOWN).reset_index(drop=True)
    return format_frame(frame, FORMATS, marks=load_marks(frame, rows[MARKS]),
                        intervals=interval_ends(rows.reset_index(drop=True), {m: SHOWN[m] for m in figures}))


def _numeric(out: pd.DataFrame, text: int) -> list[bool]:
    return [False] * text + [True] * (out.shape[1] - text)


def cost_section(doc: Document, images: dict[str, Path], folder: Path, priced: pd.DataFrame, labels: dict[str, str],
                 targets: Targets) -> None:
    """The section, from the priced points (`points.priced_points` of the sustained trials); its plots are written
    into `folder` and named in `images`."""
    doc.h(1, "Cost per 1M tokens across tiers")
    doc.p("$ per 1M output tokens = price per hour / 3600 / output tokens per second × 1M: what an output token costs "
          "while the tier is kept as busy as at that operating point; $ per 1M tokens counts the prompt's tokens too "
          "(prompt + output tokens per second). At each tier's primary price unless a column names another. "
          + STACK_NOTE)
    primary = at_price(priced)
    if primary.empty:
        doc.p("No tier has a primary price: no cost figure (see “Prices”).")
        return
    tiers = sorted(primary["tier"].unique())
    if len(tiers) > 1:
        pivot = primary.pivot_table(index=POINT, columns="tier", values=COST, aggfunc="first", observed=True)
        pivot_marks = primary.pivot_table(index=POINT, columns="tier", values=MARKS, aggfunc="first",
                                          observed=True).reindex(index=pivot.index, columns=pivot.columns)
        names = {c: labels.get(c, c) for c in pivot.columns}
        pivot, pivot_marks = pivot.rename(columns=names), pivot_marks.rename(columns=names)
        doc.h(2, "$ per 1M output tokens (primary price)")
        out = format_frame(pivot, {c: usd for c in pivot.columns}, best={c: "min" for c in pivot.columns},
                           marks=pivot_marks).reset_index()
        marked_table(doc, out, _numeric(out, 2), pivot_marks.where(pivot.notna()))
    else:
        doc.p(f"One tier in this sweep: its cost per operating point at each of its prices is in the section “Tier "
              f"{labels.get(tiers[0], tiers[0])}” below.")
    pick = cheapest(priced, targets) if targets else None
    for metric, name, file in FRONTIERS:
        frontier = tables.pareto_frontier(primary, x=metric, y=COST)
        doc.h(2, f"Pareto frontier: {name} vs $ per 1M output tokens")
        doc.p(f"No other operating point has both a lower {name} and a lower cost per output token. For a {name} "
              "target, the cheapest choice is the last row within it.")
        if frontier.empty:
            doc.p(f"No trial has a {name} (an answer not streamed has none).")
            continue
        out = point_table(frontier, labels)
        marked_table(doc, out, _numeric(out, 3), frontier[MARKS], "points")
        images[file] = plots.pareto(primary, frontier, metric, name, labels, folder / file,
                                    targets.given.get(metric), pick)
        doc.image(file, f"{name} vs $ per 1M output tokens (primary prices), Pareto frontier in black; hollow markers: "
                        "unstable trials" + ("; dashed: the target" if metric in targets.given else ""))
    if targets:
        _within(doc, priced, labels, targets)


def _within(doc: Document, priced: pd.DataFrame, labels: dict[str, str], targets: Targets) -> None:
    """The points within the targets at every listed price, cheapest per output token first."""
    doc.h(2, f"Operating points meeting {targets.describe()}, cheapest first")
    rows = ranked(priced, targets, price=None).head(15)
    if rows.empty:
        doc.p("None.")
        return
    # $/h is what the point's nodes cost at that price: `4 × primary` for an endpoint's 4 replicas behind its URL.
    rows = rows.assign(price=[f"{n} × {p}" if n > 1 else p for p, n in zip(rows["price"], rows[NODES], strict=True)])
    out = point_table(rows.rename(columns={"usd_per_hour": "$/h"}), labels, ("price", "$/h"))
    marked_table(doc, out, [False, False, False, False, *([True] * (out.shape[1] - 4))], rows[MARKS], "rows")

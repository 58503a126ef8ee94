"""The report's section for one tier: its price, then per load its p50 and throughput by batch size, gRPC's speedup
over HTTP, concurrency scaling, the open-loop rates, cost per 1k images at each of its listed prices, the server-side,
SLO and client breakdowns, and its latency-vs-throughput plot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from experiments.report import plots, tables
from experiments.report.data import NODES, SweepData, TierInfo, nodes
from experiments.report.noise import pivot_ends, priced_ends
from experiments.report.render import Document, count, format_frame, ms, rate, ratio, usd
from experiments.report.served import (
    STACK_NOTE,
    load_marks,
    marked_table,
    numeric,
    open_loop_table,
    point_numeric,
    server_count_note,
)
from experiments.report.tables import MARKS, P50, P99, POINT, THROUGHPUT
from serving.node import busy_elsewhere


def tier_section(doc: Document, images: dict[str, Path], folder: Path, data: SweepData, ok: pd.DataFrame,
                 tier: str) -> None:
    """The tier's tables and plot from its `ok` trials; the plot is written into `folder` and named in `images`."""
    info = data.tiers[tier]
    doc.h(1, f"Tier {info.label}")
    primary = info.prices[0] if info.prices else None
    price = f"${primary.usd_per_hour:g}/h ({primary.source or 'no source given'}" + (
        f", seen {primary.seen})" if primary.seen else ")") if primary else "unknown"
    doc.p(f"{info.display_name or tier}; measured on `{info.gpu_name or 'unknown'}`. Primary price {price}. "
          f"{STACK_NOTE}")
    if info.emulated:
        doc.note("Emulated tier: these numbers come from an emulated node, not from the named GPU.")
    if busy_elsewhere(info.cpu_busy_before, info.cpu_count):
        doc.note(f"**Busy node**: {info.cpu_busy_before:.1f} of its {info.cpu_count} cores were busy before this "
                 "tier's job started anything on it. Its servers and clients shared the CPU with that work, and these "
                 "figures include it.")
    for title, metric, fmt, best in (("p50 latency (ms)", P50, ms, "min"),
                                     ("Throughput (img/s)", THROUGHPUT, rate, "max")):
        figure_marks = tables.by_batch(ok, MARKS)
        for load, pivot in tables.by_batch(ok, metric).items():
            doc.h(2, f"{title} by batch size, {_load_title(load)}")
            ends = pivot_ends(ok, metric, lambda name, load=load: tables.by_batch(ok, name).get(load, pd.DataFrame()))
            _by_batch_table(doc, pivot, figure_marks[load], fmt, best, ends)
    speedups = tables.grpc_speedup(ok)
    if speedups:
        speedup_marks = tables.grpc_speedup(ok, MARKS)
        for load, pivot in speedups.items():
            doc.h(2, f"gRPC speedup over HTTP (p50 HTTP / p50 gRPC; > 1: gRPC faster), {_load_title(load)}")
            _by_batch_table(doc, pivot, speedup_marks[load], ratio, "max")
    else:
        doc.p("No backend was measured over both HTTP and gRPC on this tier: no gRPC/HTTP speedup.")
    scaling_marks = tables.concurrency_scaling(ok, MARKS)
    for batch, pivot in tables.concurrency_scaling(ok).items():
        if pivot.shape[1] < 2:
            continue
        doc.h(2, f"Concurrency scaling: throughput (img/s) at batch {batch}")
        names = {c: f"c={c}" for c in pivot.columns if c != "scaling"}
        pivot, pivot_marks = pivot.rename(columns=names), scaling_marks[batch].rename(columns=names)
        out = format_frame(pivot, {c: rate for c in pivot.columns} | {"scaling": ratio},
                           marks=pivot_marks).reset_index()
        marked_table(doc, out, numeric(out, 1), pivot_marks)
    open_loop_table(doc, ok)
    _tier_costs(doc, ok[~ok["overloaded"]], info)
    for title, metrics in (("Server-side breakdown (ms per request)", tables.SERVER_METRICS),
                           ("Highest load within the SLO", tables.SLO_SEARCH_METRICS),
                           ("Client cost per request", tables.CLIENT_METRICS)):
        found = tables.present(ok, metrics)
        if found and found != [P50]:
            doc.h(2, title)
            if metrics is tables.CLIENT_METRICS:
                doc.p("The client actors' CPU time over the requests they completed (µs), the busiest actor's CPU "
                      "(1 = a full core) and the p50 (ms) beside them: a client whose CPU per request comes "
                      "close to the latency, or an actor near a full core, measured itself as much as the server.")
            rows = ok.set_index(POINT).sort_index()
            frame = rows[found].reset_index().rename(columns={"batch_size": "b"})
            out = format_frame(frame, {m: (usd if "usd" in m else rate if "img_s" in m else count if "_us_" in m
                                           else ms) for m in found}, marks=load_marks(frame, rows[MARKS]))
            marked_table(doc, out, point_numeric(out), rows[MARKS], "trials")
    server_count_note(doc, ok)
    name = f"latency_vs_throughput_{tier}.png"
    images[name] = plots.latency_vs_throughput(ok, info.label, folder / name)
    doc.image(name, f"Latency vs throughput per backend, tier {info.label}; hollow: unstable, red ring: overloaded")


def _tier_costs(doc: Document, sustained: pd.DataFrame, info: TierInfo) -> None:
    doc.h(2, "Cost per 1k images at each listed price")
    if sustained.empty:
        doc.p("Every trial on this tier overloaded its server: no cost figure (see “Overloaded trials”).")
        return
    costs = tables.costs_at_prices(sustained, info.prices)
    names = {p.name: f"$/1k @{p.name} (${p.usd_per_hour:g}/h)" for p in info.prices}
    points = sustained.set_index(POINT).reindex(costs.index)
    row_marks = points[MARKS]
    shown = {**names, THROUGHPUT: "img/s", P99: "p99 ms", "images_per_usd": "img/$ @primary"}
    costs = costs.reset_index().rename(columns={**shown, "batch_size": "b"})
    out = format_frame(costs, {"img/s": rate, "p99 ms": ms, "img/$ @primary": count} | {v: usd for v in names.values()},
                       best={v: "min" for v in names.values()}, marks=load_marks(costs, row_marks),
                       intervals=priced_ends(points, info.prices, shown))
    marked_table(doc, out, point_numeric(out), row_marks, "trials")
    fleets = sustained[pd.Series(nodes(sustained), index=sustained.index) > 1]
    if not fleets.empty:
        served = ", ".join(f"`{stack}` ({n} nodes)" for stack, n in fleets.groupby("stack")[NODES].first().items())
        doc.p(f"Served by several nodes behind one URL: {served}. Each of their figures is priced at the node count "
              "× the column's price per hour.")


def _by_batch_table(doc: Document, pivot: pd.DataFrame, pivot_marks: pd.DataFrame, fmt: Callable[[object], str],
                    best: str, intervals: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> None:
    names = {c: f"b={c}" if c != "scaling" else "scaling" for c in pivot.columns}
    pivot, pivot_marks = pivot.rename(columns=names), pivot_marks.rename(columns=names)
    formats = {c: fmt for c in pivot.columns} | {"scaling": ratio}
    if intervals is not None:
        intervals = (intervals[0].rename(columns=names), intervals[1].rename(columns=names))
    out = format_frame(pivot, formats, best={c: best for c in pivot.columns if c != "scaling"},
                       marks=pivot_marks, intervals=intervals).reset_index()
    marked_table(doc, out, numeric(out, 1), pivot_marks)


def _load_title(load: str) -> str:
    """`c4` -> `concurrency 4`; `poisson-r80` -> `poisson arrivals at 80 req/s`."""
    if load.startswith("c") and load[1:].isdigit():
        return f"concurrency {load[1:]}"
    mode, _, rate_rps = load.partition("-r")
    return f"{mode} arrivals at {rate_rps} req/s"

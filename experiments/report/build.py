"""Assemble the report of one sweep: the answer first (cheapest option at the SLO), then prices, cross-tier
tables, per-tier tables in the study's shape, problems, and how the numbers were made. Overloaded trials are
listed apart and kept out of every cost figure; unstable figures are marked wherever they appear."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.config.capacity import DEFAULT_HEADROOM, Traffic
from experiments.report import marks, plots, tables
from experiments.report.answer import answer_lines
from experiments.report.capacity_section import capacity_section, refuse_unpriced
from experiments.report.data import SweepData, TierInfo
from experiments.report.deploy import deploy_section
from experiments.report.noise import interval_ends, pivot_ends, priced_ends
from experiments.report.render import Document, count, format_frame, ms, rate, ratio, usd, usd_per_hour
from experiments.report.served import (
    load_marks,
    marked_table,
    open_loop_table,
    overloaded_section,
    point_numeric,
    server_count_note,
)
from experiments.report.studies import studies_section
from experiments.report.tables import MARKS, P50, P99, POINT, THROUGHPUT
from experiments.report.trace_section import trace_section
from experiments.results.records import Status

STACK_NOTE = ("A stack is `backend variant/protocol/input format`; `b` is the batch size; a load is `cN` (N "
              "closed-loop request loops) or `poisson-rR` / `constant-rR` (open-loop arrivals at R req/s; `trace-rR`: "
              "a trace replayed with its peak at R req/s).")


@dataclass
class ReportOptions:
    slo_p99_ms: float | None = None
    baseline_tier: str | None = None
    capacity: Traffic | None = None  # size a capacity plan for this traffic (within slo_p99_ms, else the sweep's)
    source: str = ""  # where the runs were read (tracking URI and experiment), for the header


@dataclass
class Report:
    document: Document
    images: dict[str, Path] = field(default_factory=dict)  # file name -> path, in reading order
    summary: list[str] = field(default_factory=list)  # the answer in a few lines (console, MLflow note)


def _numeric(frame: pd.DataFrame, first_text: int) -> list[bool]:
    return [False] * first_text + [True] * (frame.shape[1] - first_text)


def _by_batch_table(doc: Document, pivot: pd.DataFrame, pivot_marks: pd.DataFrame, fmt: Callable[[object], str],
                    best: str, intervals: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> None:
    names = {c: f"b={c}" if c != "scaling" else "scaling" for c in pivot.columns}
    pivot, pivot_marks = pivot.rename(columns=names), pivot_marks.rename(columns=names)
    formats = {c: fmt for c in pivot.columns} | {"scaling": ratio}
    if intervals is not None:
        intervals = (intervals[0].rename(columns=names), intervals[1].rename(columns=names))
    out = format_frame(pivot, formats, best={c: best for c in pivot.columns if c != "scaling"},
                       marks=pivot_marks, intervals=intervals).reset_index()
    marked_table(doc, out, _numeric(out, 1), pivot_marks)


def _load_title(load: str) -> str:
    """`c4` -> `concurrency 4`; `poisson-r80` -> `poisson arrivals at 80 req/s`."""
    if load.startswith("c") and load[1:].isdigit():
        return f"concurrency {load[1:]}"
    mode, _, rate_rps = load.partition("-r")
    return f"{mode} arrivals at {rate_rps} req/s"


def build_report(data: SweepData, folder: Path, options: ReportOptions) -> Report:
    if options.capacity is not None:
        refuse_unpriced(data, options.slo_p99_ms)
    folder.mkdir(parents=True, exist_ok=True)
    ok = data.ok
    labels = {name: info.label for name, info in data.tiers.items()}
    prices = {name: info.prices for name, info in data.tiers.items()}
    doc = Document(f"tierbench report — sweep {data.sweep_id}")
    report = Report(doc)
    counts = data.trials["status"].value_counts()
    doc.p(f"{len(data.trials)} trials on {len(data.tiers)} tier(s) ({', '.join(labels.values())}): "
          f"{', '.join(f'{counts.get(s, 0)} {s}' for s in Status)}. "
          f"Read from {options.source or 'MLflow'}; generated {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}.")
    emulated = [labels[t] for t, info in data.tiers.items() if info.emulated]
    if emulated:
        doc.note(f"**Emulated results**: tier(s) {', '.join(emulated)} ran on an emulated cluster (Ray nodes on "
                 "one machine declaring the tier), not on that GPU. Their latency, throughput and cost figures "
                 "test the software only and say nothing about the named GPU; every table marks them "
                 "`(emulated)`.")
    if data.superseded:
        doc.note(f"{data.superseded} older run(s) of trials that were run again are left out (the latest `ok` "
                 "run of each trial counts).")
    retried = data.trials[data.trials["earlier_failure"] != ""]
    if not retried.empty:
        doc.note(f"{len(retried)} trial(s) were measured again on a fresh server after their server failed under them "
                 "(`experiment.trial_retries`; the failed attempts stay in MLflow, tagged `retried`): "
                 + "; ".join(f"{r.tier} · {r.stack} · b{r.batch_size} · {r.load} (first: {r.earlier_failure[:120]})"
                             for r in retried.itertuples()) + ".")
    repeated = _repeats_note(ok)
    if repeated:
        doc.note(repeated)
    _answer(doc, report, data, labels, options)
    report.summary += deploy_section(doc, data, labels)
    overloaded_section(doc, data, labels)
    _prices(doc, data)
    if options.capacity is not None:
        report.summary += capacity_section(doc, report.images, folder, data, labels, options.capacity,
                                           options.slo_p99_ms)
    report.summary += trace_section(doc, data, labels, options.capacity.headroom if options.capacity is not None
                                    else DEFAULT_HEADROOM, options.slo_p99_ms)
    _benchmark_cost(doc, report, data)
    if not data.sustained.empty:
        _across_tiers(doc, report, folder, data.sustained, labels, prices, options)
    studies_section(doc, data.trials, labels)
    for tier in sorted(data.tiers):
        if (ok["tier"] == tier).any():
            _tier_section(doc, report, folder, data, ok[ok["tier"] == tier], tier, labels)
        else:
            doc.h(1, f"Tier {labels[tier]}")
            doc.p("No trial succeeded on this tier: see “Failed and skipped trials” below.")
    _slo_search(doc, data, labels)
    _problems(doc, data)
    _method(doc, data)
    return report


def _repeats_note(ok: pd.DataFrame) -> str | None:
    """How often the trials were measured, and how their intervals read; None when each was measured once."""
    counts = ok["repeats"].dropna() if "repeats" in ok.columns else pd.Series(dtype=float)
    if counts.empty:
        return None
    times = f"{counts.min():g}" if counts.min() == counts.max() else f"{counts.min():g} to {counts.max():g}"
    return (f"{len(counts)} trial(s) were measured {times} times each (`experiment.repeats`): their figures pool the "
            "repeats, and each is followed by its 95 % interval, e.g. `12.5 (12.1–12.9)`: latency percentiles by a "
            "two-level bootstrap over the repeats' raw samples, throughput by a t-interval over the repeats (on the "
            "log scale), cost from the throughput's interval. Repeats on one node do not capture node-to-node "
            "variation (docs/confidence-intervals.md).")


def _slo_search(doc: Document, data: SweepData, labels: dict[str, str]) -> None:
    """The sweep's own SLO search (`experiment.slo.p99_ms`): the highest load within the target per point."""
    if data.slo.empty:
        return
    doc.h(1, "SLO search")
    doc.p("For each operating point, the highest load (concurrency, or request rate in open loop) whose p99 "
          "stayed within the target, found by doubling then bisection over real trials (tag "
          "`phase=slo_search`). “at limit” means the search stopped at its load limit still within the target.")
    rows, slo_marks = [], []
    for _, row in data.slo.sort_values(["tier", "variant", "protocol", "input_format", "batch_size"]).iterrows():
        met = row["slo_met"] == 1
        slo_marks.append(marks.UNSTABLE if met and row.get("slo_stable_at_max") == 0 else "")
        rows.append({
            "tier": labels.get(row["tier"], row["tier"]),
            "stack": f"{row['variant']}/{row['protocol']}/{row['input_format']}", "batch": row["batch_size"],
            "p99 target ms": ms(row["slo_p99_ms"]),
            "max load": (f"{row['slo_max_load']:g}" + (" (at limit)" if row["slo_limited"] == 1 else ""))
            if met else "none meets it",
            "img/s at max": rate(row["slo_max_throughput_img_s"]) if met else "—",
            "p99 ms at max": ms(row["slo_p99_at_max_ms"]) if met else "—",
            "$ per 1k images": usd(row["cost_per_1k_images_at_slo_usd"]) if met else "—",
            "probes": count(row["slo_probes"]),
        })
    frame = pd.DataFrame(rows)
    figure_marks = pd.DataFrame({c: slo_marks for c in ("max load", "img/s at max", "p99 ms at max",
                                                         "$ per 1k images")}, index=frame.index)
    marked_table(doc, format_frame(frame, {}, marks=figure_marks), _numeric(frame, 3), figure_marks["max load"],
                  "operating points")


def _answer(doc: Document, report: Report, data: SweepData, labels: dict[str, str], options: ReportOptions) -> None:
    doc.h(1, "Answer")
    if data.ok.empty:
        doc.p("No trial succeeded, so there is nothing to compare: see “Failed and skipped trials” below.")
        report.summary.append("no successful trial")
        return
    prices = {name: info.prices for name, info in data.tiers.items()}
    lines = answer_lines(data, labels, prices, options.slo_p99_ms, lambda row: _price_label(data, row))
    doc.bullets(lines)
    report.summary += [line.replace("**", "").replace("*", "") for line in lines]


def _price_label(data: SweepData, row: pd.Series) -> str:
    for price in data.tiers[row["tier"]].prices:
        if price.name == row["price"]:
            return price.label()
    return str(row["price"])


def _prices(doc: Document, data: SweepData) -> None:
    doc.h(1, "Prices")
    doc.p("Cost figures use each tier's **primary** price unless a column names another one. "
          "A figure is only as good as its price: check the source and date, and override with "
          "`gpu.price_per_hour_usd=...` or add `gpu.prices.<name>` in the tier's YAML.")
    rows = [{"tier": info.label, "price": p.name, "$/h": p.usd_per_hour, "kind": p.kind or "—",
             "provider": p.provider or "—", "source": p.source or "—", "seen": p.seen or "—"}
            for info in data.tiers.values() for p in info.prices]
    frame = format_frame(pd.DataFrame(rows), {"$/h": usd_per_hour})
    doc.table(frame, [False, False, True, False, False, False, False])


def _benchmark_cost(doc: Document, report: Report, data: SweepData) -> None:
    """What the sweep itself cost: each tier's node up time while the sweep held it, at the tier's price."""
    held = [info for info in data.tiers.values() if info.sweep_cost_usd is not None]
    if not held:
        return
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
    report.summary.append(f"this benchmark kept {len(held)} tier node(s) up for {minutes:.1f} min: {usd(total)}")


def _across_tiers(doc: Document, report: Report, folder: Path, sustained: pd.DataFrame, labels: dict[str, str],
                  prices: dict, options: ReportOptions) -> None:
    """Cost tables, the Pareto frontier and its plots: from the trials whose server kept up (`sustained`)."""
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
    if options.slo_p99_ms is not None:
        chosen = tables.slo_pick(tables.priced_points(sustained, prices), options.slo_p99_ms)
        if chosen is not None:
            pick = chosen.rename({"cost_per_1k_usd": "cost_per_1k_images_usd"})
    report.images["pareto.png"] = plots.pareto(sustained, frontier, labels, folder / "pareto.png",
                                               options.slo_p99_ms, pick)
    doc.image("pareto.png", "p99 latency vs $ per 1k images (primary prices), Pareto frontier in black; hollow "
                            "markers: unstable trials")
    report.images["cost_per_1k.png"] = plots.cost_bars(sustained, prices, labels, folder / "cost_per_1k.png")
    doc.image("cost_per_1k.png", "Lowest $ per 1k images per backend stack and tier; ticks: other listed prices; "
                                 "hatched: unstable")
    if options.slo_p99_ms is not None:
        _slo_table(doc, tables.priced_points(sustained, prices), labels, options.slo_p99_ms)
    if len(tiers) > 1:
        _cross_tier_ratios(doc, sustained, tiers, labels, options)


def _cross_tier_ratios(doc: Document, sustained: pd.DataFrame, tiers: list[str], labels: dict[str, str],
                       options: ReportOptions) -> None:
    base = options.baseline_tier if options.baseline_tier in tiers else tiers[0]
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
    out = cands[["tier", "stack", "batch_size", "load", P99, THROUGHPUT, "price", "usd_per_hour",
                 "cost_per_1k_usd"]].assign(tier=cands["tier"].map(labels), load=cands["load"].astype(str))
    shown = {P99: "p99 ms", THROUGHPUT: "img/s", "cost_per_1k_usd": "$/1k img"}
    out = format_frame(out.rename(columns={"batch_size": "b", "usd_per_hour": "$/h", **shown}),
                       {"p99 ms": ms, "img/s": rate, "$/h": usd_per_hour, "$/1k img": usd},
                       marks=load_marks(out, cands[MARKS]), intervals=interval_ends(cands, shown))
    marked_table(doc, out, [False, False, True, False, True, True, False, True, True], cands[MARKS], "rows")


def _tier_section(doc: Document, report: Report, folder: Path, data: SweepData, ok: pd.DataFrame, tier: str,
                  labels: dict[str, str]) -> None:
    info = data.tiers[tier]
    doc.h(1, f"Tier {info.label}")
    primary = info.prices[0] if info.prices else None
    price = f"${primary.usd_per_hour:g}/h ({primary.source or 'no source given'}" + (
        f", seen {primary.seen})" if primary.seen else ")") if primary else "unknown"
    doc.p(f"{info.display_name or tier}; measured on `{info.gpu_name or 'unknown'}`. Primary price {price}. "
          f"{STACK_NOTE}")
    if info.emulated:
        doc.note("Emulated tier: these numbers come from an emulated node, not from the named GPU.")
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
        marked_table(doc, out, _numeric(out, 1), pivot_marks)
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
    report.images[name] = plots.latency_vs_throughput(ok, info.label, folder / name)
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


def _problems(doc: Document, data: SweepData) -> None:
    doc.h(1, "Failed and skipped trials")
    bad = tables.problems(data.trials)
    if bad.empty:
        doc.p("None: every trial ran and measured.")
        return
    doc.p("Skipped: the tier cannot run it (never faked). Failed: it was attempted; the reason says why.")
    bad = bad.assign(tier=bad["tier"].map(lambda t: data.tiers[t].label if t in data.tiers else t))
    doc.table(bad.astype(str), [False, False, False, True, False])


def crosscheck_lines(ok: pd.DataFrame) -> list[str]:
    """What the cross-check found; a model that is not a classifier (no top-1 figure) is said to be compared by max
    abs diff only."""
    missing = pd.Series(float("nan"), index=ok.index)
    diff, top1 = (ok.get(f"crosscheck_{name}", missing) for name in ("max_abs_diff", "top1_agreement"))
    classified, diff_only = diff.notna() & top1.notna(), diff.notna() & top1.isna()
    if not (classified | diff_only).any():
        return []
    lines = []
    if classified.any():
        lines.append("Cross-check: before a server group was measured, the same images went through each of its paths "
                     "and the logits were compared with the in-process reference; over the measured trials the "
                     f"lowest top-1 agreement was {top1[classified].min():.3f} and the largest logit difference "
                     f"{diff[classified].max():.3g}.")
    if diff_only.any():
        models = ", ".join(sorted(ok.loc[diff_only, "model"].astype(str).unique())) if "model" in ok else "the model"
        lines.append(f"Cross-check of {models}: its output is not a classifier's [batch, classes] logits "
                     "(model.output_shape), so it was compared with the in-process reference by max abs diff only, "
                     f"no top-1 agreement: the largest difference was {diff[diff_only].max():.3g}.")
    return lines


def _method(doc: Document, data: SweepData) -> None:
    doc.h(1, "How these numbers were made")
    t = data.trials.iloc[0]
    settings = ", ".join(f"{k} = {t[k]}" for k in ("model", "window_s", "warmup_requests", "client_actors")
                         if k in t and pd.notna(t[k]))
    engines = data.ok["load_engine"].fillna("python").value_counts() if "load_engine" in data.ok else pd.Series()
    engine_line = ("Load engine: " + ", ".join(f"{name} ({n} trials)" for name, n in engines.items()) + ". The "
                   "compiled engine (C: HTTP/1.1 written for it, gRPC over libnghttp2) sends each request's bytes as "
                   "the client's own code built them; the Python client is the project's asyncio client. "
                   + (f"Figures measured by the less used engine are marked {marks.OTHER_ENGINE}: set beside the "
                      "others, the difference may be the client's." if len(engines) > 1 else ""))
    crosscheck = crosscheck_lines(data.ok)
    doc.bullets([
        "Latency: client-side, from sending a request to its response, one sample per request; warm-up requests "
        "are dropped; percentiles come from the raw samples of every client actor merged (never averaged).",
        "Throughput: images whose requests *completed* inside the common measurement windows / their length "
        "(as perf_analyzer and LoadGen count), closed and open loop alike; an open loop also logs its offered "
        "rate (arrivals scheduled) and achieved rate (requests sent). Triton's own count of inferred images over "
        "the same windows checks it (`server_count_ratio`).",
        f"Overloaded ({marks.OVERLOADED}): an open loop whose backlog (arrivals − completions) grew across the "
        "windows: listed apart, never in a cost figure or the answer. Unstable "
        f"({marks.UNSTABLE}): a trial whose windows never agreed within the stability rule: marked wherever it "
        "appears; the answer takes a stable trial wherever one qualifies.",
        engine_line.strip(),
        "Cost: price per hour / 3600 / throughput × 1000 per 1k images; images per $ is its inverse. It assumes "
        "the tier is kept as busy as in the trial.",
        "Each trial is an MLflow run named `tier/variant/protocol/format/bB/cC` (open loop: `.../bB/poisson-rR`) "
        "with its raw latencies "
        f"(`latencies.csv`) attached; this sweep's runs carry the tag `sweep_id = {data.sweep_id}`."
        + (f" Measurement settings: {settings}." if settings else ""),
        *crosscheck,
    ])

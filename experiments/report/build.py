"""Assemble the report of one sweep: the answer first (cheapest option at the SLO), then prices, cross-tier
tables, per-tier tables in the study's shape, problems, and how the numbers were made."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.report import plots, tables
from experiments.report.data import SweepData
from experiments.report.render import Document, count, format_frame, ms, rate, ratio, usd, usd_per_hour
from experiments.report.tables import P50, P99, THROUGHPUT
from experiments.results.records import Status

STACK_NOTE = "A stack is `backend variant/protocol/input format`; `b` is the batch size, `c` the concurrency."


@dataclass
class ReportOptions:
    slo_p99_ms: float | None = None
    baseline_tier: str | None = None
    source: str = ""  # where the runs were read (tracking URI and experiment), for the header


@dataclass
class Report:
    document: Document
    images: dict[str, Path] = field(default_factory=dict)  # file name -> path, in reading order
    summary: list[str] = field(default_factory=list)  # the answer in a few lines (console, MLflow note)


def _point(row: pd.Series, labels: dict[str, str]) -> str:
    return f"**{labels.get(row['tier'], row['tier'])} · {row['stack']} · b{row['batch_size']} · c{row['concurrency']}**"


def _numeric(frame: pd.DataFrame, first_text: int) -> list[bool]:
    return [False] * first_text + [True] * (frame.shape[1] - first_text)


def _by_batch_table(pivot: pd.DataFrame, fmt: Callable[[object], str], best: str) -> tuple[pd.DataFrame, list[bool]]:
    pivot = pivot.copy()
    pivot.columns = [f"b={c}" if c != "scaling" else "scaling" for c in pivot.columns]
    formats = {c: fmt for c in pivot.columns} | {"scaling": ratio}
    out = format_frame(pivot, formats, best={c: best for c in pivot.columns if c != "scaling"})
    out = out.reset_index()
    return out, _numeric(out, 1)


def build_report(data: SweepData, folder: Path, options: ReportOptions) -> Report:
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
    _answer(doc, report, data, ok, labels, prices, options)
    _prices(doc, data)
    if not ok.empty:
        _across_tiers(doc, report, folder, ok, labels, prices, options)
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


def _slo_search(doc: Document, data: SweepData, labels: dict[str, str]) -> None:
    """The sweep's own SLO search (`experiment.slo.p99_ms`): the highest load within the target per point."""
    if data.slo.empty:
        return
    doc.h(1, "SLO search")
    doc.p("For each operating point, the highest load (concurrency, or request rate in open loop) whose p99 "
          "stayed within the target, found by doubling then bisection over real trials (tag "
          "`phase=slo_search`). “at limit” means the search stopped at its load limit still within the target.")
    rows = []
    for _, row in data.slo.sort_values(["tier", "variant", "protocol", "input_format", "batch_size"]).iterrows():
        met = row["slo_met"] == 1
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
    doc.table(frame, _numeric(frame, 3))


def _answer(doc: Document, report: Report, data: SweepData, ok: pd.DataFrame, labels: dict[str, str],
            prices: dict, options: ReportOptions) -> None:
    doc.h(1, "Answer")
    if ok.empty:
        doc.p("No trial succeeded, so there is nothing to compare: see “Failed and skipped trials” below.")
        report.summary.append("no successful trial")
        return
    priced = tables.priced_points(ok, prices)
    lines = []
    if options.slo_p99_ms is not None:
        slo = options.slo_p99_ms
        pick = tables.slo_pick(priced, slo)
        if pick is None:
            fastest = ok.loc[ok[P99].idxmin()]
            lines.append(f"Nothing measured meets p99 ≤ {slo:g} ms: the lowest p99 is {ms(fastest[P99])} ms at "
                         f"{_point(fastest, labels)}.")
        else:
            lines.append(f"Cheapest operating point with p99 ≤ {slo:g} ms, at each tier's primary price: "
                         f"{_point(pick, labels)}: **{usd(pick['cost_per_1k_usd'])} per 1k images** "
                         f"(p99 {ms(pick[P99])} ms, p50 {ms(pick[P50])} ms, {rate(pick[THROUGHPUT])} img/s, "
                         f"price {_price_label(data, pick)}).")
            any_price = tables.slo_pick(priced, slo, price=None)
            if any_price is not None and any_price["price"] != "primary":
                lines.append(f"At any listed price: {_point(any_price, labels)} at price "
                             f"{_price_label(data, any_price)}: **{usd(any_price['cost_per_1k_usd'])} per 1k "
                             f"images**.")
    else:
        cheapest = priced[priced["price"] == "primary"].iloc[0]
        fastest = ok.loc[ok[P99].idxmin()]
        lines.append(f"Cheapest operating point at each tier's primary price: {_point(cheapest, labels)}: "
                     f"**{usd(cheapest['cost_per_1k_usd'])} per 1k images** at p99 {ms(cheapest[P99])} ms.")
        lines.append(f"Lowest p99: {_point(fastest, labels)}: {ms(fastest[P99])} ms at "
                     f"{usd(fastest['cost_per_1k_images_usd'])} per 1k images.")
        lines.append("Give a latency target with `--slo-p99-ms` for a pick; meanwhile the Pareto frontier below "
                     "answers any target: take the frontier point with the largest p99 within it.")
    doc.bullets(lines)
    report.summary += [line.replace("**", "") for line in lines]


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


def _across_tiers(doc: Document, report: Report, folder: Path, ok: pd.DataFrame, labels: dict[str, str],
                  prices: dict, options: ReportOptions) -> None:
    doc.h(1, "Cost per image across tiers")
    doc.p(f"$ per 1k images = price per hour / 3600 / throughput × 1000: the cost of keeping the tier busy at "
          f"that operating point, at each tier's primary price. {STACK_NOTE}")
    tiers = sorted(ok["tier"].unique())
    if len(tiers) == 1:
        doc.p(f"One tier in this sweep: its cost per operating point at each of its prices is in the section "
              f"“Tier {labels[tiers[0]]}” below.")
    for metric, fmt, best, title in (("cost_per_1k_images_usd", usd, "min", "$ per 1k images (primary price)"),
                                     ("images_per_usd", count, "max", "Images per $ (primary price)")):
        if len(tiers) == 1:
            break
        pivot = tables.cost_by_tier(ok, metric)
        if pivot.empty:
            continue
        pivot.columns = [labels.get(c, c) for c in pivot.columns]
        doc.h(2, title)
        out = format_frame(pivot, {c: fmt for c in pivot.columns},
                           best={c: best for c in pivot.columns}).reset_index()
        out.columns = ["stack", "b", "c", *out.columns[3:]]
        doc.table(out, _numeric(out, 1))
    frontier = tables.pareto_frontier(ok)
    doc.h(2, "Pareto frontier: p99 latency vs $ per 1k images")
    doc.p("No other operating point is both faster (p99) and cheaper. For a p99 target, the cheapest choice is the "
          "last row whose p99 is within it.")
    f = frontier[["tier", "stack", "batch_size", "concurrency", P99, P50, THROUGHPUT, "cost_per_1k_images_usd"]]
    f = f.assign(tier=f["tier"].map(labels))
    out = format_frame(f.rename(columns={"batch_size": "b", "concurrency": "c", P99: "p99 ms", P50: "p50 ms",
                                         THROUGHPUT: "img/s", "cost_per_1k_images_usd": "$/1k img"}),
                       {"p99 ms": ms, "p50 ms": ms, "img/s": rate, "$/1k img": usd})
    doc.table(out, _numeric(out, 2))
    pick = None
    if options.slo_p99_ms is not None:
        chosen = tables.slo_pick(tables.priced_points(ok, prices), options.slo_p99_ms)
        if chosen is not None:
            pick = chosen.rename({"cost_per_1k_usd": "cost_per_1k_images_usd"})
    report.images["pareto.png"] = plots.pareto(ok, frontier, labels, folder / "pareto.png", options.slo_p99_ms, pick)
    doc.image("pareto.png", "p99 latency vs $ per 1k images (primary prices), Pareto frontier in black")
    report.images["cost_per_1k.png"] = plots.cost_bars(ok, prices, labels, folder / "cost_per_1k.png")
    doc.image("cost_per_1k.png", "Lowest $ per 1k images per backend stack and tier; ticks: other listed prices")
    if options.slo_p99_ms is not None:
        _slo_table(doc, tables.priced_points(ok, prices), labels, options.slo_p99_ms)
    if len(tiers) > 1:
        base = options.baseline_tier if options.baseline_tier in tiers else tiers[0]
        doc.h(2, f"Cross-tier ratios (each tier over {labels[base]})")
        doc.p("Ratio = other tier / baseline at the same operating point: p50 > 1 means slower, throughput > 1 "
              "means more img/s, cost > 1 means dearer per image (primary prices).")
        for other in (t for t in tiers if t != base):
            ratios = tables.cross_tier(ok, base, other)
            if ratios.empty:
                doc.p(f"{labels[other]} and {labels[base]} share no operating point.")
                continue
            doc.h(3, f"{labels[other]} / {labels[base]}")
            cols = {c: (ratio if c.endswith("_ratio") else usd if c.startswith("cost") else
                        ms if c.startswith("p50") else rate) for c in ratios.columns}
            out = format_frame(ratios, cols).reset_index()
            out.columns = ["stack", "b", "c", *[c.replace("_", " ") for c in out.columns[3:]]]
            doc.table(out, _numeric(out, 1))


def _slo_table(doc: Document, priced: pd.DataFrame, labels: dict[str, str], slo: float) -> None:
    doc.h(2, f"Operating points meeting p99 ≤ {slo:g} ms, cheapest first")
    cands = tables.slo_candidates(priced, slo).head(15)
    if cands.empty:
        doc.p("None.")
        return
    out = cands[["tier", "stack", "batch_size", "concurrency", P99, THROUGHPUT, "price", "usd_per_hour",
                 "cost_per_1k_usd"]].assign(tier=cands["tier"].map(labels))
    out = format_frame(out.rename(columns={"batch_size": "b", "concurrency": "c", P99: "p99 ms",
                                           THROUGHPUT: "img/s", "usd_per_hour": "$/h",
                                           "cost_per_1k_usd": "$/1k img"}),
                       {"p99 ms": ms, "img/s": rate, "$/h": usd_per_hour, "$/1k img": usd})
    doc.table(out, [False, False, True, True, True, True, False, True, True])


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
        for conc, pivot in tables.by_batch(ok, metric).items():
            doc.h(2, f"{title} by batch size, concurrency {conc}")
            doc.table(*_by_batch_table(pivot, fmt, best))
    speedups = tables.grpc_speedup(ok)
    if speedups:
        for conc, pivot in speedups.items():
            doc.h(2, f"gRPC speedup over HTTP (p50 HTTP / p50 gRPC; > 1: gRPC faster), concurrency {conc}")
            doc.table(*_by_batch_table(pivot, ratio, "max"))
    else:
        doc.p("No backend was measured over both HTTP and gRPC on this tier: no gRPC/HTTP speedup.")
    for batch, pivot in tables.concurrency_scaling(ok).items():
        if pivot.shape[1] < 2:
            continue
        doc.h(2, f"Concurrency scaling: throughput (img/s) at batch {batch}")
        pivot = pivot.rename(columns={c: f"c={c}" for c in pivot.columns if c != "scaling"})
        out = format_frame(pivot, {c: rate for c in pivot.columns} | {"scaling": ratio}).reset_index()
        doc.table(out, _numeric(out, 1))
    doc.h(2, "Cost per 1k images at each listed price")
    costs = tables.costs_at_prices(ok, info.prices)
    names = {p.name: f"$/1k @{p.name} (${p.usd_per_hour:g}/h)" for p in info.prices}
    costs = costs.rename(columns={**names, THROUGHPUT: "img/s", P99: "p99 ms", "images_per_usd": "img/$ @primary"})
    out = format_frame(costs, {"img/s": rate, "p99 ms": ms, "img/$ @primary": count} | {v: usd for v in names.values()},
                       best={v: "min" for v in names.values()}).reset_index()
    out.columns = ["stack", "b", "c", *out.columns[3:]]
    doc.table(out, _numeric(out, 1))
    for title, metrics in (("Server-side breakdown (ms per request)", tables.SERVER_METRICS),
                           ("Highest load within the SLO", tables.SLO_SEARCH_METRICS)):
        found = tables.present(ok, metrics)
        if found:
            doc.h(2, title)
            frame = ok.set_index(tables.POINT)[found].sort_index()
            out = format_frame(frame, {m: (usd if "usd" in m else rate if "img_s" in m else ms) for m in found})
            doc.table(out.reset_index(), _numeric(out.reset_index(), 1))
    name = f"latency_vs_throughput_{tier}.png"
    report.images[name] = plots.latency_vs_throughput(ok, info.label, folder / name)
    doc.image(name, f"Latency vs throughput per backend, tier {info.label}")


def _problems(doc: Document, data: SweepData) -> None:
    doc.h(1, "Failed and skipped trials")
    bad = tables.problems(data.trials)
    if bad.empty:
        doc.p("None: every trial ran and measured.")
        return
    doc.p("Skipped: the tier cannot run it (never faked). Failed: it was attempted; the reason says why.")
    bad = bad.assign(tier=bad["tier"].map(lambda t: data.tiers[t].label if t in data.tiers else t))
    doc.table(bad.astype(str), [False, False, False, True, False])


def _method(doc: Document, data: SweepData) -> None:
    doc.h(1, "How these numbers were made")
    t = data.trials.iloc[0]
    settings = ", ".join(f"{k} = {t[k]}" for k in ("model", "window_s", "warmup_requests", "client_actors")
                         if k in t and pd.notna(t[k]))
    checked = data.ok.get("crosscheck_top1_agreement", pd.Series(dtype=float)).notna()
    crosscheck = [] if not checked.any() else [
        "Cross-check: before a server group was measured, the same images went through each of its paths and the "
        "logits were compared with the PyTorch reference; over the measured trials the lowest top-1 agreement was "
        f"{data.ok.loc[checked, 'crosscheck_top1_agreement'].min():.3f} and the largest logit difference "
        f"{data.ok.loc[checked, 'crosscheck_max_abs_diff'].max():.3g}."]
    doc.bullets([
        "Latency: client-side, from sending a request to its response, one sample per request; warm-up requests "
        "are dropped; percentiles come from the raw samples of every client actor merged (never averaged).",
        "Throughput: images completed inside the common measurement window / the window's length.",
        "Cost: price per hour / 3600 / throughput × 1000 per 1k images; images per $ is its inverse. It assumes "
        "the tier is kept as busy as in the trial.",
        "Each trial is an MLflow run named `tier/variant/protocol/format/bB/cC` with its raw latencies "
        f"(`latencies.csv`) attached; this sweep's runs carry the tag `sweep_id = {data.sweep_id}`."
        + (f" Measurement settings: {settings}." if settings else ""),
        *crosscheck,
    ])

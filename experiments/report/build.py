"""Assemble the report of one sweep: the answer first (cheapest option at the SLO), then prices, cross-tier
tables, per-tier tables in the study's shape, problems, and how the numbers were made. Overloaded trials are
listed apart and kept out of every cost figure; unstable figures are marked wherever they appear. Each section is
written by its own module (`*_section`, `deploy`, `studies`, `served`); here they are put in order. This is the image
report's order; a generative sweep's is `experiments.report.generative.build`, which shares `header`, `price_label` and
`problems_section` from here."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.config.capacity import DEFAULT_HEADROOM, Traffic
from experiments.config.prices import PRICE_MAX_AGE_DAYS
from experiments.report import tables
from experiments.report.accuracy_section import accuracy_section
from experiments.report.answer import answer_lines
from experiments.report.audit_section import audit_section
from experiments.report.capacity_section import capacity_section, refuse_unpriced
from experiments.report.ceiling_section import ceiling_section, tier_floors
from experiments.report.cross_tier_section import cross_tier_section
from experiments.report.data import SweepData, nodes
from experiments.report.deploy import deploy_section
from experiments.report.method_section import method_section
from experiments.report.owned_section import rent_or_own_section
from experiments.report.prices_section import benchmark_cost_section, prices_section, stale_prices_note
from experiments.report.render import Document
from experiments.report.served import overloaded_section
from experiments.report.slices_section import slices_section
from experiments.report.slo_search_section import slo_search_section
from experiments.report.studies import studies_section
from experiments.report.tier_section import tier_section
from experiments.report.trace_section import trace_section
from experiments.report.traffic_section import traffic_section
from experiments.results.records import Status


@dataclass
class ReportOptions:
    slo_p99_ms: float | None = None
    baseline_tier: str | None = None
    capacity: Traffic | None = None  # size a capacity plan for this traffic (within slo_p99_ms, else the sweep's)
    source: str = ""  # where the runs were read (tracking URI and experiment), for the header
    price_max_age_days: int = PRICE_MAX_AGE_DAYS  # a price seen longer than this before the trials is called stale
    # A generative sweep's targets (`--ttft-p99-ms`, `--tpot-p99-ms`, else experiment.slo.*): its answer's pick and the
    # token capacity plan keep within them (experiments.report.generative)
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    # A generative sweep's capacity plan (`--peak-rps`, `--headroom`): nodes for this peak of requests/s, each request
    # as long as the chosen point's measured answers, + headroom (None: DEFAULT_HEADROOM). An image plan's: `capacity`.
    peak_rps: float | None = None
    headroom: float | None = None


@dataclass
class Report:
    document: Document
    images: dict[str, Path] = field(default_factory=dict)  # file name -> path, in reading order
    summary: list[str] = field(default_factory=list)  # the answer in a few lines (console, MLflow note)


def build_report(data: SweepData, folder: Path, options: ReportOptions) -> Report:
    if options.capacity is not None:
        refuse_unpriced(data, options.slo_p99_ms)
    folder.mkdir(parents=True, exist_ok=True)
    ok = data.ok
    labels = {name: info.label for name, info in data.tiers.items()}
    prices = {name: info.prices for name, info in data.tiers.items()}
    doc = Document(f"tierbench report — sweep {data.sweep_id}")
    report = Report(doc)
    stale = header(doc, data, labels, options)
    repeated = _repeats_note(ok)
    if repeated:
        doc.note(repeated)
    _answer(doc, report, data, labels, options)
    if stale:
        report.summary.append(f"some prices are older than {options.price_max_age_days} days: see the report's note")
    report.summary += deploy_section(doc, data, labels)
    floors = tier_floors(ok, prices)  # each tier at its best in-process throughput: the section and the Pareto plot
    report.summary += ceiling_section(doc, data, labels, floors)
    overloaded_section(doc, data, labels)
    prices_section(doc, data)
    report.summary += rent_or_own_section(doc, data, labels)
    report.summary += slices_section(doc, data, labels, options.slo_p99_ms)
    report.summary += audit_section(doc, data, labels)
    report.summary += accuracy_section(doc, data, labels)
    if options.capacity is not None:
        report.summary += capacity_section(doc, report.images, folder, data, labels, options.capacity,
                                           options.slo_p99_ms)
    report.summary += trace_section(doc, data, labels, options.capacity.headroom if options.capacity is not None
                                    else DEFAULT_HEADROOM, options.slo_p99_ms)
    report.summary += traffic_section(doc, report.images, folder, data, labels)
    report.summary += benchmark_cost_section(doc, data)
    if not data.sustained.empty:
        cross_tier_section(doc, report.images, folder, data.sustained, labels, prices, options.slo_p99_ms,
                           options.baseline_tier, floors)
    studies_section(doc, data.trials, labels)
    for tier in sorted(data.tiers):
        if (ok["tier"] == tier).any():
            tier_section(doc, report.images, folder, data, ok[ok["tier"] == tier], tier)
        else:
            doc.h(1, f"Tier {labels[tier]}")
            doc.p("No trial succeeded on this tier: see “Failed and skipped trials” below.")
    slo_search_section(doc, data, labels)
    problems_section(doc, data)
    method_section(doc, data)
    return report


def header(doc: Document, data: SweepData, labels: dict[str, str], options: ReportOptions) -> str | None:
    """What opens every report, whatever its workload: the trials by status, where they were read, and the notes on
    emulated tiers, stale prices, superseded runs and retried trials; returns the stale prices' note (None: none)."""
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
    stale = stale_prices_note(data, options.price_max_age_days) if not data.ok.empty else None  # none priced else
    if stale:
        doc.note(stale)
    if data.superseded:
        doc.note(f"{data.superseded} older run(s) of trials that were run again are left out (the latest `ok` "
                 "run of each trial counts).")
    retried = data.trials[data.trials["earlier_failure"] != ""]
    if not retried.empty:
        doc.note(f"{len(retried)} trial(s) were measured again on a fresh server after their server failed under them "
                 "(`experiment.trial_retries`; the failed attempts stay in MLflow, tagged `retried`): "
                 + "; ".join(f"{r.tier} · {r.stack} · b{r.batch_size} · {r.load} (first: {r.earlier_failure[:120]})"
                             for r in retried.itertuples()) + ".")
    return stale


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


def _answer(doc: Document, report: Report, data: SweepData, labels: dict[str, str], options: ReportOptions) -> None:
    doc.h(1, "Answer")
    if data.ok.empty:
        doc.p("No trial succeeded, so there is nothing to compare: see “Failed and skipped trials” below.")
        report.summary.append("no successful trial")
        return
    prices = {name: info.prices for name, info in data.tiers.items()}
    lines = answer_lines(data, labels, prices, options.slo_p99_ms, lambda row: price_label(data, row))
    doc.bullets(lines)
    report.summary += [line.replace("**", "").replace("*", "") for line in lines]


def price_label(data: SweepData, row: pd.Series) -> str:
    """The price a priced point is at, as the report names it: `4 nodes × primary $0.36/h` for an endpoint's
    replicas behind its URL."""
    count = int(nodes(row))
    fleet = f"{count} nodes × " if count > 1 else ""
    for price in data.tiers[row["tier"]].prices:
        if price.name == row["price"]:
            return fleet + price.label()
    return fleet + str(row["price"])


def problems_section(doc: Document, data: SweepData) -> None:
    doc.h(1, "Failed and skipped trials")
    bad = tables.problems(data.trials)
    if bad.empty:
        doc.p("None: every trial ran and measured.")
        return
    doc.p("Skipped: the tier cannot run it (never faked). Failed: it was attempted; the reason says why.")
    bad = bad.assign(tier=bad["tier"].map(lambda t: data.tiers[t].label if t in data.tiers else t))
    doc.table(bad.astype(str), [False, False, False, True, False])

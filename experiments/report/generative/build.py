"""Assemble a generative sweep's report: the answer first (what a settings search says to deploy, then the cheapest
point per 1M output tokens, within the TTFT and TPOT targets when given), then overloaded trials, prices, the capacity
plan in tokens (when asked), errors and traffic over time, what the benchmark cost, cost across tiers with the two
Pareto frontiers, how close each launched server came to its engine in-process (where the sweep timed one), each tier's
token table, failed and skipped trials, and how the numbers were made. The sections every
report shares are the image report's; the ones that speak of tokens are this package's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.config.capacity import DEFAULT_HEADROOM
from experiments.report.build import Report, ReportOptions, header, price_label, problems_section
from experiments.report.data import SweepData
from experiments.report.generative.answer import answer_lines
from experiments.report.generative.capacity_section import capacity_section
from experiments.report.generative.ceiling_section import ceiling_section
from experiments.report.generative.cost_section import cost_section
from experiments.report.generative.deploy import deploy_lines
from experiments.report.generative.method_section import method_section
from experiments.report.generative.points import OUTPUT_RATE, Targets, priced_points
from experiments.report.generative.tier_section import tier_section
from experiments.report.prices_section import benchmark_cost_section, prices_section
from experiments.report.render import Document
from experiments.report.served import overloaded_section
from experiments.report.traffic_section import traffic_section

GOODPUT = ("goodput_output_tokens_s", "goodput output tok/s")  # a failed trial's goodput, as "Errors" shows it
SERVED = "output tokens served (of the requests that completed in each bin)"


def targets_of(options: ReportOptions) -> Targets:
    return Targets(options.ttft_p99_ms, options.tpot_p99_ms)


def build_generative_report(data: SweepData, folder: Path, options: ReportOptions) -> Report:
    folder.mkdir(parents=True, exist_ok=True)
    ok = data.ok
    labels = {name: info.label for name, info in data.tiers.items()}
    prices = {name: info.prices for name, info in data.tiers.items()}
    targets = targets_of(options)
    doc = Document(f"tierbench report — sweep {data.sweep_id} (generative: tokens)")
    report = Report(doc)
    stale = header(doc, data, labels, options)
    repeated = repeats_note(ok)
    if repeated:
        doc.note(repeated)
    doc.h(1, "Answer")
    if ok.empty:
        doc.p("No trial succeeded, so there is nothing to compare: see “Failed and skipped trials” below.")
        report.summary.append("no successful trial")
    else:
        lines = [*deploy_lines(data, labels),
                 *answer_lines(data, labels, prices, targets, lambda row: price_label(data, row))]
        doc.bullets(lines)
        report.summary += [line.replace("**", "").replace("*", "") for line in lines]
    if stale:
        report.summary.append(f"some prices are older than {options.price_max_age_days} days: see the report's note")
    overloaded_section(doc, data, labels, OUTPUT_RATE, "output tok/s")
    prices_section(doc, data)
    if options.peak_rps is not None:
        headroom = DEFAULT_HEADROOM if options.headroom is None else options.headroom
        report.summary += capacity_section(doc, data, labels, targets, options.peak_rps, headroom)
    report.summary += traffic_section(doc, report.images, folder, data, labels, GOODPUT, SERVED)
    report.summary += benchmark_cost_section(doc, data)
    if not data.sustained.empty:
        cost_section(doc, report.images, folder, priced_points(data.sustained, prices), labels, targets)
    report.summary += ceiling_section(doc, data, labels)
    for tier in sorted(data.tiers):
        if (ok["tier"] == tier).any():
            tier_section(doc, data, ok[ok["tier"] == tier], tier)
        else:
            doc.h(1, f"Tier {labels[tier]}")
            doc.p("No trial succeeded on this tier: see “Failed and skipped trials” below.")
    problems_section(doc, data)
    method_section(doc, data)
    return report


def repeats_note(ok: pd.DataFrame) -> str | None:
    """How often the trials were measured, and how their intervals read; None when each was measured once."""
    counts = ok["repeats"].dropna() if "repeats" in ok.columns else pd.Series(dtype=float)
    if counts.empty:
        return None
    times = f"{counts.min():g}" if counts.min() == counts.max() else f"{counts.min():g} to {counts.max():g}"
    return (f"{len(counts)} trial(s) were measured {times} times each (`experiment.repeats`): their figures pool the "
            "repeats, and each is followed by its 95 % interval, e.g. `12.5 (12.1–12.9)`: TTFT, TPOT and ITL "
            "percentiles by a two-level bootstrap over the repeats' raw per-request values, token rates by a "
            "t-interval over the repeats (on the log scale), costs from their rate's interval. Repeats on one node do "
            "not capture node-to-node variation (docs/confidence-intervals.md).")

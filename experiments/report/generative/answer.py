"""A generative sweep's answer: the cheapest operating point per 1M output tokens at each tier's primary price (within
the TTFT and TPOT targets when given, else saying that nothing meets them and what comes closest), the fastest first
token, and each tier's pick at every listed price of the tier, per 1M output tokens and per 1M tokens. Taken from the
trials whose server kept up (`sustained`), stable ones first, saying when a pick is unstable and, where trials were
measured several times, whether the runner-up is within noise of the pick."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from experiments.config.prices import Price
from experiments.report.answer import UNSTABLE_PICK
from experiments.report.data import SweepData, nodes
from experiments.report.generative.points import (
    COST,
    OUTPUT_RATE,
    PACKED_EVENTS,
    SHORT_SHARE,
    TOKENS_PER_EVENT,
    TOTAL_COST,
    TPOT,
    TTFT,
    Targets,
    at_price,
    by_ttft,
    cheapest,
    closest,
    priced_points,
    ranked,
)
from experiments.report.marks import OVERLOADED, UNSTABLE
from experiments.report.noise import noise_line, runner_up, spread
from experiments.report.render import ms, rate, usd
from serving.metric import cost_per
from serving.node import busy_elsewhere

PER_1M_OUT, PER_1M_ALL = " per 1M output tokens", " per 1M tokens"


def point_name(row: pd.Series, labels: dict[str, str]) -> str:
    """`**tier · stack · load**`: a generative point (its batch is always 1)."""
    return f"**{labels.get(row['tier'], row['tier'])} · {row['stack']} · {row['load']}**"


def _caveat(row: pd.Series) -> str:
    return UNSTABLE_PICK if bool(row.get("unstable", False)) else ""


def _figures(row: pd.Series) -> str:
    """`TTFT p99 40 ms, TPOT p99 7.1 ms, 176 output tok/s`: what a pick was measured at."""
    return (f"TTFT p99 {ms(row.get(TTFT))} ms{spread(row, TTFT, ms)}, TPOT p99 {ms(row.get(TPOT))} ms, "
            f"{rate(row.get(OUTPUT_RATE))} output tok/s")


def _good_tokens(sustained: pd.DataFrame, pick: pd.Series) -> str:
    """With the sweep's targets set when it measured (goodput), what the pick's output tokens answered well cost at its
    price: its goodput buys them, not its throughput; '' without goodput."""
    trial = sustained[(sustained["tier"] == pick["tier"]) & (sustained["stack"] == pick["stack"])
                      & (sustained["load"] == pick["load"])]
    if trial.empty or "goodput_output_tokens_s" not in trial.columns:
        return ""
    row = trial.iloc[0]
    good = pd.to_numeric(row.get("goodput_output_tokens_s"), errors="coerce")
    if pd.isna(good) or good <= 0:
        return ""
    bounds = [f"{name} ≤ {float(value):g} ms" for name, key in (("TTFT", "goodput_ttft_p99_ms"),
                                                               ("TPOT", "goodput_tpot_p99_ms"))
              if pd.notna(value := pd.to_numeric(row.get(key), errors="coerce"))]
    within = f"within {' and '.join(bounds)} (the sweep's targets)" if bounds else "within the sweep's targets"
    return (f" Answered well {within}: {float(row.get('goodput_share', float('nan'))):.1%} of its requests, "
            f"**{usd(cost_per(float(pick['usd_per_hour']), float(good), 1e6))} per 1M good output tokens**.")


def _costs_line(pick: pd.Series, prices: list[Price], labels: dict[str, str], what: str) -> str:
    """A tier's pick at every listed price of the tier: $ per 1M output tokens and per 1M tokens (prompt and output),
    for the nodes that served it."""
    count = int(nodes(pick))
    parts = []
    for price in prices:
        fleet = price.usd_per_hour * count
        out = cost_per(fleet, float(pick[OUTPUT_RATE]), 1e6) if pick[OUTPUT_RATE] > 0 else float("nan")
        total_rate = float(pick.get("total_tokens_s", float("nan")))
        total = cost_per(fleet, total_rate, 1e6) if total_rate > 0 else float("nan")
        parts.append(f"{price.name} ${price.usd_per_hour:g}/h{f' × {count} nodes' if count > 1 else ''}: "
                     f"{usd(out)}{PER_1M_OUT}, {usd(total)}{PER_1M_ALL}")
    return f"At every listed price, {point_name(pick, labels)} ({what}): " + "; ".join(parts) + "."


def answer_lines(data: SweepData, labels: dict[str, str], prices: dict[str, list[Price]], targets: Targets,
                 price_label: Callable[[pd.Series], str]) -> list[str]:
    """The answer in a few Markdown lines (the report's first section, the console, the MLflow note)."""
    sustained = data.sustained
    lines: list[str] = []
    if sustained.empty:
        lines.append(f"Every successful trial overloaded its server ({OVERLOADED}): there is no cost figure to give; "
                     "see “Overloaded trials”.")
    else:
        lines += _picks(sustained, labels, prices, targets, price_label)
        unstable = int(sustained["unstable"].sum())
        if unstable:
            lines.append(f"{unstable} of {len(sustained)} trials are unstable ({UNSTABLE}: their windows never agreed "
                         "within the stability rule): the answer takes stable trials wherever one qualifies, and every "
                         "table and plot marks the unstable figures.")
    lines += _caveats(data, labels)
    return [line for line in lines if line]


def _picks(sustained: pd.DataFrame, labels: dict[str, str], prices: dict[str, list[Price]], targets: Targets,
           price_label: Callable[[pd.Series], str]) -> list[str]:
    priced = priced_points(sustained, prices)
    if priced.empty or at_price(priced)[COST].dropna().empty:
        return ["No trial has a cost figure (no price, or no output token served): see “Prices”."]

    def name(row: pd.Series) -> str:
        return point_name(row, labels)

    def label(tier: str) -> str:
        return labels.get(tier, tier)

    def priced_line(intro: str, pick: pd.Series, ranking: pd.DataFrame) -> list[str]:
        return [f"{intro}: {name(pick)}: **{usd(pick[COST])}{PER_1M_OUT}**{spread(pick, COST, usd)} "
                f"({usd(pick[TOTAL_COST])}{PER_1M_ALL} in + out; {_figures(pick)}; price {price_label(pick)})."
                f"{_caveat(pick)}" + _good_tokens(sustained, pick),
                noise_line(pick, runner_up(ranking, pick), COST, usd, PER_1M_OUT, "", name, label)]

    lines: list[str] = []
    overall = ranked(priced, Targets())
    within = cheapest(priced, targets) if targets else None
    if targets and within is None:
        near = closest(priced, targets)
        lines.append(f"Nothing measured meets {targets.describe()}" + (
            f": the closest is {name(near)} at TTFT p99 {ms(near.get(TTFT))} ms and TPOT p99 {ms(near.get(TPOT))} ms, "
            f"{usd(near[COST])}{PER_1M_OUT}.{_caveat(near)}" if near is not None else
            ": no trial has the figures (an answer not streamed has no TTFT or TPOT)."))
    elif within is not None:
        lines += priced_line(f"Cheapest operating point with {targets.describe()}, at each tier's primary price",
                             within, ranked(priced, targets))
        anywhere = cheapest(priced, targets, price=None)
        if anywhere is not None and anywhere["price"] != within["price"]:
            lines.append(f"At any listed price: {name(anywhere)} at price {price_label(anywhere)}: "
                         f"**{usd(anywhere[COST])}{PER_1M_OUT}**{spread(anywhere, COST, usd)}.{_caveat(anywhere)}")
    if within is None or within.name != overall.index[0]:  # with targets: what the cheapest point gives up
        lines += priced_line("Cheapest operating point at each tier's primary price"
                             + (", whatever its latency" if targets else ""), overall.iloc[0], overall)
    fastest = by_ttft(at_price(priced))
    if fastest.empty:
        lines.append("No trial streamed its answers: none has a time to first token.")
    else:
        best = fastest.iloc[0]
        lines.append(f"Lowest TTFT p99: {name(best)}: {ms(best[TTFT])} ms{spread(best, TTFT, ms)} (TPOT p99 "
                     f"{ms(best.get(TPOT))} ms) at {usd(best[COST])}{PER_1M_OUT}.{_caveat(best)}")
        lines.append(noise_line(best, runner_up(fastest, best), TTFT, ms, " ms", "TTFT p99 ", name, label))
    if not targets:
        lines.append("Give targets with `--ttft-p99-ms` and `--tpot-p99-ms` (a sweep's `experiment.slo.ttft_p99_ms` "
                     "and `tpot_p99_ms`) for a pick within them; meanwhile the Pareto frontiers below answer any "
                     "target: take the frontier point with the largest TTFT p99 (TPOT p99) within it.")
    lines += _every_price(priced, labels, prices, targets)
    return lines


def _every_price(priced: pd.DataFrame, labels: dict[str, str], prices: dict[str, list[Price]],
                 targets: Targets) -> list[str]:
    """Each tier's cheapest point (within the targets when given) at every listed price of the tier."""
    lines = []
    for tier in sorted(set(priced["tier"])):
        rows = priced[priced["tier"] == tier]
        pick = cheapest(rows, targets)
        if pick is None:
            lines.append(f"Tier {labels.get(tier, tier)}: no point within {targets.describe()}.")
            continue
        what = "the tier's cheapest point" + (f" within {targets.describe()}" if targets else "")
        lines.append(_costs_line(pick, prices.get(tier, []), labels, what))
    return lines


def _caveats(data: SweepData, labels: dict[str, str]) -> list[str]:
    """What the answer's figures carry: overloaded trials left out, answers shorter than asked, tokens packed per
    event, a busy node."""
    ok, lines = data.ok, []
    overloaded = int(ok["overloaded"].sum())
    if overloaded:
        lines.append(f"{overloaded} open-loop trial(s) fell behind their arrivals ({OVERLOADED}) and are left out of "
                     "the answer, the Pareto frontiers and every cost figure: see “Overloaded trials”.")
    if SHORT_SHARE in ok:
        short = ok[pd.to_numeric(ok[SHORT_SHARE], errors="coerce") > 0]
        if not short.empty:
            lines.append(f"{len(short)} trial(s) were served answers shorter than asked (up to "
                         f"{float(short[SHORT_SHARE].max()):.0%} of their requests): the server did not pin the length "
                         "(`endpoint_pin_output`), so their output tokens per request, and with them the cost per "
                         "request, are the model's, not the prompt set's: see each tier's token table.")
    if TOKENS_PER_EVENT in ok:
        packed = ok[pd.to_numeric(ok[TOKENS_PER_EVENT], errors="coerce") > PACKED_EVENTS]
        if not packed.empty:
            lines.append(f"{len(packed)} trial(s) streamed up to {float(packed[TOKENS_PER_EVENT].max()):.2f} output "
                         "tokens per event: their ITL is the gap between events, not between tokens (TPOT is per "
                         "token).")
    for info in data.tiers.values():
        if busy_elsewhere(info.cpu_busy_before, info.cpu_count):
            lines.append(f"Tier {labels.get(info.name, info.label)}'s node had {info.cpu_busy_before:.1f} of its "
                         f"{info.cpu_count} cores busy before the sweep started anything on it: its figures include "
                         "that work.")
    return lines

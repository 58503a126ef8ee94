"""A generative sweep's numbers (pandas frames of floats, as `experiments.report.tables` is for images): every operating
point at every listed price of its tier with its $ per 1M output tokens and per 1M tokens (prompt and output), the
points within the TTFT and TPOT targets, the picks, and the capacity plan in tokens. The figures' names come from the
workload's declaration (serving/workloads/generative/workload.py); formatting lives in the sections."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from experiments.config.capacity import exact
from experiments.config.prices import HOURS_PER_MONTH, PRIMARY, Price, fleet_usd_per_hour
from experiments.measure.intervals import metric_names
from experiments.report.data import NODES, nodes
from experiments.report.tables import MARKS, figure, stable_first
from serving.metric import cost_per
from serving.workloads.registry import workload

WORKLOAD = workload("generative")
OUTPUT_RATE = WORKLOAD.throughput  # output tokens/s: what a tier is sized on
COST = WORKLOAD.cost  # $ per 1M output tokens, the headline
# Each cost figure, the rate it prices and the units it counts: output tokens, and prompt + output tokens.
COSTS = WORKLOAD.costs
RATE_OF = {cost: rate for cost, rate, _ in COSTS}
TOTAL_COST = next(cost for cost, _, _ in COSTS if cost != COST)  # $ per 1M tokens, prompt and output
TOTAL_RATE = RATE_OF[TOTAL_COST]
# The targets (experiment.slo keys) are named as the figures they bound: TTFT p99 (the workload's latency) and TPOT p99.
TTFT, TPOT = (key for key in WORKLOAD.slo_targets if key.endswith("_p99_ms"))
TTFT_P50, TPOT_P50 = TTFT.replace("_p99_", "_p50_"), TPOT.replace("_p99_", "_p50_")
E2E_P50, E2E_P99 = "latency_p50_ms", "latency_p99_ms"  # end to end: the engine's latency of every request
# An operating point of a generative sweep: its stack (variant/protocol/input format) and load; batch is always 1.
POINT = ["stack", "load"]
SHORT_SHARE, TOKENS_PER_EVENT = "output_short_share", "tokens_per_event_mean"
PACKED_EVENTS = 1.05  # more output tokens per streamed event than this: the server packs tokens, and ITL is per event
# The columns a priced point carries beside its costs (those a trial lacks are left out).
PRICED_FIGURES = ("variant", "protocol", "input_format", "batch_size", TTFT_P50, TTFT, TPOT_P50, TPOT, E2E_P99,
                  OUTPUT_RATE, TOTAL_RATE, "requests_s", "output_tokens_mean", "unstable", "overloaded", MARKS)


@dataclass(frozen=True)
class Targets:
    """A generative answer's targets: TTFT p99 and TPOT p99 (ms), either or both; none: no pick within targets."""

    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    @property
    def given(self) -> dict[str, float]:
        """{figure: bound} of the targets set."""
        return {name: bound for name, bound in ((TTFT, self.ttft_p99_ms), (TPOT, self.tpot_p99_ms))
                if bound is not None}

    def __bool__(self) -> bool:
        return bool(self.given)

    def describe(self) -> str:
        """`TTFT p99 ≤ 200 ms and TPOT p99 ≤ 40 ms`."""
        names = {TTFT: "TTFT p99", TPOT: "TPOT p99"}
        return " and ".join(f"{names[name]} ≤ {bound:g} ms" for name, bound in self.given.items())

    def met(self, rows: pd.DataFrame) -> pd.Series:
        """Per row: every target set is met (a figure the trial lacks, e.g. TTFT of an answer not streamed, is not)."""
        ok = pd.Series(True, index=rows.index)
        for name, bound in self.given.items():
            ok &= figure(rows, name).le(bound).fillna(False).astype(bool)
        return ok

    def miss(self, rows: pd.DataFrame) -> pd.Series:
        """Per row: by how much it misses its worst target (figure / bound, the largest; ≤ 1 meets them all)."""
        ratios = [pd.to_numeric(rows.get(name), errors="coerce") / bound for name, bound in self.given.items()]
        return pd.concat(ratios, axis=1).max(axis=1, skipna=False).fillna(np.inf)


def _cost_at(usd_per_hour: pd.Series, rate: pd.Series, quantity: float) -> pd.Series:
    """$ per `quantity` units at `usd_per_hour` (what the point's nodes cost), NaN where nothing was served."""
    rate = pd.to_numeric(rate, errors="coerce")
    return cost_per(usd_per_hour, rate.where(rate > 0), quantity)


def priced_points(sustained: pd.DataFrame, prices_by_tier: dict[str, list[Price]]) -> pd.DataFrame:
    """Long table: every point of `sustained` at every listed price of its tier. Its cost columns (COST, TOTAL_COST)
    are at the row's `price`, for the nodes that served it (`usd_per_hour` = nodes × the price), with their 95 %
    intervals from the rates' where the point was measured several times; cheapest per output token first."""
    # A figure no trial has (TTFT and TPOT where no answer was streamed) reads as missing, never as an error.
    sustained = sustained.assign(**{name: np.nan for name in (TTFT_P50, TTFT, TPOT_P50, TPOT, OUTPUT_RATE, TOTAL_RATE)
                                    if name not in sustained.columns})
    spread = [end for name in (TTFT, TPOT, OUTPUT_RATE, TOTAL_RATE) for end in metric_names(name)
              if end in sustained.columns]
    shown = [c for c in PRICED_FIGURES if c in sustained.columns]
    frames = []
    for tier, rows in sustained.groupby("tier", sort=True):
        for price in prices_by_tier.get(str(tier), []):
            f = rows[["tier", *POINT, *shown, *spread]].copy()
            f[NODES] = nodes(rows)
            f["price"] = price.name
            f["usd_per_hour"] = fleet_usd_per_hour(price.usd_per_hour, f[NODES])
            for cost, rate, quantity in COSTS:
                f[cost] = _cost_at(f["usd_per_hour"], rows[rate], quantity)
                low, high = metric_names(rate)
                if low in rows and high in rows:  # a higher rate is a lower cost: the ends swap
                    f[metric_names(cost)[0]] = _cost_at(f["usd_per_hour"], rows[high], quantity)
                    f[metric_names(cost)[1]] = _cost_at(f["usd_per_hour"], rows[low], quantity)
            frames.append(f)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).sort_values([COST, TTFT]).reset_index(drop=True)


def at_price(priced: pd.DataFrame, price: str | None = PRIMARY) -> pd.DataFrame:
    """The priced points at each tier's `price` (None: at every listed price)."""
    return priced if price is None or priced.empty else priced[priced["price"] == price]


def ranked(priced: pd.DataFrame, targets: Targets, price: str | None = PRIMARY) -> pd.DataFrame:
    """The points a pick is taken from, cheapest per output token first: those within `targets` (every point without
    any) at `price`, stable ones only when one qualifies; points with no cost figure left out."""
    rows = at_price(priced, price)
    if rows.empty:
        return rows
    rows = rows[rows[COST].notna() & targets.met(rows)]
    return stable_first(rows).sort_values([COST, TTFT], kind="stable")


def cheapest(priced: pd.DataFrame, targets: Targets, price: str | None = PRIMARY) -> pd.Series | None:
    """The cheapest point per output token within `targets` at `price`; None when none qualifies."""
    rows = ranked(priced, targets, price)
    return None if rows.empty else rows.iloc[0]


def closest(priced: pd.DataFrame, targets: Targets) -> pd.Series | None:
    """Where nothing meets the targets, the point that misses them by the least (its worst figure / bound), at each
    tier's primary price, stable ones first; None without a point that has the figures."""
    rows = stable_first(at_price(priced))
    if rows.empty:
        return None
    misses = targets.miss(rows)
    finite = rows[np.isfinite(misses)]
    return None if finite.empty else finite.loc[misses[finite.index].sort_values(kind="stable").index[0]]


def by_ttft(rows: pd.DataFrame) -> pd.DataFrame:
    """Points by TTFT p99, lowest first (stable ones only when there are any); those without a TTFT left out (an
    answer not streamed has no first token to time)."""
    if TTFT not in rows:
        return rows.iloc[:0]
    timed = rows[rows[TTFT].notna()]
    return stable_first(timed).sort_values(TTFT, kind="stable")


def per_node_rate(rows: pd.DataFrame) -> pd.Series:
    """Output tokens/s one node serves at each point: the point's rate ÷ the nodes that served it together."""
    return pd.to_numeric(rows[OUTPUT_RATE], errors="coerce") / pd.Series(nodes(rows), index=rows.index)


def capacity_points(sustained: pd.DataFrame, targets: Targets) -> dict[str, pd.Series]:
    """Per tier, the point a capacity plan is sized from: the most output tokens/s per node within `targets` (every
    point without any), stable ones first, with a measured answer length; tiers with none left out."""
    out: dict[str, pd.Series] = {}
    if OUTPUT_RATE not in sustained:
        return out
    for tier, rows in sustained.groupby("tier", sort=True):
        rows = rows[targets.met(rows) & (per_node_rate(rows) > 0)]
        if "output_tokens_mean" in rows:
            rows = rows[pd.to_numeric(rows["output_tokens_mean"], errors="coerce") > 0]
        else:
            rows = rows.iloc[:0]
        if rows.empty:
            continue
        rows = stable_first(rows)
        out[str(tier)] = rows.loc[per_node_rate(rows).sort_values(ascending=False, kind="stable").index[0]]
    return out


@dataclass(frozen=True)
class TokenPlan:
    """Nodes of one tier for a peak of requests/s at its chosen point: nodes = ⌈peak × output tokens per request ×
    (1 + headroom) ÷ output tokens/s per node⌉, exactly (decimals as fractions)."""

    tier: str
    point: pd.Series
    peak_rps: float
    headroom: float

    @property
    def tokens_per_request(self) -> float:
        """The chosen point's measured output tokens per request (its answers' mean length)."""
        return float(self.point["output_tokens_mean"])

    @property
    def per_node_tokens_s(self) -> float:
        return float(self.point[OUTPUT_RATE]) / int(nodes(self.point))

    @property
    def required_tokens_s(self) -> Fraction:
        """What the nodes must serve: peak × tokens per request × (1 + headroom), headroom applied once, here."""
        return exact(self.peak_rps) * exact(self.tokens_per_request) * (1 + exact(self.headroom))

    @property
    def nodes(self) -> int:
        return math.ceil(self.required_tokens_s / exact(self.per_node_tokens_s))

    def usd_per_hour(self, price: Price) -> Fraction:
        return self.nodes * exact(price.usd_per_hour)

    def usd_per_month(self, price: Price) -> Fraction:
        return self.usd_per_hour(price) * HOURS_PER_MONTH

"""The report's 95 % intervals, present where trials were measured several times (`experiment.repeats`): a figure's
interval, the ends of a table's intervals, and whether the runner-up is within noise of the answer's pick
(docs/confidence-intervals.md). A trial measured once has no interval, and nothing here says anything of it."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from experiments.config.prices import Price, fleet_usd_per_hour
from experiments.measure.intervals import Interval, metric_names
from experiments.measure.pooled import THROUGHPUT, cost_intervals
from experiments.report.data import nodes

COST = "cost_per_1k_images_usd"
DOCS = "docs/confidence-intervals.md"


def interval(row: pd.Series, metric: str) -> Interval | None:
    """`metric`'s interval on a trial's row; None when it has none."""
    low, high = (row.get(name) for name in metric_names(metric))
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return Interval(float(low), float(high))


def spread(row: pd.Series, metric: str, fmt: Callable[[object], str]) -> str:
    """` (95 % interval a–b)` after a figure measured several times; nothing after one measured once."""
    found = interval(row, metric)
    return f" (95 % interval {fmt(found.low)}–{fmt(found.high)})" if found is not None else ""


def stated(row: pd.Series, metric: str, fmt: Callable[[object], str], unit: str = "", prefix: str = "") -> str:
    """`$0.00025 per 1k images (95 % interval $0.00024–$0.00026)`; the figure alone when it has no interval."""
    return f"{prefix}{fmt(row[metric])}{unit}{spread(row, metric, fmt)}"


def interval_ends(rows: pd.DataFrame, columns: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The (low, high) ends of `rows`' intervals as `format_frame` takes them, for the metrics of `columns`
    ({metric: the table's column}); None when no row has an interval."""
    lows, highs = pd.DataFrame(index=rows.index), pd.DataFrame(index=rows.index)
    for metric, column in columns.items():
        low, high = metric_names(metric)
        if low in rows.columns and high in rows.columns:
            lows[column], highs[column] = rows[low], rows[high]
    return (lows, highs) if lows.notna().any().any() else None


def cost_ends(rows: pd.DataFrame, price: Price, metric: str = COST) -> pd.DataFrame:
    """`metric`'s interval ends (`<metric>_ci_low`, `_ci_high`) at `price`, from each row's throughput interval
    (NaN where it has none): $ per 1k images at another price than the one logged, for the row's nodes."""
    names = metric_names(metric)

    def ends(row: pd.Series) -> pd.Series:
        spread = interval(row, THROUGHPUT)
        usd_per_hour = fleet_usd_per_hour(price.usd_per_hour, nodes(row))
        found = cost_intervals(usd_per_hour, spread) if spread is not None else {}
        return pd.Series([found.get(name) for name in metric_names(COST)], index=list(names), dtype=float)

    if not rows.empty and all(name in rows.columns for name in metric_names(THROUGHPUT)):
        return rows.apply(ends, axis=1)
    return pd.DataFrame({name: pd.Series(float("nan"), index=rows.index) for name in names})


def pivot_ends(rows: pd.DataFrame, metric: str, pivot: Callable[[str], pd.DataFrame],
               names: Callable[[object], object] | None = None) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The (low, high) ends of a pivot table of `rows`' `metric` as `format_frame` takes them: `pivot(name)` pivots a
    metric of `rows` as the table does, `names` renames its columns as the table shows them. None when no trial has
    an interval."""
    ends = []
    for name in metric_names(metric):
        found = pivot(name) if name in rows.columns and rows[name].notna().any() else pd.DataFrame()
        if found.empty:
            return None
        ends.append(found.rename(columns=names) if names is not None else found)
    return ends[0], ends[1]


def priced_ends(points: pd.DataFrame, prices: list[Price], columns: dict[str, str]) -> tuple[pd.DataFrame,
                                                                                            pd.DataFrame] | None:
    """The interval ends of a table of `points` (one per row, in the table's order) with their $ per 1k images at
    each of `prices` (a column per price name): `columns` maps metric and price names to the table's columns."""
    rows = pd.concat([points, *(cost_ends(points, price, price.name) for price in prices)], axis=1)
    return interval_ends(rows.reset_index(drop=True), columns)


def runner_up(ranked: pd.DataFrame, pick: pd.Series) -> pd.Series | None:
    """The next best after `pick` in `ranked` (best first): the best of another tier where there is one, else the
    next operating point of the pick's tier."""
    others = ranked[ranked["tier"] != pick["tier"]]
    if others.empty:
        others = ranked[(ranked[["stack", "batch_size", "load"]] != pick[["stack", "batch_size", "load"]]).any(axis=1)]
    return None if others.empty else others.iloc[0]


def noise_line(pick: pd.Series, runner: pd.Series | None, metric: str, fmt: Callable[[object], str], unit: str,
               prefix: str, name: Callable[[pd.Series], str], label: Callable[[str], str]) -> str | None:
    """Whether `runner`'s interval of `metric` overlaps `pick`'s: "tier B is within noise of tier A", or the
    runner-up is clear of it. None when either figure has no interval (trials measured once)."""
    if runner is None:
        return None
    ours, theirs = interval(pick, metric), interval(runner, metric)
    if ours is None or theirs is None:
        return None
    runner_up = f"the runner-up, {name(runner)}, at {stated(runner, metric, fmt, unit, prefix)}"
    return overlap_verdict(ours, theirs, runner_up, f"the pick's interval ({fmt(ours.low)}–{fmt(ours.high)})",
                           label(pick["tier"]), label(runner["tier"]), pick["tier"] == runner["tier"])


def overlap_verdict(ours: Interval, theirs: Interval, runner_up: str, picks: str, pick_tier: str, runner_tier: str,
                    same_tier: bool = False) -> str:
    """The one verdict on two 95 % intervals, the pick's (`ours`) and the runner-up's: overlapping, the measurements
    cannot tell them apart ("tier B is within noise of tier A"); apart, the pick wins beyond noise. `runner_up` and
    `picks` name the two figures in the sentence."""
    if not ours.overlaps(theirs):
        return f"Beyond noise: {runner_up}, is clear of {picks}."
    verdict = ("the two operating points are within noise of each other" if same_tier
               else f"tier {runner_tier} is within noise of tier {pick_tier}")
    return (f"Within noise: {runner_up}, overlaps {picks}: {verdict}. More repeats (`experiment.repeats`), or "
            f"repeats on other nodes of each tier, would tell them apart ({DOCS}).")

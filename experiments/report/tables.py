"""The report's tables as numbers (pandas frames of floats): the study's tables generalised to any sweep.

Everything here takes the tidy trial frame of `experiments.report.data` restricted to `ok` trials, so tests
can check exact values; formatting lives in `render`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from experiments.config.prices import Price, cost_per_1k_images, fleet_usd_per_hour, images_per_usd
from experiments.measure.intervals import metric_names
from experiments.report import marks
from experiments.report.data import NODES, nodes
from experiments.report.data import open_loop as open_loop_rows
from experiments.report.noise import cost_ends
from experiments.results.records import Status

P50, P99, THROUGHPUT = "latency_p50_ms", "latency_p99_ms", "throughput_img_s"
MARKS = "marks"  # per trial: its caveat marks (experiments.report.marks), '' when none
# An operating point; `load` is `c4` (closed loop) or `poisson-r80` (open loop).
POINT = ["stack", "batch_size", "load"]
# Open-loop trials side by side: what was asked, offered, sent and served, and what it did to latency.
OPEN_LOOP_METRICS = ("target_rate_rps", "offered_rate_rps", "achieved_rate_rps", THROUGHPUT, P50, P99,
                     "server_queue_ms", "backlog_growth_requests", "server_count_ratio")
# Server-side breakdown and SLO-search metrics: shown when the trials carry them.
SERVER_METRICS = ("server_queue_ms", "server_compute_input_ms", "server_compute_infer_ms",
                  "server_compute_output_ms", "server_request_ms", "server_backend_run_ms", "server_backend_stub_ms",
                  "server_replica_ms")
SLO_SEARCH_METRICS = ("slo_max_throughput_img_s", "cost_per_1k_images_at_slo_usd")
# The clients' own cost: CPU per completed request over all actors, and the busiest actor's CPU.
CLIENT_METRICS = ("client_cpu_us_per_request", "client_cpu_util_max", P50)
# A figure from two trials: a ratio of numbers, or both trials' marks when the table's marks are asked for.
Combine = Callable[[pd.Series, pd.Series], pd.Series]


def figure(rows: pd.DataFrame, name: str) -> pd.Series:
    """A metric's column as numbers; all NaN where no trial logged it (a store without it has no such column)."""
    return pd.to_numeric(rows[name], errors="coerce") if name in rows else pd.Series(float("nan"), index=rows.index)


def _ratio(a: pd.Series, b: pd.Series) -> pd.Series:
    return a / b


def _combine_for(values: str) -> Combine:
    return marks.merge if values == MARKS else _ratio


def _per_load(ok: pd.DataFrame, index: str | list[str], columns: str, values: str) -> dict[object, pd.DataFrame]:
    """`values` by `index` x `columns`, one table per load: one pivot for every load at once, then split (a pivot per
    load took most of a large sweep's report), each table as its own pivot would be (no row or column that is empty
    within its load)."""
    if ok.empty:
        return {}
    index = [index] if isinstance(index, str) else index
    table = ok.pivot_table(index=["load", *index], columns=columns, values=values, aggfunc="first", observed=True)
    return {load: rows.droplevel("load").dropna(axis=1, how="all")
            for load, rows in table.groupby(level="load", sort=True, observed=True)}


def by_batch(ok: pd.DataFrame, metric: str) -> dict[str, pd.DataFrame]:
    """For one tier: `metric` by stack (rows) x batch size (columns), one table per load."""
    return {str(load): table for load, table in _per_load(ok, "stack", "batch_size", metric).items()}


def grpc_speedup(ok: pd.DataFrame, values: str = P50) -> dict[str, pd.DataFrame]:
    """For one tier: p50 over HTTP / p50 over gRPC (> 1: gRPC faster) per backend variant and input format
    (rows) x batch size (columns), one table per load. Pairs hit the same server: the ratio is pure
    transport. `values=MARKS`: the same table of the figures' marks. Every load's pairs at once, then split by load
    (two pivots a load took most of a large sweep's report)."""
    if ok.empty:
        return {}
    by_protocol = ok.pivot_table(index=["load", "variant", "input_format", "batch_size"], columns="protocol",
                                 values=values, aggfunc="first", observed=True)
    if not {"http", "grpc"} <= set(by_protocol.columns):
        return {}
    ratio = _combine_for(values)(by_protocol["http"], by_protocol["grpc"]).dropna()
    if ratio.empty:
        return {}
    table = ratio.rename("speedup").reset_index()
    table["pair"] = table["variant"] + "/" + table["input_format"]
    pivot = table.pivot_table(index=["load", "pair"], columns="batch_size", values="speedup", aggfunc="first",
                              observed=True)
    return {str(load): rows.droplevel("load").dropna(axis=1, how="all")
            for load, rows in pivot.groupby(level="load", sort=True, observed=True)}


def concurrency_scaling(ok: pd.DataFrame, values: str = THROUGHPUT) -> dict[int, pd.DataFrame]:
    """For one tier's closed-loop trials: throughput by stack (rows) x concurrency (columns), one table per
    batch size, with `scaling` = throughput at the highest concurrency / at the lowest. `values=MARKS`: the
    same table of the figures' marks."""
    out = {}
    for batch, rows in ok[~open_loop_rows(ok)].groupby("batch_size", sort=True):
        table = rows.pivot_table(index="stack", columns="concurrency", values=values, aggfunc="first")
        if table.shape[1] > 1:
            table["scaling"] = _combine_for(values)(table[table.columns[-1]], table[table.columns[0]])
        out[int(batch)] = table
    return out


def cross_tier(ok: pd.DataFrame, base: str, other: str, values: str | None = None) -> pd.DataFrame:
    """`other` over `base` at every operating point both measured: p50, throughput and $/1k (primary prices).
    `values=MARKS`: the same table of the figures' marks."""
    cols = [P50, THROUGHPUT, "cost_per_1k_images_usd"]
    a = ok[ok["tier"] == base].set_index(POINT)[[*cols, MARKS]]
    b = ok[ok["tier"] == other].set_index(POINT)[[*cols, MARKS]]
    both = a.join(b, how="inner", lsuffix="_a", rsuffix="_b")
    out = pd.DataFrame(index=both.index)
    for col, short in zip(cols, ("p50", "throughput", "cost"), strict=True):
        name = values or col
        out[f"{short}_{base}"] = both[f"{name}_a"]
        out[f"{short}_{other}"] = both[f"{name}_b"]
        out[f"{short}_ratio"] = _combine_for(name)(both[f"{name}_b"], both[f"{name}_a"])
    return out.sort_index()


def costs_at_prices(ok: pd.DataFrame, prices: list[Price]) -> pd.DataFrame:
    """For one tier: every operating point's throughput, p99 and $/1k at each of the tier's prices (columns
    named by price), with images per $ at the primary price; each point priced for the nodes that served it."""
    out = ok.set_index(POINT)[[THROUGHPUT, P99]].copy()
    count = nodes(ok.set_index(POINT))
    for price in prices:
        out[price.name] = cost_per_1k_images(price.usd_per_hour, out[THROUGHPUT], count)
    if prices:
        primary = prices[0].usd_per_hour  # a free tier buys no images per $
        out["images_per_usd"] = images_per_usd(primary, out[THROUGHPUT], count) if primary > 0 else np.nan
    return out.sort_index()


def cost_by_tier(ok: pd.DataFrame, metric: str = "cost_per_1k_images_usd") -> pd.DataFrame:
    """Operating points (rows) x tiers (columns) of a cost metric at each tier's primary price (empty when no
    trial has it: images per $ is not logged for a free tier)."""
    if metric not in ok.columns:
        return pd.DataFrame()
    return ok.pivot_table(index=POINT, columns="tier", values=metric, aggfunc="first", observed=True)


def priced_points(ok: pd.DataFrame, prices_by_tier: dict[str, list[Price]]) -> pd.DataFrame:
    """Long table: every ok operating point at every price of its tier, with its $/1k at that price (and the 95 %
    intervals of its figures where it was measured several times). `usd_per_hour` is what the point's `nodes` cost
    per hour at that price: the price itself for a launched server (one node)."""
    spread = [name for metric in (P50, P99, THROUGHPUT) for name in metric_names(metric) if name in ok.columns]
    frames = []
    for tier, rows in ok.groupby("tier", sort=True):
        for price in prices_by_tier.get(str(tier), []):
            f = rows[["tier", *POINT, "variant", "protocol", P50, P99, THROUGHPUT, "unstable", MARKS, *spread]].copy()
            f[NODES] = nodes(rows)
            f["price"] = price.name
            f["usd_per_hour"] = fleet_usd_per_hour(price.usd_per_hour, f[NODES])
            f["cost_per_1k_usd"] = cost_per_1k_images(price.usd_per_hour, f[THROUGHPUT], f[NODES])
            frames.append(f.join(cost_ends(rows, price, "cost_per_1k_usd")))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).sort_values(["cost_per_1k_usd", P99]).reset_index(drop=True)


def stable_first(rows: pd.DataFrame) -> pd.DataFrame:
    """The stable ones among `rows` where there are any, else all of them: a pick is taken from stable trials
    whenever one qualifies (an unstable pick is marked where it is shown)."""
    if "unstable" not in rows:
        return rows
    stable = rows[~rows["unstable"].astype(bool)]
    return stable if not stable.empty else rows


def slo_candidates(priced: pd.DataFrame, slo_p99_ms: float) -> pd.DataFrame:
    """Operating points whose p99 meets the SLO, cheapest first (at every listed price)."""
    if priced.empty:
        return priced
    return priced[priced[P99] <= slo_p99_ms].reset_index(drop=True)


def slo_ranked(priced: pd.DataFrame, slo_p99_ms: float, price: str | None = "primary") -> pd.DataFrame:
    """The operating points a pick is taken from, cheapest first: those whose p99 meets the SLO, at each tier's
    primary price (any listed price with `price=None`), stable ones only when one meets it."""
    rows = slo_candidates(priced, slo_p99_ms)
    if price is not None and not rows.empty:
        rows = rows[rows["price"] == price]
    return stable_first(rows)


def slo_pick(priced: pd.DataFrame, slo_p99_ms: float, price: str | None = "primary") -> pd.Series | None:
    """The cheapest (tier, stack, batch, load) whose p99 meets the SLO: at each tier's primary price, or at
    any listed price with `price=None`; a stable trial when one meets it (an unstable one only when none
    does: its `unstable` says so). None when nothing meets it."""
    rows = slo_ranked(priced, slo_p99_ms, price)
    return None if rows.empty else rows.iloc[0]


def pareto_frontier(ok: pd.DataFrame, x: str = P99, y: str = "cost_per_1k_images_usd") -> pd.DataFrame:
    """Points no other point beats on both latency and cost (lower is better on both), by increasing latency.
    For any p99 target, the cheapest option is the frontier point with the largest p99 within it."""
    pts = ok.dropna(subset=[x, y]).sort_values([x, y])
    keep, best = [], np.inf
    for idx, cost in zip(pts.index, pts[y], strict=True):
        if cost < best:
            keep.append(idx)
            best = cost
    return pts.loc[keep]


def open_loop(ok: pd.DataFrame) -> pd.DataFrame:
    """For one tier: its open-loop trials by point, with the rates, throughput and latency side by side."""
    rows = ok[open_loop_rows(ok)]
    return rows.set_index(POINT)[[m for m in OPEN_LOOP_METRICS if m in rows.columns]].sort_index()


def problems(trials: pd.DataFrame) -> pd.DataFrame:
    """Failed and skipped trials grouped by tier, status and reason: how many, and which (run names without
    the tier). Failed ones first."""
    bad = trials[trials["status"] != Status.OK]
    if bad.empty:
        return pd.DataFrame(columns=["tier", "status", "reason", "count", "trials"])
    bad = bad.assign(short=bad["run_name"].str.split("/", n=1).str[-1])
    out = (bad.groupby(["tier", "status", "reason"], sort=False)["short"]
           .agg(count="size", trials=lambda names: ", ".join(sorted(names))).reset_index())
    order = out["status"].map({Status.FAILED: 0}).fillna(1)
    return out.assign(_o=order).sort_values(["_o", "tier", "status", "reason"]).drop(columns="_o")


def present(ok: pd.DataFrame, metrics: tuple[str, ...]) -> list[str]:
    """Those of `metrics` that some trial carries (a metric older trials lack appears once some trial has it)."""
    return [m for m in metrics if m in ok.columns and ok[m].notna().any()]

"""The figures of a trial measured several times (`experiment.repeats`): its repeats pooled, with 95 % intervals.

Latency percentiles come from every repeat's raw samples pooled (never averaged), their intervals from a two-level
bootstrap over those samples; throughput is the repeats' geometric mean with a t-interval on the log scale, and cost
follows from it (`experiments.measure.intervals`, docs/confidence-intervals.md)."""

from __future__ import annotations

import logging
import math

import numpy as np

from experiments.config.prices import cost_per_1k_images, images_per_usd
from experiments.measure.catalog import Pool, metric
from experiments.measure.intervals import (
    Interval,
    cluster_bootstrap,
    geometric_mean,
    interval_metrics,
    log_t_interval,
)
from experiments.measure.metrics import PERCENTILES, cost_metrics, latency_metrics, percentile_metrics
from experiments.measure.samples import WindowSamples
from serving.metric import cost_per
from serving.workloads.registry import workload as workload_named
from serving.workloads.workload import Workload

log = logging.getLogger(__name__)
IMAGE = workload_named("image")
THROUGHPUT = "throughput_img_s"
# The figures of the raw latencies that get a bootstrap interval, in the order `_latency_figures` computes them.
LATENCY_FIGURES = (*(f"latency_p{p}_ms" for p in PERCENTILES), "latency_mean_ms")


def _latency_figures(ms: np.ndarray) -> np.ndarray:
    return np.append(np.percentile(ms, PERCENTILES), ms.mean())


def _pool(name: str, values: list[float]) -> float:
    """One metric over the repeats, as the catalog says (figures from raw samples or the price are computed again
    by `pooled_metrics`; a mean stands in meanwhile)."""
    declared = metric(name)
    if declared is None:
        log.warning("metric %s is not declared in experiments/measure/catalog.py: its repeats are averaged", name)
    how = declared.pool if declared else Pool.MEAN
    if how is Pool.GEOMETRIC and min(values) > 0:
        return geometric_mean(values)
    if how is Pool.SUM:
        return float(sum(values))
    if how is Pool.MIN:
        return float(min(values))
    if how is Pool.MAX:
        return float(max(values))
    return float(np.mean(values))


def cost_intervals(usd_per_hour: float, throughput: Interval) -> dict[str, float]:
    """$ per 1k images and images per $ at `usd_per_hour`, from the throughput's interval (each a monotonic function
    of it); a throughput interval reaching 0 leaves the cost's upper end open (not logged)."""
    out = interval_metrics("cost_per_1k_images_usd", throughput.map(
        lambda t: cost_per_1k_images(usd_per_hour, t) if t > 0 else math.inf))
    if usd_per_hour > 0:
        out.update(interval_metrics("images_per_usd", throughput.map(
            lambda t: images_per_usd(usd_per_hour, max(t, 0.0)))))
    return out


def pooled_metrics(repeats: list[tuple[WindowSamples, dict[str, float]]], usd_per_hour: float,
                   workload: Workload = IMAGE) -> dict[str, float]:
    """One trial's metrics from its measured repeats (each repeat's raw samples and metrics), with `repeats` (how
    many were pooled) and `<figure>_ci_low` / `<figure>_ci_high` for every figure that has an interval; its cost at
    `usd_per_hour`, what the nodes that served it cost per hour."""
    all_metrics = [m for _, m in repeats]
    out = {name: _pool(name, [m[name] for m in all_metrics if name in m])
           for name in dict.fromkeys(k for m in all_metrics for k in m)}
    samples = [s for s, _ in repeats]
    out.update(latency_metrics(np.concatenate([s.latency_s for s in samples])))
    if "send_latency_p50_ms" in out:
        out.update(percentile_metrics("send_latency", np.concatenate([s.send_latency_s for s in samples])))
    out["repeats"] = float(len(repeats))
    figures = cluster_bootstrap([s.latency_s * 1e3 for s in samples], _latency_figures)
    for name, interval in zip(LATENCY_FIGURES, figures, strict=True):
        out.update(interval_metrics(name, interval))
    if workload.image_model:
        out.update(cost_metrics(usd_per_hour, out[THROUGHPUT]))
        rates = [m[THROUGHPUT] for m in all_metrics]
        if min(rates) > 0:  # a repeat that served nothing (an overloaded open loop) leaves the rate without an interval
            throughput = log_t_interval(rates)
            out.update(interval_metrics(THROUGHPUT, throughput))
            out.update(cost_intervals(usd_per_hour, throughput))
        return out
    out.update(_pooled_raw_figures(samples, workload))
    for cost, rate, quantity in workload.costs:
        rates = [m.get(rate, 0.0) for m in all_metrics]
        if min(rates) <= 0:
            continue
        out[cost] = cost_per(usd_per_hour, out[rate], quantity)
        interval = log_t_interval(rates)
        out.update(interval_metrics(rate, interval))
        out.update(interval_metrics(cost, interval.map(lambda t, q=quantity: cost_per(usd_per_hour, t, q))))
    return out


def _pooled_raw_figures(samples: list[WindowSamples], workload: Workload) -> dict[str, float]:
    """A workload's per-request figures (a generative trial's TTFT, TPOT, ITL) from every repeat's raw values pooled,
    each family's percentiles with their two-level bootstrap intervals."""
    out: dict[str, float] = {}
    per_repeat = [workload.raw_figures(s) for s in samples]
    for family in dict.fromkeys(f for raw in per_repeat for f in raw):
        groups = [raw.get(family, np.zeros(0)) * 1e3 for raw in per_repeat]
        pooled = np.concatenate(groups)
        if pooled.size == 0:
            continue
        names = (*(f"{family}_p{p}_ms" for p in PERCENTILES), f"{family}_mean_ms")
        out.update(zip(names, _latency_figures(pooled).tolist(), strict=True))
        if all(g.size for g in groups):
            for name, interval in zip(names, cluster_bootstrap(groups, _latency_figures), strict=True):
                out.update(interval_metrics(name, interval))
    return out

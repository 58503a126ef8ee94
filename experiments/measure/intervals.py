"""95 % intervals for a trial measured several times (`experiment.repeats`), and whether two of them overlap.

Two methods, one per kind of figure (docs/confidence-intervals.md):
- a statistic of the raw latencies (a percentile, the mean): a two-level (cluster) bootstrap. Each resample draws
  the repeats with replacement, then each drawn repeat's requests with replacement, and computes the statistic on
  them pooled; the interval is the 2.5th and 97.5th percentile of the resampled statistics. The outer level carries
  the repeat-to-repeat spread (a server that came up slower, a noisy neighbour), the inner one the sampling noise of
  each repeat's requests. Seeded: the same samples give the same interval.
- one figure per repeat (throughput): Student's t-interval on the logarithms of the repeats' values, mean ± t(0.975,
  n-1) · s / √n, taken back with exp: an interval for their geometric mean. A throughput varies by factors (a server
  10 % slower), and the interval stays above 0, so the cost that follows from it (price / throughput) has one too.
  Few repeats make it wide (t is 12.7 for two, 4.3 for three): that is the honest width of so little evidence.

No Ray or MLflow here: plain numbers in, intervals out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 1000  # bootstrap resamples: the order Efron and Tibshirani advise for percentile intervals
SEED = 20261126  # fixed, so a report built twice from the same samples shows the same intervals
CI_LOW, CI_HIGH = "_ci_low", "_ci_high"  # metric name suffixes: latency_p99_ms_ci_low, latency_p99_ms_ci_high


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        """Whether the two share a value: overlapping 95 % intervals cannot tell their figures apart."""
        return self.low <= other.high and other.low <= self.high

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def map(self, fn: Callable[[float], float]) -> Interval:
        """The interval of `fn` of the figure, for a monotonic `fn` (e.g. $ per 1k images from img/s: decreasing)."""
        a, b = fn(self.low), fn(self.high)
        return Interval(min(a, b), max(a, b))


def metric_names(name: str) -> tuple[str, str]:
    """The metric names of `name`'s interval ends."""
    return name + CI_LOW, name + CI_HIGH


def interval_metrics(name: str, interval: Interval) -> dict[str, float]:
    """`name`'s interval as two metrics; an end that is not finite (a cost with no throughput) is left out."""
    low, high = metric_names(name)
    return {k: v for k, v in ((low, interval.low), (high, interval.high)) if math.isfinite(v)}


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """Student's t-interval for the mean of `values` (at least two)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError("a t-interval needs at least two values")
    half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return Interval(float(x.mean() - half), float(x.mean() + half))


def log_t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The t-interval of the logarithms of `values` (all > 0), back on their scale: for their geometric mean."""
    x = np.asarray(values, dtype=float)
    if (x <= 0).any():
        raise ValueError("a log-scale interval needs values > 0")
    return t_interval(np.log(x), level).map(math.exp)


def geometric_mean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def cluster_bootstrap(groups: Sequence[np.ndarray], statistic: Callable[[np.ndarray], np.ndarray],
                      level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED) -> list[Interval]:
    """Percentile intervals of `statistic` (samples -> a vector of figures) by a two-level bootstrap over `groups`
    (one array of samples per repeat): repeats drawn with replacement, then each drawn repeat's samples."""
    sizes = np.array([np.size(g) for g in groups])
    if sizes.size == 0 or (sizes == 0).any():
        raise ValueError("every repeat needs at least one sample")
    pooled = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    starts = np.cumsum(sizes) - sizes
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(resamples):
        picked = rng.integers(0, sizes.size, sizes.size)
        size = np.repeat(sizes[picked], sizes[picked])  # each drawn repeat's size, once per sample drawn from it
        within = (rng.random(size.size) * size).astype(np.int64)
        drawn.append(statistic(pooled[np.repeat(starts[picked], sizes[picked]) + within]))
    ends = np.percentile(np.asarray(drawn, dtype=float), [50 * (1 - level), 50 * (1 + level)], axis=0)
    return [Interval(float(lo), float(hi)) for lo, hi in zip(np.atleast_1d(ends[0]), np.atleast_1d(ends[1]),
                                                              strict=True)]

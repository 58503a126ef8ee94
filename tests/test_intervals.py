"""The 95 % intervals of a trial measured several times (experiments/measure/intervals.py, pooled.py) checked against
known distributions, and the report's overlap verdict (experiments/report/noise.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.config.prices import cost_per_1k_images
from experiments.measure.intervals import (
    Interval,
    cluster_bootstrap,
    geometric_mean,
    interval_metrics,
    log_t_interval,
    t_interval,
)
from experiments.measure.pooled import pooled_metrics
from experiments.measure.samples import WindowSamples
from experiments.report.noise import noise_line, runner_up

# Student's t, 97.5th percentile, for 1 and 2 degrees of freedom (any t table).
T_975 = {1: 12.706204736, 2: 4.302652730}
LOGNORMAL_P50, LOGNORMAL_P99 = 1.0, math.exp(2.326347874)  # quantiles of exp(N(0, 1))


def test_the_t_interval_is_the_textbook_formula() -> None:
    low, high = t_interval([1.0, 2.0, 3.0]).low, t_interval([1.0, 2.0, 3.0]).high  # mean 2, s = 1, n = 3
    assert (low, high) == pytest.approx((2 - T_975[2] / math.sqrt(3), 2 + T_975[2] / math.sqrt(3)), rel=1e-8)
    two = t_interval([10.0, 12.0])  # mean 11, s = sqrt(2), n = 2
    assert (two.low, two.high) == pytest.approx((11 - T_975[1], 11 + T_975[1]), rel=1e-8)
    with pytest.raises(ValueError, match="at least two"):
        t_interval([1.0])


def test_the_t_interval_covers_a_normal_mean_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    hits = [t_interval(rng.normal(100.0, 15.0, 3)).contains(100.0) for _ in range(4000)]
    assert np.mean(hits) == pytest.approx(0.95, abs=0.015)


def test_the_log_scale_interval_is_the_t_interval_of_the_logarithms_and_covers_a_lognormal_median() -> None:
    values = [100.0, 110.0, 120.0]
    logs = np.log(values)
    half = T_975[2] * logs.std(ddof=1) / math.sqrt(3)
    found = log_t_interval(values)
    assert (found.low, found.high) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert found.low > 0 and found.contains(geometric_mean(values))
    rng = np.random.default_rng(2)  # throughputs spread by factors around 400 img/s, the median of exp(N(log 400, .1))
    hits = [log_t_interval(np.exp(rng.normal(math.log(400.0), 0.1, 3))).contains(400.0) for _ in range(4000)]
    assert np.mean(hits) == pytest.approx(0.95, abs=0.015)
    with pytest.raises(ValueError, match="values > 0"):
        log_t_interval([0.0, 1.0])


def test_the_cluster_bootstrap_covers_lognormal_quantiles_close_to_95_percent() -> None:
    """Three repeats of 300 lognormal latencies, 160 seeded experiments: the two-level bootstrap's intervals of the
    pooled p50 and p99 cover the true quantiles about 95 % of the time (a little more: with repeats that agree, the
    within-repeat noise is counted at both levels, so it errs wide: 0.975 for both here)."""
    hits = np.zeros(2)
    for seed in range(160):
        rng = np.random.default_rng(seed)
        repeats = [np.exp(rng.normal(0.0, 1.0, 300)) for _ in range(3)]
        p50, p99 = cluster_bootstrap(repeats, lambda x: np.percentile(x, [50, 99]), resamples=200, seed=seed)
        hits += [p50.contains(LOGNORMAL_P50), p99.contains(LOGNORMAL_P99)]
    coverage = hits / 160
    assert all(0.92 <= c <= 0.995 for c in coverage), coverage


def test_the_bootstrap_is_seeded_and_widens_with_the_spread_between_repeats() -> None:
    rng = np.random.default_rng(7)
    alike = [rng.normal(10.0, 1.0, 500) for _ in range(3)]
    apart = [alike[0], alike[1], alike[2] + 3.0]  # one repeat on a slower server

    def median(x: np.ndarray) -> np.ndarray:
        return np.percentile(x, [50])

    (first,), (again,) = cluster_bootstrap(alike, median), cluster_bootstrap(alike, median)
    assert first == again, "the same samples give the same interval"
    (wide,) = cluster_bootstrap(apart, median)
    assert wide.high - wide.low > 5 * (first.high - first.low)
    assert first.contains(float(np.median(np.concatenate(alike))))


def test_intervals_overlap_map_and_become_metrics() -> None:
    a, b, c = Interval(1.0, 2.0), Interval(2.0, 3.0), Interval(2.5, 4.0)
    assert a.overlaps(b) and b.overlaps(a) and not a.overlaps(c) and not c.overlaps(a)
    assert Interval(100.0, 200.0).map(lambda t: 1 / t) == Interval(0.005, 0.01)  # decreasing: ends swap
    assert interval_metrics("latency_p99_ms", a) == {"latency_p99_ms_ci_low": 1.0, "latency_p99_ms_ci_high": 2.0}
    assert interval_metrics("cost_per_1k_images_usd", Interval(0.1, math.inf)) == {"cost_per_1k_images_usd_ci_low": 0.1}


def _samples(latencies_ms: np.ndarray) -> WindowSamples:
    n = latencies_ms.size
    intended = np.linspace(0.0, 1.0, n, endpoint=False)
    return WindowSamples(0.0, 1.0, 1, intended, intended.copy(), intended + latencies_ms / 1e3, np.full(n, np.nan),
                         np.zeros(n), completed=n, sent=n)


def test_repeats_pool_raw_samples_and_price_the_throughput_interval() -> None:
    rng = np.random.default_rng(3)
    latencies = [rng.lognormal(2.0, 0.5, 400) for _ in range(3)]
    per_repeat = [{"throughput_img_s": thr, "request_count": 400.0, "stable": stable, "overloaded": 0.0,
                   "server_count_ratio": ratio, "cost_per_1k_images_usd": cost_per_1k_images(0.36, thr)}
                  for thr, stable, ratio in ((100.0, 1.0, 1.0), (110.0, 0.0, 1.02), (120.0, 1.0, 0.98))]
    m = pooled_metrics([(_samples(ms), metrics) for ms, metrics in zip(latencies, per_repeat, strict=True)], 0.36)
    assert m["repeats"] == 3 and m["request_count"] == 1200 and m["stable"] == 0, "counts sum, a caveat sticks"
    assert m["latency_p99_ms"] == pytest.approx(np.percentile(np.concatenate(latencies), 99), rel=1e-6)
    assert m["latency_p99_ms_ci_low"] < m["latency_p99_ms"] < m["latency_p99_ms_ci_high"]
    mean = geometric_mean([100.0, 110.0, 120.0])
    assert m["server_count_ratio"] == pytest.approx(1.0) and m["throughput_img_s"] == pytest.approx(mean)
    thr = log_t_interval([100.0, 110.0, 120.0])
    assert (m["throughput_img_s_ci_low"], m["throughput_img_s_ci_high"]) == pytest.approx((thr.low, thr.high))
    assert m["cost_per_1k_images_usd"] == pytest.approx(cost_per_1k_images(0.36, mean)), "from that throughput"
    costs = [r["cost_per_1k_images_usd"] for r in per_repeat]
    assert m["cost_per_1k_images_usd"] == pytest.approx(geometric_mean(costs)), "the repeats' costs summed up alike"
    assert m["cost_per_1k_images_usd_ci_low"] == pytest.approx(cost_per_1k_images(0.36, thr.high))
    assert m["cost_per_1k_images_usd_ci_high"] == pytest.approx(cost_per_1k_images(0.36, thr.low))


def _point(tier: str, cost: float, low: float, high: float, batch: int = 8) -> dict:
    return {"tier": tier, "stack": "triton_onnx/grpc/tensor", "batch_size": batch, "load": "c4",
            "cost_per_1k_usd": cost, "cost_per_1k_usd_ci_low": low, "cost_per_1k_usd_ci_high": high}


def _verdict(ranked: pd.DataFrame) -> str | None:
    pick = ranked.iloc[0]
    return noise_line(pick, runner_up(ranked, pick), "cost_per_1k_usd", lambda v: f"${v:.6f}", " per 1k images", "",
                      lambda row: f"{row['tier']} b{row['batch_size']}", str)


def test_the_runner_up_within_noise_of_the_pick_is_said_so_and_one_clear_of_it_too() -> None:
    # The pick's second-best point on its own tier is passed over for the best of another tier.
    overlap = pd.DataFrame([_point("a100", 0.00025, 0.000238, 0.000263), _point("a100", 0.00026, 0.00025, 0.00027, 1),
                            _point("rtx4090", 0.000263, 0.000238, 0.000294)])
    line = _verdict(overlap)
    assert line.startswith("Within noise: the runner-up, rtx4090 b8, at $0.000263 per 1k images (95 % interval "
                           "$0.000238–$0.000294), overlaps the pick's interval ($0.000238–$0.000263)")
    assert "tier rtx4090 is within noise of tier a100" in line
    apart = pd.DataFrame([_point("a100", 0.00025, 0.000238, 0.000263), _point("rtx4090", 0.000333, 0.000323, 0.000345)])
    line = _verdict(apart)
    assert line.startswith("Beyond noise: the runner-up, rtx4090 b8") and "within noise" not in line
    one_tier = pd.DataFrame([_point("a100", 0.00025, 0.000238, 0.000263), _point("a100", 0.00026, 0.00025, 0.00027, 1)])
    assert "the two operating points are within noise of each other" in _verdict(one_tier)
    measured_once = overlap.drop(columns=["cost_per_1k_usd_ci_low", "cost_per_1k_usd_ci_high"])
    assert _verdict(measured_once) is None and _verdict(overlap.iloc[:1]) is None

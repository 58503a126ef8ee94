"""Summaries come from the raw samples: exact percentiles, throughput over the window, the cost formula."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.measure.metrics import cost_metrics, is_stable, server_reported_metrics, window_metrics, windows_stable
from experiments.measure.samples import WindowSamples
from serving.clients.ray_serve_http import parse_server_timing


def _samples(latencies_ms: list[float], start: float = 100.0, end: float = 110.0, batch: int = 4,
             actor: int = 0) -> WindowSamples:
    n = len(latencies_ms)
    sent = np.linspace(start, end - 1, n)
    return WindowSamples(start, end, batch, intended_s=sent, send_s=sent, done_s=sent + np.asarray(latencies_ms) / 1e3,
                         server_ms=np.full(n, np.nan), actor=np.full(n, actor))


def test_percentiles_throughput_and_cost() -> None:
    s = _samples([float(i) for i in range(1, 101)])  # 1..100 ms, 100 requests of 4 images in 10 s
    m = window_metrics(s, price_per_hour_usd=3.6)
    assert m["latency_p50_ms"] == pytest.approx(50.5)
    assert m["latency_p99_ms"] == pytest.approx(99.01)
    assert m["latency_mean_ms"] == pytest.approx(50.5)
    assert m["requests_s"] == pytest.approx(10.0) and m["throughput_img_s"] == pytest.approx(40.0)
    # $3.6/h = $0.001/s; 40 img/s -> $0.000025 per image -> $0.025 per 1k images; 40,000 images per $
    assert m["cost_per_1k_images_usd"] == pytest.approx(0.025)
    assert m["images_per_usd"] == pytest.approx(40_000)


def test_free_machine_has_zero_cost_and_no_images_per_dollar() -> None:
    assert cost_metrics(0.0, 10.0) == {"cost_per_1k_images_usd": 0.0}


def test_merge_keeps_every_raw_sample() -> None:
    a = _samples([10, 20, 30], actor=0)
    b = _samples([1000], actor=1)
    merged = WindowSamples.merge([a, b])
    assert merged.requests == 4
    assert sorted(merged.latency_s * 1e3) == pytest.approx([10, 20, 30, 1000])
    # The merged p50 is the p50 of all samples, not the mean of per-actor p50s (20 and 1000).
    assert window_metrics(merged, 1.0)["latency_p50_ms"] == pytest.approx(25.0)


def test_merge_refuses_windows_that_are_neither_the_same_nor_consecutive() -> None:
    with pytest.raises(ValueError):
        WindowSamples.merge([_samples([1.0]), _samples([1.0], start=101.0)])
    with pytest.raises(ValueError):
        WindowSamples.merge([_samples([1.0], 100, 110), _samples([1.0], 111, 121)])


def test_consecutive_windows_merge_into_one_longer_window() -> None:
    merged = WindowSamples.merge([_samples([1.0, 2.0], 100, 110), _samples([3.0, 4.0], 110, 120)])
    assert (merged.window_start, merged.window_end, merged.requests) == (100, 120, 4)
    assert window_metrics(merged, 1.0)["requests_s"] == pytest.approx(0.2)


def test_stability_rule_is_every_value_within_percent_of_the_mean() -> None:
    assert is_stable([100, 105, 95], 10)
    assert not is_stable([100, 100, 125], 10)  # mean 108.3: 125 is 15 % off
    assert is_stable([100, 108, 92], 10) and not is_stable([100, 112, 88], 10)


def test_windows_are_stable_only_when_throughput_and_latency_agree() -> None:
    steady = [_samples([10.0] * 50), _samples([10.5] * 50), _samples([9.8] * 50)]
    assert windows_stable(steady, percent=10, latency_percentile=95)
    slower = [_samples([10.0] * 50), _samples([10.0] * 50), _samples([14.0] * 50)]  # same rate, latency drifts
    assert not windows_stable(slower, percent=10, latency_percentile=95)
    fewer = [_samples([10.0] * 50), _samples([10.0] * 50), _samples([10.0] * 35)]  # same latency, rate drops
    assert not windows_stable(fewer, percent=10, latency_percentile=95)


def test_the_replica_report_is_parsed_and_batches_average_as_triton_counts_them() -> None:
    report = parse_server_timing("preprocess;dur=1.5, infer;dur=8.25, batch;desc=8")
    assert report.ms == pytest.approx(9.75) and report.executed_images == 8
    assert parse_server_timing(None) is None
    # Requests of 1 image: 8 rode in one pass of 8, 2 ran alone -> 10 images in 3 passes.
    s = _samples([10.0] * 10, batch=1)
    s.server_ms = np.full(10, 5.0)
    s.server_batch = np.array([8.0] * 8 + [1.0] * 2)
    m = server_reported_metrics(s)
    assert m["server_replica_ms"] == pytest.approx(5.0)
    assert m["server_batch_avg"] == pytest.approx(10 / 3)

"""Summaries come from the raw samples: exact percentiles, throughput over the window, the cost formula."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.metrics import cost_metrics, window_metrics
from experiments.samples import WindowSamples


def _samples(latencies_ms: list[float], start: float = 100.0, end: float = 110.0, batch: int = 4,
             actor: int = 0) -> WindowSamples:
    n = len(latencies_ms)
    return WindowSamples(start, end, batch, np.linspace(start, end - 1, n), np.asarray(latencies_ms) / 1e3,
                         np.full(n, actor))


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


def test_merge_refuses_different_windows() -> None:
    with pytest.raises(ValueError):
        WindowSamples.merge([_samples([1.0]), _samples([1.0], start=101.0)])

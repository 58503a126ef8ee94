"""Summaries computed from raw samples: latency percentiles, throughput, cost per image."""

from __future__ import annotations

import numpy as np

from experiments.samples import WindowSamples

PERCENTILES = (50, 90, 95, 99)


def latency_metrics(latency_s: np.ndarray) -> dict[str, float]:
    if latency_s.size == 0:
        return {}
    ms = latency_s * 1e3
    values = np.percentile(ms, PERCENTILES)
    out = {f"latency_p{p}_ms": float(v) for p, v in zip(PERCENTILES, values, strict=True)}
    out.update(latency_mean_ms=float(ms.mean()), latency_min_ms=float(ms.min()), latency_max_ms=float(ms.max()))
    return out


def throughput_metrics(samples: WindowSamples) -> dict[str, float]:
    requests_s = samples.requests / samples.duration_s
    return {"requests_s": requests_s, "throughput_img_s": requests_s * samples.images_per_request}


def cost_metrics(price_per_hour_usd: float, throughput_img_s: float) -> dict[str, float]:
    """$ per 1k images = price / 3600 / throughput x 1000; images per $ is its inverse (absent when free)."""
    if throughput_img_s <= 0:
        return {}
    out = {"cost_per_1k_images_usd": price_per_hour_usd / 3600.0 / throughput_img_s * 1000.0}
    if price_per_hour_usd > 0:
        out["images_per_usd"] = throughput_img_s * 3600.0 / price_per_hour_usd
    return out


def window_metrics(samples: WindowSamples, price_per_hour_usd: float) -> dict[str, float]:
    metrics = {**latency_metrics(samples.latency_s), **throughput_metrics(samples),
               "request_count": float(samples.requests)}
    metrics.update(cost_metrics(price_per_hour_usd, metrics["throughput_img_s"]))
    return metrics

"""An image trial's own figures: images served per second (requests answered inside the windows x images per
request) and what an image costs at that rate."""

from __future__ import annotations

from typing import Any

from serving.metric import cost_per


def throughput(samples: Any) -> float:
    """Images answered inside the window per second, whenever scheduled (perf_analyzer's and LoadGen's count).
    `samples`: `experiments.measure.samples.WindowSamples`."""
    return samples.completed / samples.duration_s * samples.images_per_request


def cost_figures(usd_per_hour: float, throughput_img_s: float) -> dict[str, float]:
    """$ per 1k images and images per $ (none when nothing was served; no images per $ on a free tier)."""
    if throughput_img_s <= 0:
        return {}
    out = {"cost_per_1k_images_usd": cost_per(usd_per_hour, throughput_img_s, 1000.0)}
    if usd_per_hour > 0:
        out["images_per_usd"] = throughput_img_s * 3600.0 / usd_per_hour
    return out


def window_figures(samples: Any, usd_per_hour: float, slo: Any = None) -> dict[str, float]:
    rate = throughput(samples)
    return {"throughput_img_s": rate, **cost_figures(usd_per_hour, rate)}

"""An image trial's own figures: images served per second (requests answered inside the windows x images per
request) and what an image costs at that rate, and the declarations of every figure counted in images, for the metric
catalog."""

from __future__ import annotations

from typing import Any

from serving.metric import Metric, Pool, cost_per


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


METRICS: tuple[Metric, ...] = (
    # served, and priced (window_figures above)
    Metric("throughput_img_s", "img/s", Pool.GEOMETRIC, "images answered inside the windows per second"),
    Metric("cost_per_1k_images_usd", "USD", Pool.PRICED,
           "price per hour (x endpoint_nodes for an endpoint) / 3600 / throughput x 1000"),
    Metric("images_per_usd", "img/USD", Pool.PRICED, "images a dollar buys at this throughput"),
    # served well in time: the engine counts them for an image model's trials (experiments.measure.metrics.
    # outcome_metrics, experiments.run.trial)
    Metric("goodput_img_s", "img/s", Pool.GEOMETRIC, "images of the requests answered well within "
                                                     "experiment.slo.deadline_ms (else slo.p99_ms), per second"),
    Metric("cost_per_1k_good_images_usd", "USD", Pool.MEAN, "price per hour (x endpoint_nodes) / 3600 / goodput "
                                                            "x 1000: what an image answered well in time costs"),
    # what the requests carried: the image clients' pool (serving.clients.base.PoolStats, from the corpus: corpus.py)
    Metric("distinct_images", "count", Pool.MIN, "distinct images the client's distinct requests carry"),
    Metric("payload_bytes_per_image", "bytes", Pool.MEAN, "image data per image, the mean over the distinct requests"),
    Metric("payload_image_bytes_p50", "bytes", Pool.MEAN, "the median image's data over the distinct requests"),
    Metric("payload_image_bytes_min", "bytes", Pool.MIN, "the smallest image's data"),
    Metric("payload_image_bytes_max", "bytes", Pool.MAX, "the largest image's data"),
)

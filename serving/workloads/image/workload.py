"""Image classification as a workload: batches of images, priced per 1k images."""

from __future__ import annotations

from serving.workloads.image import figures
from serving.workloads.image.formats import InputFormat
from serving.workloads.workload import Workload

WORKLOAD = Workload(
    name="image",
    unit="image",
    per=1e3,
    request_formats=tuple(InputFormat),
    throughput="throughput_img_s",
    cost="cost_per_1k_images_usd",
    latency="latency_p99_ms",
    slo_targets=("p99_ms", "deadline_ms"),
    metrics=figures.METRICS,
    figures=figures.window_figures,
    throughput_of=figures.throughput,
    image_model=True,
)

"""TorchServe's Prometheus metrics: its frontend's per-model counters and the handler's own, cumulative; the
per-request breakdown and the images served between two snapshots. Read from a TorchServe tierbench launched
(`serving.torchserve`) and from one it measures as an endpoint (`serving.endpoint`, kind torchserve).

The frontend counts every inference request that reached a worker (`ts_inference_requests_total`, REST and gRPC
alike) and sums, per REST request only, its time from arrival to answer and its time queued
(`ts_inference_latency_microseconds`, `ts_queue_latency_microseconds`: gRPC requests add nothing to either). The
handler counts images, forward passes and requests (served or rejected); they reach the endpoint because the
metrics config declares them (`serving.torchserve.config.metrics_yaml`).
"""

from __future__ import annotations

from serving import prometheus

IMAGES_SERVED = "ImagesServed"  # images through the model
FORWARD_PASSES = "ForwardPasses"  # handler calls that ran the model
REQUESTS_SERVED = "RequestsServed"  # requests answered with outputs
REQUESTS_REJECTED = "RequestsRejected"  # requests answered 400
HANDLER_COUNTERS = (IMAGES_SERVED, FORWARD_PASSES, REQUESTS_SERVED, REQUESTS_REJECTED)
REQUESTS = "ts_inference_requests_total"
LATENCY_US = "ts_inference_latency_microseconds"
QUEUE_US = "ts_queue_latency_microseconds"
COUNTERS = (REQUESTS, LATENCY_US, QUEUE_US, *HANDLER_COUNTERS)


def parse_counters(text: str, model: str) -> dict[str, float]:
    """Each counter summed over the model's versions (the frontend's label is `model_name`, the handler's
    `ModelName`); other models are ignored."""
    return prometheus.sum_counters(text, COUNTERS, [f'model_name="{model}"', f'ModelName="{model}"'])


def scrape(metrics_url: str, model: str, timeout_s: float = 5.0) -> dict[str, float]:
    return parse_counters(prometheus.read(metrics_url, timeout_s), model)


def breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per request between two snapshots: the frontend's time from arrival to answer and queued (ms: only when the
    REST sums moved, a gRPC trial adds nothing to them), and the mean images per forward pass."""
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in COUNTERS}
    requests = delta[REQUESTS]
    if requests <= 0:
        return {}
    out = {"server_requests": requests}
    if delta[LATENCY_US] > 0:
        out["server_request_ms"] = delta[LATENCY_US] / requests / 1000.0
        out["server_queue_ms"] = delta[QUEUE_US] / requests / 1000.0
    if delta[FORWARD_PASSES] > 0:
        out["server_batch_avg"] = delta[IMAGES_SERVED] / delta[FORWARD_PASSES]
    return out


def served_images(before: dict[str, float], after: dict[str, float]) -> float:
    """Images the handler ran through the model between two snapshots."""
    return after.get(IMAGES_SERVED, 0.0) - before.get(IMAGES_SERVED, 0.0)

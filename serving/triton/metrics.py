"""Triton's Prometheus metrics: cumulative per-model counters, and the per-request breakdown between two
snapshots (perf_analyzer's server-side view: queue, compute input / infer / output, whole request)."""

from __future__ import annotations

import re
import urllib.request

COUNTERS = (
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>[-+0-9.eE]+)$')
BREAKDOWN = {
    "server_request_ms": "nv_inference_request_duration_us",
    "server_queue_ms": "nv_inference_queue_duration_us",
    "server_compute_input_ms": "nv_inference_compute_input_duration_us",
    "server_compute_infer_ms": "nv_inference_compute_infer_duration_us",
    "server_compute_output_ms": "nv_inference_compute_output_duration_us",
}


def parse_counters(text: str, model: str) -> dict[str, float]:
    """Sum each counter over the model's versions (other models on the server are ignored)."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match and match["name"] in totals and f'model="{model}"' in match["labels"]:
            totals[match["name"]] += float(match["value"])
    return totals


def scrape(metrics_url: str, model: str, timeout_s: float = 5.0) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
        return parse_counters(response.read().decode(), model)


def breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean server-side time per request (ms) between two snapshots, and the mean executed batch."""
    requests = after["nv_inference_request_success"] - before["nv_inference_request_success"]
    if requests <= 0:
        return {}
    out = {name: (after[c] - before[c]) / requests / 1000.0 for name, c in BREAKDOWN.items()}
    out["server_requests"] = requests
    executions = after["nv_inference_exec_count"] - before["nv_inference_exec_count"]
    if executions > 0:
        out["server_batch_avg"] = (after["nv_inference_count"] - before["nv_inference_count"]) / executions
    return out


def served_images(before: dict[str, float], after: dict[str, float]) -> float:
    """Images inferred between two snapshots (`nv_inference_count` counts a batch of n as n)."""
    return after["nv_inference_count"] - before["nv_inference_count"]

"""Triton's Prometheus metrics: cumulative per-model counters, and the per-request breakdown between two
snapshots (perf_analyzer's server-side view: queue, compute input / infer / output, whole request). Read from a
Triton tierbench launched (`serving.triton`) and from one it measures as an endpoint (`serving.endpoint`)."""

from __future__ import annotations

from serving import prometheus

COUNTERS = (
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
BREAKDOWN = {
    "server_request_ms": "nv_inference_request_duration_us",
    "server_queue_ms": "nv_inference_queue_duration_us",
    "server_compute_input_ms": "nv_inference_compute_input_duration_us",
    "server_compute_infer_ms": "nv_inference_compute_infer_duration_us",
    "server_compute_output_ms": "nv_inference_compute_output_duration_us",
}


def parse_counters(text: str, model: str) -> dict[str, float]:
    """Sum each counter over the model's versions (other models on the server are ignored)."""
    return prometheus.sum_counters(text, COUNTERS, [f'model="{model}"'])


def scrape(metrics_url: str, model: str, timeout_s: float = 5.0) -> dict[str, float]:
    return parse_counters(prometheus.read(metrics_url, timeout_s), model)


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

"""Triton's Prometheus metrics: cumulative per-model counters, and the per-request breakdown between two
snapshots (perf_analyzer's server-side view: queue, compute input / infer / output, whole request). Read from a
Triton tierbench launched (`serving.triton`) and from one it measures as an endpoint (`serving.endpoint`).

tierbench's Python-backend model adds its own counters (`tierbench_backend_*`, serving/triton/python_backend/model.py):
what of Triton's infer time went to gathering the inputs, the ONNX Runtime run and the responses, and so what was
the server's exchange with the stub process. A server without them (NVIDIA's native backends) gets none of these."""

from __future__ import annotations

from serving import prometheus

COUNTERS = (
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
BACKEND_REQUESTS = "tierbench_backend_requests"
BACKEND_BREAKDOWN = {
    "server_backend_input_ms": "tierbench_backend_input_us",
    "server_backend_run_ms": "tierbench_backend_run_us",
    "server_backend_output_ms": "tierbench_backend_output_us",
}
BREAKDOWN = {
    "server_request_ms": "nv_inference_request_duration_us",
    "server_queue_ms": "nv_inference_queue_duration_us",
    "server_compute_input_ms": "nv_inference_compute_input_duration_us",
    "server_compute_infer_ms": "nv_inference_compute_infer_duration_us",
    "server_compute_output_ms": "nv_inference_compute_output_duration_us",
}


def parse_counters(text: str, model: str) -> dict[str, float]:
    """Sum each counter over the model's versions (other models on the server are ignored)."""
    return prometheus.sum_counters(text, (*COUNTERS, BACKEND_REQUESTS, *BACKEND_BREAKDOWN.values()),
                                   [f'model="{model}"'])


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
    return {**out, **backend_breakdown(before, after, out["server_compute_infer_ms"])}


def backend_breakdown(before: dict[str, float], after: dict[str, float], infer_ms: float) -> dict[str, float]:
    """tierbench's Python model's own time per request between two snapshots, and the rest of Triton's infer time
    (`server_backend_stub_ms`: the server handing requests to the stub process and taking its responses back)."""
    executed = after.get(BACKEND_REQUESTS, 0.0) - before.get(BACKEND_REQUESTS, 0.0)
    if executed <= 0:
        return {}
    out = {name: (after[c] - before[c]) / executed / 1000.0 for name, c in BACKEND_BREAKDOWN.items()}
    out["server_backend_stub_ms"] = max(0.0, infer_ms - sum(out.values()))
    return out


def served_images(before: dict[str, float], after: dict[str, float]) -> float:
    """Images inferred between two snapshots (`nv_inference_count` counts a batch of n as n)."""
    return after["nv_inference_count"] - before["nv_inference_count"]

"""Server-side breakdown from Triton's Prometheus counters: parsing and per-request deltas."""

from __future__ import annotations

import pytest

from serving.oip.triton_metrics import breakdown, parse_counters

SCRAPE = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="resnet18",version="1"} {requests}
nv_inference_request_success{model="other",version="1"} 999
nv_inference_count{model="resnet18",version="1"} {images}
nv_inference_exec_count{model="resnet18",version="1"} {executions}
nv_inference_request_duration_us{model="resnet18",version="1"} {request_us}
nv_inference_queue_duration_us{model="resnet18",version="1"} {queue_us}
nv_inference_compute_input_duration_us{model="resnet18",version="1"} {input_us}
nv_inference_compute_infer_duration_us{model="resnet18",version="1"} {infer_us}
nv_inference_compute_output_duration_us{model="resnet18",version="1"} {output_us}
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
"""


def _scrape(**values: float) -> dict[str, float]:
    text = SCRAPE
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return parse_counters(text, "resnet18")


def test_breakdown_is_per_request_between_snapshots() -> None:
    before = _scrape(requests=10, images=80, executions=10, request_us=100_000, queue_us=5_000, input_us=2_000,
                     infer_us=80_000, output_us=1_000)
    after = _scrape(requests=110, images=880, executions=60, request_us=1_100_000, queue_us=205_000,
                    input_us=52_000, infer_us=830_000, output_us=11_000)
    assert before["nv_inference_request_success"] == 10  # the other model's 999 is not ours
    b = breakdown(before, after)
    assert b["server_requests"] == 100
    assert b["server_request_ms"] == pytest.approx(10.0)  # 1,000,000 us over 100 requests
    assert b["server_queue_ms"] == pytest.approx(2.0)
    assert b["server_compute_input_ms"] == pytest.approx(0.5)
    assert b["server_compute_infer_ms"] == pytest.approx(7.5)
    assert b["server_compute_output_ms"] == pytest.approx(0.1)
    assert b["server_batch_avg"] == pytest.approx(16.0)  # 800 images in 50 executions: dynamic batching


def test_no_request_in_between_gives_no_breakdown() -> None:
    same = _scrape(requests=5, images=5, executions=5, request_us=1, queue_us=1, input_us=1, infer_us=1,
                   output_us=1)
    assert breakdown(same, same) == {}

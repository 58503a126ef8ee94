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


def test_the_python_models_own_counters_split_tritons_infer_time(tmp_path) -> None:
    """Two stub processes' totals add up (another model's are not counted); what Triton counts as infer time beyond
    the model's parts is the stub's exchange with the server."""
    import json

    from serving.triton import backend_counters

    def snapshot(done: int, run_us: int, infer_us: int) -> dict[str, float]:
        for pid in (100, 101):
            (tmp_path / f"{pid}.json").write_text(json.dumps({
                "model": "resnet18", "tierbench_backend_requests": done, "tierbench_backend_input_us": done * 100,
                "tierbench_backend_run_us": run_us, "tierbench_backend_output_us": done * 100}))
        (tmp_path / "102.json").write_text(json.dumps({"model": "other", "tierbench_backend_requests": 999}))
        return {**_scrape(requests=2 * done, images=2 * done, executions=2 * done, request_us=0, queue_us=0,
                          input_us=0, infer_us=infer_us, output_us=0),
                **backend_counters.read(tmp_path, "resnet18")}

    before = snapshot(done=10, run_us=50_000, infer_us=60_000)
    after = snapshot(done=60, run_us=300_000, infer_us=760_000)
    b = backend_counters.breakdown(before, after, breakdown(before, after)["server_compute_infer_ms"])  # 100 in both
    assert b["server_backend_input_ms"] == pytest.approx(0.1) and b["server_backend_output_ms"] == pytest.approx(0.1)
    assert b["server_backend_run_ms"] == pytest.approx(5.0)
    assert b["server_backend_stub_ms"] == pytest.approx(7.0 - 5.2)
    native = _scrape(requests=10, images=10, executions=10, request_us=0, queue_us=0, input_us=0, infer_us=1,
                     output_us=0)
    assert backend_counters.breakdown(native, {**native, "nv_inference_request_success": 20}, 1.0) == {}  # none ours

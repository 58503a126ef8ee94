"""Open-loop load and the SLO search on a real Triton, end to end into MLflow, with each load engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from experiments.config.compose import load_config
from experiments.run.sweep import run_sweep
from tests.helpers import premigrated_store

pytestmark = pytest.mark.slow

WINDOW_S = 3


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_poisson_load_and_slo_search_are_logged(engine: str, tmp_path: Path) -> None:
    store = premigrated_store(tmp_path)
    cfg = load_config([
        f"experiment.load_engine={engine}", "sweep_id=open-loop", f"results_dir={tmp_path / 'runs'}",
        f"mlflow.tracking_uri={store}", "model=tiny",
        "experiment.backends=[triton_onnx]", "experiment.protocols=[grpc]", "experiment.input_formats=[tensor]",
        "experiment.batch_sizes=[1]", "experiment.load_mode=poisson", "experiment.request_rates=[20]",
        f"experiment.window_s={WINDOW_S}", "experiment.stability.windows=1", "experiment.warmup_s=0.3",
        "experiment.warmup_requests=2", "experiment.slo.p99_ms=10000", "experiment.slo.max_rate=30",
    ])
    assert run_sweep(cfg) == 0
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("tierbench")
    trials = client.search_runs([exp.experiment_id], "tags.run_level = 'trial'")
    grid = [r for r in trials if "phase" not in r.data.tags]
    (run,) = grid
    assert run.info.run_name == "local/triton_onnx/grpc/tensor/b1/poisson-r20"
    m = run.data.metrics
    assert run.data.params["load_mode"] == "poisson" and m["target_rate_rps"] == 20
    assert run.data.params["load_engine"] == engine and run.data.params["load_engine_requested"] == engine
    assert 10 <= m["achieved_rate_rps"] <= 30  # ~60 Poisson arrivals in the 3 s window
    assert 10 <= m["offered_rate_rps"] <= 30 and m["overloaded"] == 0 and run.data.tags["overloaded"] == "false"
    # A tiny model keeps up with 20 req/s: what was served is what arrived less the requests still in flight at the
    # window's end, which the overload rule (asserted above) bounds. On a busy machine the Python client fell behind
    # by 7 of 58 once (12 %): within that bound. Triton counted the same images between the counter reads at the
    # window's boundaries.
    assert m["throughput_img_s"] == pytest.approx(m["offered_rate_rps"] - m["backlog_growth_requests"] / WINDOW_S)
    assert abs(m["backlog_growth_requests"]) <= 2 * (m["offered_rate_rps"] * WINDOW_S) ** 0.5
    assert m["server_count_ratio"] == pytest.approx(1.0, abs=0.05) and "server_count_mismatch" not in run.data.tags
    # Late sends are among the window's arrivals, and what was sent never exceeds what was scheduled.
    assert m["late_requests"] <= m["request_count"] and m["achieved_rate_rps"] <= m["offered_rate_rps"]
    assert "send_latency_p99_ms" in m
    assert m["latency_p99_ms"] >= m["send_latency_p99_ms"] - 1e-6  # intended-time latency includes any wait

    probes = sorted(r.data.params["request_rate"] for r in trials if r.data.tags.get("phase") == "slo_search")
    # Doubling from the grid's 20 req/s (reused) and capped at the limit. The limit stays low: the Python client
    # sharing 2 cores with another test worker fell behind at 80 req/s once and at 50 req/s once (36 served), and the
    # search then bisected.
    assert probes == ["30.0"]
    (slo,) = client.search_runs([exp.experiment_id], "tags.run_level = 'slo'")
    assert slo.info.run_name == "local/triton_onnx/grpc/tensor/b1/slo-p99-10000ms"
    s = slo.data.metrics
    assert s["slo_met"] == 1 and s["slo_limited"] == 1 and s["slo_max_load"] == 30
    assert s["cost_per_1k_images_at_slo_usd"] == pytest.approx(
        float(slo.data.params["price_per_hour_usd"]) / 3600 / s["slo_max_throughput_img_s"] * 1000)

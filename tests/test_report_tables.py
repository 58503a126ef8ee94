"""The report's tables on a SYNTHETIC sweep (tests/synthetic_sweep.py: round made-up numbers in a temp MLflow store,
loaded by the `store` and `data` fixtures of tests/conftest.py): the runs loaded, prices, exact table values, the SLO
pick, the Pareto frontier, problems, and the cost plot of a point that completed nothing."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from experiments.report import tables
from experiments.report.data import ReportError, load_sweep
from tests import synthetic_sweep as syn
from tests.helpers import tier_prices


def test_runs_load_one_row_per_trial_with_the_latest_ok_run_of_a_rerun(data) -> None:
    assert len(data.trials) == 2 * 12 + 2 * 2 + 1  # ok points, skipped TRT, one failure
    assert data.superseded == 1
    rerun = data.trials[(data.trials["tier"] == "a100") & (data.trials["run_name"] == "a100/pytorch/http/tensor/b1/c1")]
    assert list(rerun["status"]) == ["ok"]
    assert len(data.ok) == 24
    assert data.tiers["rtx4090"].emulated and not data.tiers["a100"].emulated
    assert data.tiers["rtx4090"].label == "rtx4090 (emulated)"


def test_latest_resolves_to_the_last_sweep(store) -> None:
    assert load_sweep(store[0], "tierbench", "latest").sweep_id == syn.SWEEP_ID
    with pytest.raises(ReportError, match="no runs tagged sweep_id='nope'"):
        load_sweep(store[0], "tierbench", "nope")
    with pytest.raises(ReportError, match="no experiment 'other'"):
        load_sweep(store[0], "other", "latest")


def test_prices_come_back_from_the_tier_runs_with_their_sources(data) -> None:
    a100 = data.tiers["a100"].prices
    assert [(p.name, p.usd_per_hour, p.kind) for p in a100] == [("primary", 0.36, ""), ("spot", 0.18, "spot")]
    assert a100[1].source == "test fixture" and a100[1].seen == "2026-01-01"
    assert [p.name for p in data.tiers["rtx4090"].prices] == ["primary"]


def test_p50_and_throughput_by_batch(data) -> None:
    a100 = data.ok[data.ok["tier"] == "a100"]
    p50 = tables.by_batch(a100, tables.P50)
    assert list(p50) == ["c1", "c4"]
    assert p50["c1"].loc["triton_onnx/grpc/tensor", 8] == 50.0
    assert p50["c4"].loc["pytorch/http/tensor", 1] == 50.0
    thr = tables.by_batch(a100, tables.THROUGHPUT)
    assert thr["c4"].loc["triton_onnx/grpc/tensor", 8] == 400.0


def test_grpc_over_http_speedup(data) -> None:
    for tier in ("a100", "rtx4090"):  # rtx4090's p50s are a100's x2: same ratios
        speedup = tables.grpc_speedup(data.ok[data.ok["tier"] == tier])
        assert speedup["c1"].loc["triton_onnx/tensor", 1] == pytest.approx(10 / 8)
        assert speedup["c1"].loc["triton_onnx/tensor", 8] == pytest.approx(40 / 50)
        assert speedup["c4"].loc["triton_onnx/tensor", 1] == pytest.approx(30 / 20)
        assert speedup["c4"].loc["triton_onnx/tensor", 8] == pytest.approx(100 / 80)
        assert list(speedup["c1"].index) == ["triton_onnx/tensor"]  # pytorch has no gRPC pair


def test_concurrency_scaling(data) -> None:
    scaling = tables.concurrency_scaling(data.ok[data.ok["tier"] == "a100"])
    assert scaling[1].loc["triton_onnx/http/tensor", "scaling"] == pytest.approx(1.3)
    assert scaling[1].loc["triton_onnx/grpc/tensor", "scaling"] == pytest.approx(1.6)
    assert scaling[8].loc["pytorch/http/tensor", "scaling"] == pytest.approx(2.0)
    assert scaling[8].loc["pytorch/http/tensor", 4] == 160.0


def test_cross_tier_ratios(data) -> None:
    ratios = tables.cross_tier(data.ok, "a100", "rtx4090")
    assert len(ratios) == 12
    assert ratios["p50_ratio"].tolist() == pytest.approx([2.0] * 12)
    assert ratios["throughput_ratio"].tolist() == pytest.approx([0.75] * 12)
    assert ratios["cost_ratio"].tolist() == pytest.approx([(0.18 / 0.75) / 0.36] * 12)  # 2/3
    row = ratios.loc[("triton_onnx/grpc/tensor", 1, "c4")]
    assert (row["p50_a100"], row["p50_rtx4090"]) == (20.0, 40.0)


def test_cost_per_1k_images_at_every_price(data) -> None:
    by_tier = tables.cost_by_tier(data.ok)
    assert by_tier.loc[("triton_onnx/http/tensor", 1, "c1"), "a100"] == pytest.approx(0.001)  # 0.36/3600/100*1000
    assert by_tier.loc[("triton_onnx/http/tensor", 1, "c1"), "rtx4090"] == pytest.approx(0.18 / 3.6 / 75)
    images = tables.cost_by_tier(data.ok, "images_per_usd")
    assert images.loc[("pytorch/http/tensor", 8, "c4"), "a100"] == pytest.approx(160 * 3600 / 0.36)
    a100 = data.ok[data.ok["tier"] == "a100"]
    costs = tables.costs_at_prices(a100, data.tiers["a100"].prices)
    point = costs.loc[("triton_onnx/grpc/tensor", 1, "c4")]
    assert point["primary"] == pytest.approx(0.0005) and point["spot"] == pytest.approx(0.00025)
    assert point["images_per_usd"] == pytest.approx(2_000_000)
    # the report's own formula agrees with the metric the sweep logged
    assert (costs["primary"].values == pytest.approx(a100.set_index(tables.POINT).sort_index()
                                                      ["cost_per_1k_images_usd"].values))


def test_slo_pick_at_the_primary_price_and_at_any_price(data) -> None:
    priced = tables.priced_points(data.ok, tier_prices(data))
    pick = tables.slo_pick(priced, 35.0)
    # p99 <= 35: a100 onnx-http b1c1 ($0.001), a100 onnx-grpc b1c1 ($0.0008), rtx4090 onnx-grpc b1c1 ($0.000533)
    assert (pick["tier"], pick["stack"], pick["batch_size"], pick["load"]) == (
        "rtx4090", "triton_onnx/grpc/tensor", 1, "c1")
    assert pick["cost_per_1k_usd"] == pytest.approx(0.18 / 3.6 / 93.75)
    anywhere = tables.slo_pick(priced, 35.0, price=None)  # a100 at its spot price: 0.18/3.6/125 = $0.0004
    assert (anywhere["tier"], anywhere["stack"], anywhere["price"]) == ("a100", "triton_onnx/grpc/tensor", "spot")
    assert anywhere["cost_per_1k_usd"] == pytest.approx(0.0004)
    assert tables.slo_pick(priced, 50.0)["cost_per_1k_usd"] == pytest.approx(0.0005)  # a100 grpc b1c4
    assert tables.slo_pick(priced, 5.0) is None


def test_pareto_frontier_is_exactly_the_undominated_points(data) -> None:
    frontier = tables.pareto_frontier(data.ok)
    pts = data.ok[[tables.P99, "cost_per_1k_images_usd"]]
    expected = {i for i, (x, y) in pts.iterrows()
                if not any((x2 <= x and y2 <= y) and (x2 < x or y2 < y) for _, (x2, y2) in pts.iterrows())}
    assert set(frontier.index) == expected
    assert frontier[tables.P99].is_monotonic_increasing
    assert frontier["cost_per_1k_images_usd"].is_monotonic_decreasing
    assert frontier.iloc[0][tables.P99] == 16.0  # the fastest point is always on it


def test_problems_group_failed_and_skipped_with_reasons(data) -> None:
    bad = tables.problems(data.trials)
    assert bad.iloc[0]["status"] == "failed"
    assert bad.iloc[0]["reason"] == "measurement failed: synthetic failure"
    assert bad.iloc[0]["trials"] == "pytorch/http/jpeg/b1/c1"
    skipped = bad[bad["status"] == "skipped"]
    assert skipped["count"].tolist() == [2, 2]
    assert set(skipped["trials"]) == {"triton_trt/grpc/tensor/b1/c1, triton_trt/http/tensor/b1/c1"}


def test_missing_optional_metrics_are_left_out_and_shown_when_present(data) -> None:
    assert tables.present(data.ok, tables.SERVER_METRICS) == []
    with_server = data.ok.assign(server_queue_ms=1.5)
    assert tables.present(with_server, tables.SERVER_METRICS) == ["server_queue_ms"]


def test_search_runs_leaves_the_global_tracking_uri_alone(store, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/elsewhere.db")
    load_sweep(store[0], "tierbench", syn.SWEEP_ID)
    import os

    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:////tmp/elsewhere.db"
    assert mlflow.get_tracking_uri() == "sqlite:////tmp/elsewhere.db"


def test_by_batch_has_a_cell_per_measured_point_only() -> None:
    rows = [{"stack": s, "batch_size": b, "load": "c1", tables.P50: float(b)}
            for s, b in itertools.product(["x/http/tensor"], [1, 8])]
    rows.append({"stack": "y/http/tensor", "batch_size": 1, "load": "c1", tables.P50: 3.0})
    pivot = tables.by_batch(pd.DataFrame(rows), tables.P50)["c1"]
    assert pivot.loc["x/http/tensor", 8] == 8.0 and pd.isna(pivot.loc["y/http/tensor", 8])


def test_a_point_that_completed_nothing_in_its_window_has_no_cost_bar_and_breaks_nothing(data, tmp_path) -> None:
    """On a starved node a 1 s window can end before its only request does: an ok trial at 0 img/s, no cost. Its
    stack gets no bar; the others keep theirs."""
    from experiments.report import plots

    starved = data.ok.iloc[[0]].assign(stack="torchserve/http/jpeg", throughput_img_s=0.0,
                                       cost_per_1k_images_usd=float("nan"))
    path = plots.cost_bars(pd.concat([data.ok, starved]), tier_prices(data), {}, tmp_path / "cost_per_1k.png")
    assert path.stat().st_size > 0

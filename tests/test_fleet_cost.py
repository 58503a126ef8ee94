"""An endpoint with `nodes: N` (N GPU nodes behind its URL, each rented at the tier's price) is priced at N × the
tier's price wherever a $ figure is computed for its trials: the trial's metrics, its repeats pooled, its SLO search,
every report table at each of the tier's prices, and the capacity plan, which counts nodes of its throughput ÷ N.
A launched server (no `endpoint_nodes` param) is one node, priced as it always was. Synthetic figures throughout."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import experiments.run.trial as trial_module
from experiments.config.capacity import traffic
from experiments.config.prices import (
    PRICED_PARAM,
    cost_per_1k_images,
    fleet_usd_per_hour,
    node_count,
    tier_price_params,
    trial_nodes,
)
from experiments.measure.intervals import Interval, interval_metrics
from experiments.measure.load import WarmupStats
from experiments.measure.pooled import cost_intervals
from experiments.measure.samples import WindowSamples
from experiments.measure.windows import Measurement
from experiments.plan import Trial
from experiments.report import tables
from experiments.report.build import ReportOptions
from experiments.report.capacity import operating_points, single_plans
from experiments.report.data import load_sweep
from experiments.report.noise import cost_ends
from experiments.report.publish import make_report
from experiments.run.repeats import Repeats
from experiments.run.slo import SloProbe, SloResult
from experiments.run.trial import new_record, priced_usd_per_hour, run_trial
from serving.backend import ServerHandle
from serving.clients.base import PoolStats
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store
from tests.stand_in_group import run_stand_in_group

PRICE, SPOT = syn.PRICES["a100"], syn.A100_SPOT  # $0.36/h primary, $0.18/h spot
NODES = 4
URL = "http://10.0.0.5:8000"
ENDPOINT = {"endpoint_url": URL, "endpoint_model": "resnet18", "endpoint_nodes": NODES}


def _handle(nodes: int | None) -> ServerHandle:
    """An endpoint's handle with `nodes` behind its URL; None: a launched server's (no endpoint_nodes param)."""
    if nodes is None:
        return ServerHandle("triton_native", {"grpc": "127.0.0.1:8001"}, params={})
    return ServerHandle("endpoint", {"http": URL}, params={**ENDPOINT, "endpoint_nodes": nodes}, remote=True)


def _trial(variant: str, batch: int = 1, concurrency: int = 1, protocol: str = "http") -> Trial:
    backend = "endpoint" if variant.startswith("endpoint") else variant
    return Trial("a100", "resnet18", backend, variant, protocol, "tensor", batch, concurrency)


# --- the one definition -----------------------------------------------------------------------------------------

def test_the_node_count_comes_from_one_param_and_multiplies_the_price() -> None:
    assert [node_count(v) for v in (None, "", float("nan"), 4, "4", 4.0)] == [1, 1, 1, 4, 4, 4]
    assert trial_nodes({}) == 1 and trial_nodes({"endpoint_nodes": "3"}) == 3
    assert fleet_usd_per_hour(0.36, 4) == pytest.approx(1.44)
    assert cost_per_1k_images(0.36, 100.0) == pytest.approx(0.001)  # 0.36 / 3600 / 100 x 1000
    assert cost_per_1k_images(0.36, 100.0, 4) == pytest.approx(0.004)
    series = cost_per_1k_images(0.36, pd.Series([100.0, 100.0]), pd.Series([1, 4]))
    assert series.tolist() == pytest.approx([0.001, 0.004])


# --- the trial's metrics, its repeats and its SLO search ---------------------------------------------------------

def _samples(throughput_img_s: float, seed: int) -> WindowSamples:
    """2 s of 1-image requests completing at `throughput_img_s`, latencies made up."""
    n = int(throughput_img_s * 2)
    intended = np.linspace(0.0, 2.0, n, endpoint=False)
    done = intended + np.random.default_rng(seed).lognormal(-4.0, 0.3, n)
    return WindowSamples(0.0, 2.0, 1, intended, intended.copy(), done, np.full(n, np.nan), np.zeros(n), completed=n,
                         sent=n)


def _measured(monkeypatch: pytest.MonkeyPatch, throughput_img_s: float, seed: int = 0) -> None:
    """The next `run_trial` measures `throughput_img_s` (no client, no server: a stand-in measurement)."""
    payloads = PoolStats(111, 111, 602_112.0, (602_112.0,) * 4)
    result = Measurement(_samples(throughput_img_s, seed), [WarmupStats(5, 0.1, 2.0)], payloads, 1, 3, True, [])
    monkeypatch.setattr(trial_module, "_measure_with_enough_clients", lambda *args: result)


def _cfg(nodes: int = NODES):
    cfg = syn._cfg("a100")
    cfg.backends["endpoint"].url, cfg.backends["endpoint"].nodes = URL, nodes
    return cfg


def test_a_4_node_endpoint_costs_4x_a_launched_server_of_the_same_throughput(monkeypatch) -> None:
    cfg = _cfg()
    _measured(monkeypatch, 100.0)
    launched = run_trial(cfg, _trial("triton_onnx"), None, _handle(None), syn.NODE, None)
    endpoint = run_trial(cfg, _trial("endpoint"), None, _handle(NODES), syn.NODE, None)
    single = run_trial(cfg, _trial("endpoint"), None, _handle(1), syn.NODE, None)
    assert launched.metrics["throughput_img_s"] == endpoint.metrics["throughput_img_s"] == 100.0
    assert launched.metrics["cost_per_1k_images_usd"] == pytest.approx(0.001)  # unchanged: 0.36 / 3600 / 100 x 1000
    assert launched.metrics["images_per_usd"] == pytest.approx(1_000_000)
    assert endpoint.metrics["cost_per_1k_images_usd"] == pytest.approx(0.004)  # 4 x 0.36 $/h
    assert endpoint.metrics["images_per_usd"] == pytest.approx(250_000)
    assert single.metrics["cost_per_1k_images_usd"] == pytest.approx(0.001)
    # The hourly price the cost used is on the record where it is not the tier's; the tier's own price is unchanged.
    assert endpoint.params[PRICED_PARAM] == pytest.approx(1.44) and endpoint.params["price_per_hour_usd"] == PRICE
    assert PRICED_PARAM not in launched.params and PRICED_PARAM not in single.params
    assert endpoint.params["endpoint_nodes"] == NODES


def test_a_4_node_endpoints_repeats_pool_to_4x_the_cost_with_its_interval(monkeypatch) -> None:
    cfg = _cfg()
    cfg.experiment.repeats = 2
    pooled = {}
    for name, variant, nodes in (("launched", "triton_onnx", None), ("endpoint", "endpoint", NODES)):
        repeats = Repeats(_trial(variant), 2)
        for number, throughput in ((1, 90.0), (2, 110.0)):
            _measured(monkeypatch, throughput, seed=number)
            record = run_trial(cfg, _trial(variant), None, _handle(nodes), syn.NODE, None)
            repeats.collector(number)(record, {})
        pooled[name] = repeats.pooled(cfg, syn.NODE, _handle(nodes)).metrics
    launched, endpoint = pooled["launched"], pooled["endpoint"]
    throughput = math.sqrt(90.0 * 110.0)  # the repeats' geometric mean
    assert endpoint["throughput_img_s"] == pytest.approx(throughput) == launched["throughput_img_s"]
    assert launched["cost_per_1k_images_usd"] == pytest.approx(cost_per_1k_images(PRICE, throughput))
    assert endpoint["cost_per_1k_images_usd"] == pytest.approx(4 * cost_per_1k_images(PRICE, throughput))
    for end in ("ci_low", "ci_high"):
        assert endpoint[f"cost_per_1k_images_usd_{end}"] == pytest.approx(4 * launched[f"cost_per_1k_images_usd_{end}"])
        assert endpoint[f"images_per_usd_{end}"] == pytest.approx(launched[f"images_per_usd_{end}"] / 4)


def test_a_4_node_endpoints_slo_search_costs_4x(monkeypatch) -> None:
    overrides = ["experiment.slo.p99_ms=50", "experiment.slo.max_concurrency=2", f"gpu.price_per_hour_usd={PRICE}"]
    costs = {}
    for nodes in (None, NODES):
        sweep, _ = run_stand_in_group(monkeypatch, overrides, handle_params=None if nodes is None else ENDPOINT)
        (slo,) = [r for r in sweep.records if r.tags.get("run_level") == "slo"]
        best = slo.metrics["slo_max_throughput_img_s"]
        assert best == 102.0  # the stand-in's second measurement, at concurrency 2 (p99 30 ms: within 50)
        costs[nodes] = slo.metrics["cost_per_1k_images_at_slo_usd"]
        assert slo.params.get(PRICED_PARAM) == (None if nodes is None else pytest.approx(4 * PRICE))
    assert costs[None] == pytest.approx(PRICE / 3.6 / 102.0)
    assert costs[NODES] == pytest.approx(4 * PRICE / 3.6 / 102.0)


# --- the report ---------------------------------------------------------------------------------------------------

FLEET_SWEEP_ID = "synthetic-fleet"
# a100 ($0.36/h, spot $0.18/h). Grid: the launched server and a 4-node endpoint both serve 100 img/s at b1 c1 (the
# endpoint measured 3 times, 90-110 img/s); the endpoint's 4 nodes cost 4x per image. SLO search at p99 <= 50 ms, b8:
# the launched server 500 img/s, the 4-node endpoint 2,000 img/s (1,800-2,200) together, so 500 per node: for a peak
# of 1,000 img/s + 20 % both need 3 nodes (not 1 for the endpoint).
GRID = {"triton_onnx": (None, 100.0), "endpoint": (NODES, 100.0)}
SLO = {"triton_onnx": (None, 500.0, None), "endpoint": (NODES, 2000.0, (1800.0, 2200.0))}


def build_fleet(uri: str) -> None:
    sweep = syn._Sweep(uri, FLEET_SWEEP_ID)
    cfg = _cfg()
    cfg.sweep_id = FLEET_SWEEP_ID
    tier_run = sweep.tier_run("a100", {"gpu_tier": "a100", "price_per_hour_usd": PRICE, "price_source": "test fixture",
                                       "price_seen": "2026-01-01", **tier_price_params(cfg.gpu)})
    for variant, (nodes, throughput) in GRID.items():
        protocol = "grpc" if variant == "triton_onnx" else "http"
        record = new_record(cfg, _trial(variant, protocol=protocol), syn.NODE, _handle(nodes))
        usd_per_hour = priced_usd_per_hour(cfg, record.params)  # as run_trial prices it
        record.metrics = {**syn._metrics(10.0, 20.0, throughput, usd_per_hour, 1), "endpoint_rtt_p50_ms": 0.5}
        if nodes is not None:
            spread = Interval(90.0, 110.0)
            record.metrics |= {"repeats": 3.0, **interval_metrics("throughput_img_s", spread),
                               **cost_intervals(usd_per_hour, spread)}
        tier_run.log(record)
    for variant, (nodes, throughput, spread) in SLO.items():
        protocol = "grpc" if variant == "triton_onnx" else "http"
        slo = new_record(cfg, _trial(variant, 8, 0, protocol), syn.NODE, _handle(nodes))
        slo.key, slo.run_name = f"fleet-slo-{variant}", f"a100/{variant}/{protocol}/tensor/b8/slo-p99-50ms"
        slo.tags["run_level"] = "slo"
        best = SloProbe(8, 45.0, throughput, throughput_interval=spread)
        slo.metrics = SloResult(50.0, best, [best]).metrics(priced_usd_per_hour(cfg, slo.params))
        tier_run.log(slo)
    tier_run.finish()
    sweep.finish()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("fleet")
    uri = premigrated_store(folder / "mlflow")
    build_fleet(uri)
    return uri, folder


@pytest.fixture(scope="module")
def data(fleet):
    return load_sweep(fleet[0], "tierbench", FLEET_SWEEP_ID)


def _row(frame: pd.DataFrame, stack: str) -> pd.Series:
    (index,) = frame.index[frame["stack"] == stack]
    return frame.loc[index]


def test_the_report_reads_the_node_count_of_each_trial(data) -> None:
    ok = data.ok.set_index("stack")
    assert ok.loc["endpoint/http/tensor", "nodes"] == NODES and ok.loc["triton_onnx/grpc/tensor", "nodes"] == 1
    assert set(data.slo["nodes"]) == {1, NODES}
    # the logged metric (the trial's own pricing) and the report's recomputation agree, at 4x for the endpoint
    assert ok.loc["endpoint/http/tensor", "cost_per_1k_images_usd"] == pytest.approx(0.004)
    assert ok.loc["triton_onnx/grpc/tensor", "cost_per_1k_images_usd"] == pytest.approx(0.001)


def test_the_cost_tables_price_a_4_node_endpoint_at_4x_at_every_price(data) -> None:
    costs = tables.costs_at_prices(data.ok, data.tiers["a100"].prices)
    launched, endpoint = costs.loc[("triton_onnx/grpc/tensor", 1, "c1")], costs.loc[("endpoint/http/tensor", 1, "c1")]
    assert (launched["primary"], launched["spot"]) == (pytest.approx(0.001), pytest.approx(0.0005))  # unchanged
    assert (endpoint["primary"], endpoint["spot"]) == (pytest.approx(0.004), pytest.approx(0.002))
    assert launched["images_per_usd"] == pytest.approx(1_000_000) and endpoint["images_per_usd"] == pytest.approx(
        250_000)
    priced = tables.priced_points(data.ok, {"a100": data.tiers["a100"].prices})
    by = {(r["stack"], r["price"]): r for _, r in priced.iterrows()}
    assert by[("triton_onnx/grpc/tensor", "primary")]["cost_per_1k_usd"] == pytest.approx(0.001)
    assert by[("triton_onnx/grpc/tensor", "spot")]["usd_per_hour"] == pytest.approx(SPOT)
    assert by[("endpoint/http/tensor", "primary")]["cost_per_1k_usd"] == pytest.approx(0.004)
    assert by[("endpoint/http/tensor", "spot")]["cost_per_1k_usd"] == pytest.approx(0.002)
    assert by[("endpoint/http/tensor", "spot")]["usd_per_hour"] == pytest.approx(4 * SPOT)
    # the 95 % interval's ends at another price than the logged one, from its throughput's (90-110 img/s)
    spot = next(p for p in data.tiers["a100"].prices if p.name == "spot")
    ends = cost_ends(data.ok, spot).loc[_row(data.ok, "endpoint/http/tensor").name]
    assert ends.tolist() == pytest.approx([4 * SPOT / 3.6 / 110.0, 4 * SPOT / 3.6 / 90.0])
    assert by[("endpoint/http/tensor", "spot")]["cost_per_1k_usd_ci_high"] == pytest.approx(4 * SPOT / 3.6 / 90.0)


def test_the_capacity_plan_counts_nodes_of_a_4_node_endpoints_share(data) -> None:
    points = {p.stack: p for p in operating_points(data.slo, 50.0)}
    endpoint, launched = points["endpoint/http/tensor"], points["triton_onnx/grpc/tensor"]
    assert (endpoint.img_s, endpoint.measured_nodes, endpoint.img_s_interval) == (500.0, 4, Interval(450.0, 550.0))
    assert (launched.img_s, launched.measured_nodes) == (500.0, 1)
    plans = single_plans([endpoint, launched], {"a100": data.tiers["a100"].prices}, traffic(1000.0))
    sized = {(p.point.stack, p.price.name): p for p in plans}
    for stack in points:  # ⌈1,200 ÷ 500⌉ = 3 nodes each, at $0.36/h each (not 1 node of the endpoint)
        plan = sized[(stack, "primary")]
        assert plan.nodes == 3 and float(plan.usd_per_hour) == pytest.approx(3 * PRICE)
    assert sized[("endpoint/http/tensor", "primary")].nodes_range == (3, 3)  # ⌈1,200 ÷ 550⌉, ⌈1,200 ÷ 450⌉
    # the search's own cost at the SLO was priced for its 4 nodes: 4 x 0.36 / 3.6 / 2,000 = 0.36 / 3.6 / 500
    assert _rows_of(data.slo, "endpoint")["cost_per_1k_images_at_slo_usd"] == pytest.approx(PRICE / 3.6 / 500.0)


def _rows_of(frame: pd.DataFrame, variant: str) -> pd.Series:
    return frame[frame["variant"] == variant].iloc[0]


def test_the_report_says_how_many_nodes_an_endpoint_is_priced_for(fleet) -> None:
    uri, folder = fleet
    options = ReportOptions(slo_p99_ms=50.0, capacity=traffic(1000.0))
    md = make_report(uri, "tierbench", FLEET_SWEEP_ID, folder / "runs", options, log_to_mlflow=False).markdown
    text = md.read_text()
    assert (f"Endpoint `endpoint` on tier a100: a server tierbench did not start, at {URL}" in text
            and "4 nodes behind the URL, priced at 4 × $0.36/h (the tier's primary price" in text)
    assert "A trial served by several nodes (an endpoint's replicas behind its URL) is priced at their count" in text
    costs = text.split("## Cost per 1k images at each listed price")[1].split("\n## ")[0]
    assert ("| endpoint/http/tensor | 1 | c1 | 100.0 (90.0–110.0) | 20.0 | $0.004 ($0.00364–$0.00444) | $0.002 "
            "($0.00182–$0.00222) | 250,000 (225,000–275,000) |") in costs
    assert "| triton_onnx/grpc/tensor | 1 | c1 | 100.0 | 20.0 | **$0.001** | **$0.0005** | 1,000,000 |" in costs
    assert "Served by several nodes behind one URL: `endpoint/http/tensor` (4 nodes)" in costs
    plan = text.split("# Capacity plan")[1].split("\n# ")[0]
    assert ("| a100 | endpoint/http/tensor | 8 | 500.0 (450.0–550.0) | 62.5 | 3 (3–3) | 1,500.0 | primary $0.36/h "
            "(seen 2026-01-01) | $1.08 ($1.08–$1.08) |") in plan
    assert "a100 · endpoint/http/tensor · b8: 4 nodes behind its URL, img/s per node = their highest throughput" in plan
    assert "| a100 | triton_onnx/grpc/tensor | 8 | 500.0 | 62.5 | 3 | 1,500.0 | primary $0.36/h" in plan
    # the answer: the launched server is the cheapest at p99 <= 50 ms; the endpoint's 4 nodes cost $1.44/h
    assert ("**a100 · triton_onnx/grpc/tensor · b1 · c1**: **$0.001 per 1k images** (p99 20.0 ms, p50 10.0 ms, 100.0 "
            "img/s, price primary $0.36/h") in text
    assert ("| a100 | endpoint/http/tensor | 1 | c1 | 20.0 | 100.0 (90.0–110.0) | 4 × primary | $1.44 | $0.004 "
            "($0.00364–$0.00444) |") in text
    assert "| a100 | triton_onnx/grpc/tensor | 1 | c1 | 20.0 | 100.0 | primary | $0.36 | $0.001 |" in text


def test_a_sweep_without_endpoints_says_nothing_of_nodes(fleet) -> None:
    data = load_sweep(fleet[0], "tierbench", FLEET_SWEEP_ID)
    launched = data.ok[data.ok["variant"] == "triton_onnx"]
    costs = tables.costs_at_prices(launched.drop(columns="nodes"), data.tiers["a100"].prices)
    assert costs["primary"].tolist() == pytest.approx([0.001])  # a frame without the column: one node
    assert _rows_of(data.ok, "triton_onnx")["nodes"] == 1


def test_the_trace_sections_plan_counts_nodes_of_a_4_node_endpoints_share() -> None:
    """A replay at peak 400 req/s of b1 (mean/peak 0.5) and a 4-node endpoint's search at 800 (720-880) img/s within
    50 ms: 200 img/s per node, so the peak + 20 % (480 img/s) needs ⌈480 ÷ 200⌉ = 3 nodes at $0.36/h, not 1."""
    from experiments.config.prices import Price
    from experiments.report.data import SweepData, TierInfo
    from experiments.report.render import Document
    from experiments.report.trace_section import trace_section

    trial = {"status": "ok", "tier": "a100", "stack": "endpoint/http/tensor", "batch_size": 1, "load_mode": "trace",
             "request_rate": 400.0, "trace": "t.csv", "trace_mean_to_peak": "0.5", "throughput_img_s": 190.0,
             "latency_p50_ms": 3.0, "latency_p99_ms": 40.0, "late_requests": 0.0, "overloaded": False,
             "nodes": NODES, "cost_per_1k_images_usd": cost_per_1k_images(PRICE, 190.0, NODES)}
    slo = pd.DataFrame([{"tier": "a100", "status": "ok", "variant": "endpoint", "protocol": "http", "nodes": NODES,
                         "input_format": "tensor", "batch_size": 1, "slo_p99_ms": 50.0, "slo_met": 1.0,
                         "slo_limited": 0.0, "slo_max_throughput_img_s": 800.0, "slo_stable_at_max": 1.0,
                         "slo_max_throughput_img_s_ci_low": 720.0, "slo_max_throughput_img_s_ci_high": 880.0}])
    data = SweepData("synthetic-trace", "0", None, pd.DataFrame([trial]),
                     {"a100": TierInfo("a100", prices=[Price("primary", PRICE)])}, slo=slo)
    doc = Document("t")
    lines = trace_section(doc, data, {}, 0.2, None)
    text = doc.to_markdown()
    # ⌈480 ÷ 220⌉ = 3 and ⌈480 ÷ 180⌉ = 3 at the interval's ends; 3 x $0.36 x 730 h = $788/month
    assert "| 400.0 | 200.0 | a100 | endpoint/http/tensor b1 | 3 (3–3) | primary $0.36/h | $788 ($788–$788) |" in text
    assert lines[-1].startswith("trace traffic (peak 400 img/s, average 200.0): 3 × a100 · endpoint/http/tensor · b1")
    assert "4 nodes behind its URL, img/s per node = their highest throughput within the target ÷ 4" in text

"""The capacity plan (issue 32, items 1 and 4): node counts as exact ceilings with the headroom applied once, $/hour
and $/month at every price, cheapest first, mixed tiers compared exactly, crossovers, the command for a tier without
SLO results, every refusal (key, value, fix), and the section in reports of the SYNTHETIC sweeps (tests/
synthetic_sweep.py: made-up round numbers, never measured)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from experiments.config.capacity import Traffic, configured_traffic, traffic
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.prices import Price
from experiments.config.validation import validate
from experiments.measure.intervals import Interval
from experiments.report.capacity import (
    Point,
    cheapest_mix,
    cost_steps,
    crossovers,
    mixed_plans,
    nodes_needed,
    operating_points,
    single_plans,
)
from experiments.report.capacity_section import noise_verdict, refuse_unpriced
from experiments.report.data import ReportError, load_sweep
from experiments.report.publish import sweep_answer
from experiments.run.slo import SloProbe, SloResult
from runners import report as report_cli
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store

A100 = Point("a100", "triton_onnx/grpc/tensor", 8, 500.0)
RTX = Point("rtx4090", "triton_onnx/grpc/tensor", 8, 200.0)
A100_PRICES = [Price("primary", 0.36), Price("spot", 0.18, "spot", "Synthetic", "test fixture", "2026-01-01")]
RTX_PRICES = [Price("primary", 0.18)]
PRICES = {"a100": A100_PRICES, "rtx4090": RTX_PRICES}


# --- node counts ------------------------------------------------------------------------------------------------

def test_the_headroom_is_applied_once_and_exactly() -> None:
    assert Traffic(1000.0, 1000.0, 0.2).required_img_s == 1200
    assert Traffic(1000.0, 1500.0, 0.0).required_img_s == 1500  # the peak, not the average, is sized for
    assert Traffic(100.0, 100.0, 0.1).required_img_s == 110
    assert math.ceil(100 * 1.1 / 55) == 3  # in floats 100 * 1.1 is 110.00000000000001: one node too many


@pytest.mark.parametrize(("required", "per_node", "nodes"), [
    (Fraction(1200), 240.0, 5),  # fills 5 nodes to the image: no sixth
    (Fraction(1200), 239.99, 6),  # just short: one more
    (Fraction(1200), 240.01, 5),
    (Fraction(1200), 1200.0, 1),
    (Fraction(1200), 5000.0, 1),  # a node is the least
    (Traffic(100.0, 100.0, 0.1).required_img_s, 55.0, 2),  # floats would say ceil(110.00000000000001 / 55) = 3
])
def test_nodes_are_exact_ceilings_at_the_boundaries(required: Fraction, per_node: float, nodes: int) -> None:
    assert nodes_needed(required, per_node) == nodes


def test_every_plan_covers_the_peak_with_headroom_and_no_node_more() -> None:
    plans = single_plans([A100, RTX], PRICES, Traffic(1000.0, 1000.0, 0.2))
    assert len(plans) == len(A100_PRICES) + len(RTX_PRICES)  # one per tier and price
    for plan in plans:
        assert plan.capacity_img_s >= 1200 > (plan.nodes - 1) * plan.point.img_s  # headroom once, not 1.2 x 1.2


# --- intervals (experiment.repeats) -----------------------------------------------------------------------------

A100_CI = Point("a100", "triton_onnx/grpc/tensor", 8, 500.0, img_s_interval=Interval(450.0, 560.0))
RTX_CI = Point("rtx4090", "triton_onnx/grpc/tensor", 8, 200.0, img_s_interval=Interval(170.0, 240.0))
RTX_SLOW = Point("rtx4090", "triton_onnx/grpc/tensor", 8, 150.0, img_s_interval=Interval(145.0, 155.0))
PRIMARY_ONLY = {"a100": [Price("primary", 0.36)], "rtx4090": RTX_PRICES}


def test_node_counts_and_dollars_at_the_throughput_intervals_ends() -> None:
    """1,200 img/s: a100 at 450-560 img/s needs 3 nodes at either end; rtx4090 at 170-240 needs 5 (1,200 / 240)
    to 8 (1,200 / 170 = 7.06), and its $/month runs from 5 to 8 nodes at $0.18/h x 730 h."""
    a100, rtx = single_plans([A100_CI, RTX_CI], PRIMARY_ONLY, traffic(1000.0))
    assert (a100.nodes, a100.nodes_range, rtx.nodes, rtx.nodes_range) == (3, (3, 3), 6, (5, 8))
    assert rtx.usd_per_month_range == Interval(pytest.approx(657.0), pytest.approx(1051.2))
    assert a100.usd_per_month_range == Interval(pytest.approx(788.4), pytest.approx(788.4))
    exact_end = Point("a100", "s", 8, 500.0, img_s_interval=Interval(400.0, 600.0))  # 1,200 / 400 is 3, exactly
    assert single_plans([exact_end], PRIMARY_ONLY, traffic(1000.0))[0].nodes_range == (2, 3)
    assert single_plans([A100], PRIMARY_ONLY, traffic(1000.0))[0].nodes_range is None  # measured once: no range


def test_the_plans_noise_verdict_is_the_overlap_of_their_dollar_ranges() -> None:
    within = noise_verdict(single_plans([A100_CI, RTX_CI], PRIMARY_ONLY, traffic(1000.0)), {})
    assert within.startswith("Within noise: the cheapest plan of another tier, 6 nodes (5–8) of rtx4090 · "
                             "triton_onnx/grpc/tensor · b8 at primary")
    assert "$788/month ($657–$1,051), overlaps the cheapest plan's, 3 nodes of a100" in within
    assert "tier rtx4090 is within noise of tier a100" in within
    apart = noise_verdict(single_plans([A100_CI, RTX_SLOW], PRIMARY_ONLY, traffic(1000.0)), {})
    assert apart.startswith("Beyond noise: the cheapest plan of another tier, 8 nodes (8–9) of rtx4090")
    assert "is clear of the cheapest plan's, 3 nodes of a100" in apart  # $1,051-$1,183 vs $788
    assert noise_verdict(single_plans([A100, RTX], PRIMARY_ONLY, traffic(1000.0)), {}) is None  # measured once
    assert noise_verdict(single_plans([A100_CI], PRIMARY_ONLY, traffic(1000.0)), {}) is None  # one tier


def test_the_slo_search_logs_the_per_node_throughput_interval_and_the_plan_reads_it() -> None:
    best = SloProbe(8, 45.0, 500.0, throughput_interval=(450.0, 560.0))
    metrics = SloResult(50.0, best, [best]).metrics(0.36)
    assert (metrics["slo_max_throughput_img_s_ci_low"], metrics["slo_max_throughput_img_s_ci_high"]) == (450.0, 560.0)
    assert metrics["cost_per_1k_images_at_slo_usd_ci_high"] == pytest.approx(0.36 / 3.6 / 450.0)
    assert "slo_max_throughput_img_s_ci_low" not in SloResult(50.0, SloProbe(8, 45.0, 500.0)).metrics(0.36)
    row = {"tier": "a100", "variant": "triton_onnx", "protocol": "grpc", "input_format": "tensor", "batch_size": 8,
           "status": "ok", "slo_stable_at_max": 1.0, **metrics}
    slo = pd.DataFrame([row, {**row, "tier": "rtx4090", "slo_max_throughput_img_s_ci_low": float("nan"),
                              "slo_max_throughput_img_s_ci_high": float("nan")}])
    points = operating_points(slo, 50.0)
    assert points[0].img_s_interval == Interval(450.0, 560.0) and points[1].img_s_interval is None


def test_with_a_deadline_the_plan_sizes_on_goodput_not_on_what_was_shed_or_late() -> None:
    """At the highest load within the target a node answered 500 img/s, 400 of them well in time: it is sized as a
    400 img/s node, its interval scaled alike."""
    best = SloProbe(8, 45.0, 500.0, throughput_interval=(450.0, 560.0), goodput_share=0.8, goodput=400.0)
    metrics = SloResult(50.0, best, [best]).metrics(0.36)
    assert metrics["slo_max_goodput_img_s"] == 400.0 and metrics["slo_goodput_share_at_max"] == 0.8
    row = {"tier": "a100", "variant": "triton_onnx", "protocol": "grpc", "input_format": "tensor", "batch_size": 8,
           "status": "ok", "slo_stable_at_max": 1.0, **metrics}
    (point,) = operating_points(pd.DataFrame([row]), 50.0)
    assert point.img_s == 400.0 and point.img_s_interval == Interval(360.0, 448.0)
    (without,) = operating_points(pd.DataFrame([{**row, "slo_max_goodput_img_s": float("nan")}]), 50.0)
    assert without.img_s == 500.0


# --- prices and order -------------------------------------------------------------------------------------------

def test_dollars_per_hour_and_month_at_each_price_cheapest_first() -> None:
    plans = single_plans([A100, RTX], PRICES, traffic(1000.0))
    assert [(p.point.tier, p.price.name, p.nodes) for p in plans] == [
        ("a100", "spot", 3), ("a100", "primary", 3), ("rtx4090", "primary", 6)]  # a $1.08 tie: fewer nodes first
    assert [float(p.usd_per_hour) for p in plans] == [0.54, 1.08, 1.08]
    assert [p.usd_per_month for p in plans] == [Fraction("394.2"), Fraction("788.4"), Fraction("788.4")]  # x 730 h


def test_only_results_at_the_target_that_met_it_count() -> None:
    slo = pd.DataFrame({
        "tier": ["a100", "a100", "a100", "rtx4090"], "status": ["ok", "ok", "ok", "failed"],
        "variant": ["x", "y", "z", "x"], "protocol": "grpc", "input_format": "tensor", "batch_size": [1, 4, 1, 1],
        "slo_p99_ms": [50.0, 50.0, 30.0, 50.0], "slo_met": [1.0, 1.0, 1.0, 1.0], "slo_limited": [0.0, 1.0, 0.0, 0.0],
        "slo_max_throughput_img_s": [100.0, 400.0, 90.0, 80.0], "slo_stable_at_max": [1.0, 0.0, 1.0, 1.0]})
    points = operating_points(slo, 50.0)
    assert points == [Point("a100", "x/grpc/tensor", 1, 100.0), Point("a100", "y/grpc/tensor", 4, 400.0, True, True)]
    assert points[1].requests_s == 100.0  # 400 img/s in requests of 4 images
    assert operating_points(slo.assign(slo_met=0.0), 50.0) == []


# --- mixed plans and crossovers ---------------------------------------------------------------------------------

def test_a_mix_wins_where_both_tiers_round_up_badly() -> None:
    mix = cheapest_mix(A100, A100_PRICES[0], RTX, RTX_PRICES[0], traffic(1000.0).required_img_s)  # 1,200 img/s
    assert (mix.first.nodes, mix.second.nodes) == (2, 1) and mix.capacity_img_s == 1200
    assert [a.nodes for a in mix.alone] == [3, 6] and mix.best_alone.usd_per_hour == Fraction("1.08")
    assert mix.usd_per_hour == Fraction("0.9") and mix.wins


def test_no_mix_wins_where_one_tier_fits_exactly() -> None:
    (mix,) = mixed_plans([A100, RTX, Point("a100", "pytorch/http/tensor", 1, 100.0)], PRICES,
                         Traffic(1000.0, 1000.0, 0.0))  # 1,000 img/s: 2 a100 to the image ($0.72) vs 5 rtx4090
    assert mix.first.point == A100  # the tier's point with the most img/s per node
    assert (mix.first.nodes, mix.second.nodes) == (2, 0) and not mix.wins
    assert mix.usd_per_hour == mix.best_alone.usd_per_hour == Fraction("0.72")


def test_crossovers_are_where_the_cheapest_tier_changes() -> None:
    steps = {"a100": cost_steps(A100, A100_PRICES[0], 0.2, 2000.0),
             "rtx4090": cost_steps(RTX, RTX_PRICES[0], 0.2, 2000.0)}
    assert steps["a100"][0] == (Fraction(1250, 3), Fraction("262.8"))  # 1 node: up to 500 / 1.2 img/s of peak
    assert steps["a100"][-1][0] >= 2000
    found = crossovers(steps)
    assert [(c.traffic_img_s, c.before, c.cheaper) for c in found] == [
        (Fraction(1000, 3), "rtx4090", "a100"), (Fraction(1250, 3), "a100", "rtx4090"),
        (Fraction(2000, 3), "rtx4090", "a100")]  # ties (e.g. 166.7-333.3 img/s at $0.36/h) keep the leader
    assert crossovers({"a100": steps["a100"]}) == []


# --- refusals ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    ((0.0,), "capacity.traffic_img_s=0.0 is not allowed: give the average traffic in images/s, > 0"),
    ((-5.0,), "capacity.traffic_img_s=-5.0 is not allowed"),
    ((1000.0, 800.0), "capacity.peak_img_s=800.0 is not allowed: the peak is at least the average traffic "
                      "(capacity.traffic_img_s=1000)"),
    ((1000.0, None, -0.1), "capacity.headroom=-0.1 is not allowed: a fraction of the peak in [0, 1]"),
    ((1000.0, None, 20.0), "capacity.headroom=20.0 is not allowed: a fraction of the peak in [0, 1]: 0.2 keeps 20 % "
                           "spare capacity above it (write 0.2, not 20)"),
    ((float("nan"),), "capacity.traffic_img_s=nan is not allowed: give a finite number"),
    (("lots",), "capacity.traffic_img_s='lots' is not allowed: give a finite number"),
])
def test_bad_traffic_is_refused_with_key_value_and_fix(args: tuple, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        traffic(*args)
    assert says in str(refused.value)


def test_a_sweeps_capacity_keys_are_checked_up_front() -> None:
    cfg = load_config(["capacity.traffic_img_s=1000", "capacity.peak_img_s=1500", "experiment.slo.p99_ms=50"])
    assert cfg.capacity.check("capacity", cfg) == []
    assert configured_traffic(cfg.capacity) == Traffic(1000.0, 1500.0, 0.2)
    assert configured_traffic(load_config().capacity) is None  # the default: no plan
    refusals = [
        (["capacity.traffic_img_s=0", "experiment.slo.p99_ms=50"], "capacity.traffic_img_s=0.0 is not allowed"),
        (["capacity.traffic_img_s=1000"], "capacity.traffic_img_s=1000.0 is not allowed: the capacity plan counts "
                                          "nodes from the SLO search's highest throughput within the p99 target: set "
                                          "experiment.slo.p99_ms too, e.g. experiment.slo.p99_ms=50"),
        (["capacity.peak_img_s=1500"], "capacity.peak_img_s=1500.0 is not allowed: it sizes a capacity plan: give the "
                                       "average traffic too, e.g. capacity.traffic_img_s=1500"),
        (["capacity.traffic_img_s=1000", "capacity.headroom=-1", "experiment.slo.p99_ms=50"],
         "capacity.headroom=-1.0 is not allowed"),
    ]
    for overrides, says in refusals:
        with pytest.raises(ConfigError) as refused:
            validate(load_config(overrides))
        assert says in str(refused.value), overrides
    with pytest.raises(ConfigError, match="capacity.traffic_img_s"):
        load_config(["capacity.traffic_img_s=lots"])  # the schema's type


@pytest.mark.parametrize(("argv", "says"), [
    (["--traffic-img-s", "0"], "--traffic-img-s=0.0 is not allowed: give the average traffic in images/s, > 0 (a "
                               "request of b images counts b), e.g. --traffic-img-s 1000"),
    (["--traffic-img-s", "1000", "--peak-img-s", "10"], "--peak-img-s=10.0 is not allowed: the peak is at least"),
    (["--traffic-img-s", "1000", "--headroom", "20"], "--headroom=20.0 is not allowed"),
    (["--peak-img-s", "1500"], "--peak-img-s is not allowed alone: it shapes a capacity plan; give the average "
                               "traffic too, e.g. --traffic-img-s 1000"),
    (["--traffic-rps", "100"], "--traffic-rps=100 is not allowed: the capacity plan takes images/s, the unit of every "
                               "throughput it sizes nodes with; give --traffic-img-s (requests/s × images per "
                               "request)"),
])
def test_the_report_command_refuses_bad_traffic(argv: list[str], says: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        report_cli.parse_args(argv)
    assert says in capsys.readouterr().err


def test_the_report_command_takes_the_traffic() -> None:
    args = report_cli.parse_args(["s", "--traffic-img-s", "1000", "--peak-img-s", "1500", "--headroom", "0.3"])
    assert args.capacity == Traffic(1000.0, 1500.0, 0.3)
    assert report_cli.parse_args(["--traffic-img-s", "800"]).capacity == Traffic(800.0, 800.0, 0.2)
    assert report_cli.parse_args([]).capacity is None


# --- the report section, on the synthetic sweeps ----------------------------------------------------------------

@pytest.fixture(scope="module")
def capacity_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, str]:
    """The capacity sweep reported by the command: its store, its results folder and what it printed."""
    folder = tmp_path_factory.mktemp("capacity")
    uri = premigrated_store(folder / "mlflow")
    syn.build_capacity(uri)
    return uri, folder / "runs", _cli(uri, folder / "runs", ["--traffic-img-s", "1000"])


def _cli(uri: str, runs: Path, extra: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report_cli.main([syn.CAPACITY_SWEEP_ID, "--tracking-uri", uri, "--results-dir", str(runs),
                                "--no-log", *extra])
    assert code == 0
    return out.getvalue()


def test_the_plan_of_two_tiers_in_the_report(capacity_report) -> None:
    _, runs, printed = capacity_report
    assert ("capacity plan for peak 1,000 img/s + 20 % headroom = 1,200 img/s, within p99 ≤ 50 ms: 3 × a100 · "
            "triton_onnx/grpc/tensor · b8 at spot $0.18/h (spot, Synthetic, seen 2026-01-01): $0.54/hour, "
            "$394/month") in printed
    assert "mixed: 2 × a100 · triton_onnx/grpc/tensor · b8 + 1 × rtx4090 · triton_onnx/grpc/tensor · b8" in printed
    folder = runs / syn.CAPACITY_SWEEP_ID / "report"
    section = (folder / "report.md").read_text().split("## Capacity plan")[1].split("\n## ")[0]
    assert "nodes = ⌈peak × (1 + 0.2) ÷ img/s per node⌉" in section and "Traffic is in images/s" in section
    assert ("| a100 | triton_onnx/grpc/tensor | 8 | 500.0 | 62.5 | 3 | 1,500.0 | spot $0.18/h (spot, Synthetic, seen "
            "2026-01-01) | $0.54 | $394 | $0.00015 |") in section
    assert "| rtx4090 | triton_onnx/grpc/tensor | 8 | 200.0 | 25.0 | 6 | 1,200.0 | primary $0.18/h" in section
    assert "| a100 | pytorch/http/tensor | 1 | ≥ 100.0 | 100.0 | 12 |" in section  # the search stopped at its limit
    assert "- a100 · spot $0.18/h (spot, Synthetic, seen 2026-01-01): source test fixture" in section
    assert "| a100 + rtx4090 | 2 × a100 · triton_onnx/grpc/tensor · b8 + 1 × rtx4090" in section
    assert "mix saves $0.18/hour ($131/month, 17%) over a100 alone" in section
    assert ("above 333.3 img/s, a100 costs less than rtx4090; above 416.7 img/s, rtx4090 costs less than a100; "
            "above 666.7 img/s, a100 costs less than rtx4090.") in section
    assert "![$/month against peak traffic (0 to 2,000 img/s)" in section
    assert (folder / "capacity_cost.png").stat().st_size > 10_000
    assert "Tiers without SLO results" not in section


def test_a_tier_without_a_price_is_refused_before_the_plan(capacity_report) -> None:
    data = load_sweep(capacity_report[0], "tierbench", syn.CAPACITY_SWEEP_ID)
    refuse_unpriced(data, None)
    data.tiers["rtx4090"].prices = []
    with pytest.raises(ReportError) as refused:
        refuse_unpriced(data, None)
    assert ("tier 'rtx4090': price_per_hour_usd=None is not allowed in a capacity plan: its runs carry no price to "
            "multiply its nodes by; run the tier again with one (gpu=rtx4090 gpu.price_per_hour_usd=USD "
            "sweep_id=synthetic-capacity)") in str(refused.value)
    refuse_unpriced(data, 30.0)  # at a target it has no result for, it is not in the plan


def test_a_sweep_with_a_traffic_ends_with_its_plan_and_says_what_to_run_for_a_tier_without_slo_results(
        tmp_path: Path) -> None:
    uri = premigrated_store(tmp_path / "mlflow")
    syn.build(uri)
    cfg = load_config([f"mlflow.tracking_uri={uri}", f"sweep_id={syn.SWEEP_ID}", f"results_dir={tmp_path / 'runs'}",
                       "experiment.slo.p99_ms=45", "capacity.traffic_img_s=1000", "capacity.peak_img_s=1500",
                       "capacity.headroom=0.25"])
    printed = "\n".join(sweep_answer(cfg))
    command = ("python -m runners.sweep gpu=rtx4090 model=resnet18 cluster=emulated experiment.slo.p99_ms=45 "
               "sweep_id=synthetic-fixture")
    assert ("capacity plan for peak 1,500 img/s + 25 % headroom = 1,875 img/s (average 1,000 img/s), within p99 ≤ "
            "45 ms: 8 × a100 · triton_onnx/grpc/tensor · b1 at spot") in printed  # 1,875 / 240 img/s per node
    assert f"rtx4090 (emulated): no SLO result within p99 ≤ 45 ms; measure it: {command}" in printed
    section = (tmp_path / "runs" / syn.SWEEP_ID / "report" / "report.md").read_text().split("## Capacity plan")[1]
    assert f"- rtx4090 (emulated): `{command}`" in section.split("\n## ")[0]
    assert "No crossover: a100 is the only tier with SLO results." in section

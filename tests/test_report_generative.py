"""The report of a generative sweep, on a SYNTHETIC sweep of round numbers (never measured): two tiers (a100 at
$3.60/h primary and $1.80/h spot, so $ per 1M output tokens = 1000 / output tok/s at primary; l4 at $0.72/h, = 200 /
output tok/s), several points each, one served by two nodes, one unstable, one overloaded and one ramp. The answer's
picks, the costs at every listed price, the Pareto frontiers, the capacity plan in tokens and the plots are checked
exactly, from a hand-made MLflow frame and, end to end, from a temporary MLflow store through `runners.report`."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.report import tables
from experiments.report.build import ReportOptions
from experiments.report.data import ReportError, SweepData, tidy_trials, tier_infos
from experiments.report.generative.answer import answer_lines
from experiments.report.generative.build import build_generative_report
from experiments.report.generative.points import (
    COST,
    TOTAL_COST,
    TPOT,
    TTFT,
    Targets,
    TokenPlan,
    at_price,
    capacity_points,
    cheapest,
    priced_points,
)
from experiments.report.publish import make_report, report_builder
from runners import report as report_cli
from tests.helpers import premigrated_store

SWEEP_ID = "synthetic-generative"
PRICES = {"a100": {"primary": 3.6, "spot": 1.8}, "l4": {"primary": 0.72}}
TARGETS = Targets(ttft_p99_ms=200.0, tpot_p99_ms=30.0)
# (tier, variant, load mode, concurrency, rate) -> TTFT p99, TPOT p99 (ms), output tok/s, output tokens per request
POINTS = {
    ("a100", "vllm", "closed", 1, 0.0): (20.0, 5.0, 200.0, 100.0),
    ("a100", "vllm", "closed", 4, 0.0): (40.0, 8.0, 800.0, 100.0),
    ("a100", "vllm", "closed", 16, 0.0): (150.0, 20.0, 2000.0, 128.0),
    ("a100", "tgi", "closed", 4, 0.0): (60.0, 10.0, 500.0, 100.0),  # two nodes behind its URL; unstable
    ("l4", "vllm", "closed", 1, 0.0): (50.0, 12.0, 100.0, 100.0),
    ("l4", "vllm", "closed", 4, 0.0): (120.0, 25.0, 250.0, 100.0),
    ("l4", "vllm", "closed", 16, 0.0): (400.0, 60.0, 500.0, 100.0),
    ("l4", "vllm", "poisson", 0, 50.0): (900.0, 90.0, 600.0, 100.0),  # overloaded: in no cost figure
    ("l4", "vllm", "ramp", 0, 8.0): (300.0, 40.0, 300.0, 100.0),
}
NODES = {("a100", "tgi"): 2}
# a100 at c16 was measured 3 times: its pooled figures carry 95 % intervals (the others were measured once).
REPEATED = {("a100", "vllm", "closed", 16, 0.0): {"repeats": 3.0, "ttft_p99_ms_ci_low": 140.0,
                                                  "ttft_p99_ms_ci_high": 160.0, "output_tokens_s_ci_low": 1600.0,
                                                  "output_tokens_s_ci_high": 2500.0}}
UNSTABLE = {("a100", "tgi", "closed", 4, 0.0)}
OVERLOADED = {("l4", "vllm", "poisson", 0, 50.0)}
# The ramp's bins: offered req/s x 100 tokens a request against the output tokens/s served; the fourth falls behind.
RAMP = pd.DataFrame({"t_s": [0.0, 0.4, 0.8, 1.2], "offered_rps": [1.0, 2.0, 4.0, 8.0],
                     "output_tokens_s": [100.0, 200.0, 390.0, 500.0], "error_rate": [0.0, 0.0, 0.0, 0.0],
                     "latency_p50_ms": [100.0, 110.0, 150.0, 400.0], "latency_p99_ms": [150.0, 160.0, 250.0, 900.0]})


def _run(key: tuple[str, str, str, int, float], index: int) -> dict[str, Any]:
    """One trial run as `mlflow.search_runs` returns it: tags, params and metrics under their prefixes."""
    tier, variant, mode, concurrency, rate = key
    ttft, tpot, out, per_request = POINTS[key]
    load = f"c{concurrency}" if mode == "closed" else f"{mode}-r{rate:g}"
    nodes = NODES.get((tier, variant), 1)
    price = PRICES[tier]["primary"]
    metrics = {"ttft_p50_ms": ttft / 2, "ttft_p99_ms": ttft, "itl_p50_ms": tpot / 2, "itl_p99_ms": tpot * 1.5,
               "tpot_p50_ms": tpot / 2, "tpot_p99_ms": tpot, "latency_p50_ms": ttft + per_request * tpot / 2,
               "latency_p99_ms": ttft + per_request * tpot, "output_tokens_s": out, "input_tokens_s": 4 * out,
               "total_tokens_s": 5 * out, "requests_s": out / per_request, "error_rate": 0.0,
               "output_tokens_mean": per_request, "requested_tokens_mean": 128.0,
               "output_short_share": 0.0 if per_request == 128.0 else 0.25, "tokens_per_event_mean": 1.0,
               "cost_per_1m_output_tokens_usd": nodes * price / 3600 / out * 1e6,
               "cost_per_1m_tokens_usd": nodes * price / 3600 / (5 * out) * 1e6, "goodput_share": 0.99,
               "goodput_output_tokens_s": 0.9 * out,
               "stable": 0.0 if key in UNSTABLE else 1.0, "overloaded": 1.0 if key in OVERLOADED else 0.0}
    metrics |= REPEATED.get(key, {})
    if mode != "closed":
        metrics |= {"offered_rate_rps": rate, "backlog_growth_requests": 40.0 if key in OVERLOADED else 0.0}
    params = {"gpu_tier": tier, "backend": "endpoint", "backend_variant": variant, "protocol": "http",
              "input_format": "chat_stream", "batch_size": "1", "concurrency": str(concurrency), "load_mode": mode,
              "request_rate": str(rate), "workload": "generative", "tokens_counted_by": "usage",
              "endpoint_nodes": str(nodes), "endpoint_pin_output": "none", "load_engine": "python",
              "goodput_ttft_p99_ms": "200", "goodput_tpot_p99_ms": "30", "price_per_hour_usd": str(price),
              **{f"price_{name}_per_hour_usd": str(usd) for name, usd in PRICES[tier].items() if name != "primary"}}
    tags = {"status": "ok", "run_level": "trial", "sweep_id": SWEEP_ID, "trial_key": f"k{index}", "gpu_tier": tier,
            "emulated": "false", "synthetic": "true", "mlflow.runName": f"{tier}/{variant}/http/chat_stream/b1/{load}"}
    start = pd.Timestamp("2026-12-01", tz="UTC") + pd.Timedelta(minutes=index)
    return {"run_id": f"run{index:02d}", "start_time": start,
            **{f"tags.{k}": v for k, v in tags.items()}, **{f"params.{k}": v for k, v in params.items()},
            **{f"metrics.{k}": v for k, v in metrics.items()}}


@pytest.fixture(scope="module")
def data() -> SweepData:
    runs = pd.DataFrame([_run(key, i) for i, key in enumerate(POINTS)])
    trials, _ = tidy_trials(runs)
    ramp = trials.loc[trials["load_mode"] == "ramp", "run_id"].iloc[0]
    return SweepData(SWEEP_ID, "0", None, trials, tier_infos(pd.DataFrame(), trials), series={ramp: RAMP})


def _price_label(row: pd.Series) -> str:
    return str(row["price"])


def _named(row: pd.Series | None) -> tuple[str, str, str] | None:
    return None if row is None else (row["tier"], row["stack"], str(row["load"]))


def test_the_trials_read_as_generative(data: SweepData) -> None:
    assert data.workloads == ["generative"]
    assert SweepData(SWEEP_ID, "0", None, data.trials.drop(columns="workload"), data.tiers).workloads == ["image"]
    assert [p.name for p in data.tiers["a100"].prices] == ["primary", "spot"]
    assert set(data.sustained["load"].astype(str)) == {"c1", "c4", "c16", "ramp-r8"}  # the overloaded one left out


def test_costs_at_every_price_are_price_over_3600_over_tokens_s_times_1m_for_the_nodes(data: SweepData) -> None:
    prices = {tier: info.prices for tier, info in data.tiers.items()}
    priced = priced_points(data.sustained, prices)
    assert len(priced) == 2 * 4 + 4  # a100: 4 points x 2 prices; l4: 4 points (the overloaded one out) x 1
    for _, row in priced.iterrows():
        nodes = NODES.get((row["tier"], row["variant"]), 1)
        usd = PRICES[row["tier"]][row["price"]] * nodes
        assert row["usd_per_hour"] == pytest.approx(usd)
        assert row[COST] == pytest.approx(usd / 3600 / row["output_tokens_s"] * 1e6)
        assert row[TOTAL_COST] == pytest.approx(usd / 3600 / (5 * row["output_tokens_s"]) * 1e6)
    tgi = priced[(priced["variant"] == "tgi") & (priced["price"] == "spot")].iloc[0]
    assert tgi[COST] == pytest.approx(2 * 1.8 / 3600 / 500 * 1e6)  # $2 per 1M output tokens: two nodes at spot
    assert priced[COST].is_monotonic_increasing


def test_the_answer_picks_the_cheapest_point_at_the_primary_price_and_within_the_targets(data: SweepData) -> None:
    prices = {tier: info.prices for tier, info in data.tiers.items()}
    priced = priced_points(data.sustained, prices)
    # Without targets: l4 at c16, $200 / 500 = $0.40 per 1M output tokens (the overloaded $0.33 left out).
    assert _named(cheapest(priced, Targets())) == ("l4", "vllm/http/chat_stream", "c16")
    # Within TTFT p99 <= 200 ms and TPOT p99 <= 30 ms: a100 at c16, $1000 / 2000 = $0.50; at any price its spot $0.25.
    pick = cheapest(priced, TARGETS)
    assert _named(pick) == ("a100", "vllm/http/chat_stream", "c16") and pick[COST] == pytest.approx(0.5)
    anywhere = cheapest(priced, TARGETS, price=None)
    assert (_named(anywhere), anywhere["price"], anywhere[COST]) == (_named(pick), "spot", pytest.approx(0.25))
    assert cheapest(priced, Targets(ttft_p99_ms=10.0)) is None

    lines = answer_lines(data, {t: t for t in data.tiers}, prices, TARGETS, _price_label)
    assert lines[0].startswith("Cheapest operating point with TTFT p99 ≤ 200 ms and TPOT p99 ≤ 30 ms, at each tier's "
                               "primary price: **a100 · vllm/http/chat_stream · c16**: **$0.5 per 1M output tokens** "
                               "(95 % interval $0.4–$0.625) ($0.1 per 1M tokens in + out; TTFT p99 150.0 ms (95 % "
                               "interval 140.0–160.0), TPOT p99 20.0 ms"), lines[0]
    assert ("Answered well within TTFT ≤ 200 ms and TPOT ≤ 30 ms (the sweep's targets): 99.0% of its requests, "
            "**$0.556 per 1M good output tokens**.") in lines[0]  # $1000 / 1,800 good output tok/s
    assert lines[1] == ("At any listed price: **a100 · vllm/http/chat_stream · c16** at price spot: **$0.25 per 1M "
                        "output tokens** (95 % interval $0.2–$0.312).")  # spot: $500 / 2,500 and / 1,600 tok/s
    assert lines[2].startswith("Cheapest operating point at each tier's primary price, whatever its latency: **l4 · "
                               "vllm/http/chat_stream · c16**: **$0.4 per 1M output tokens**"), lines[2]
    assert lines[3].startswith("Lowest TTFT p99: **a100 · vllm/http/chat_stream · c1**: 20.0 ms"), lines[3]
    # Each tier's pick at every listed price of the tier, per 1M output tokens and per 1M tokens.
    assert ("At every listed price, **a100 · vllm/http/chat_stream · c16** (the tier's cheapest point within TTFT p99 "
            "≤ 200 ms and TPOT p99 ≤ 30 ms): primary $3.6/h: $0.5 per 1M output tokens, $0.1 per 1M tokens; spot "
            "$1.8/h: $0.25 per 1M output tokens, $0.05 per 1M tokens.") in lines
    assert ("At every listed price, **l4 · vllm/http/chat_stream · c4** (the tier's cheapest point within TTFT p99 ≤ "
            "200 ms and TPOT p99 ≤ 30 ms): primary $0.72/h: $0.8 per 1M output tokens, $0.16 per 1M tokens.") in lines
    assert any(line.startswith("1 open-loop trial(s) fell behind their arrivals") for line in lines)
    assert any("answers shorter than asked" in line and "did not pin the length" in line for line in lines)
    assert any(line.startswith("1 of 8 trials are unstable") for line in lines)

    none = answer_lines(data, {t: t for t in data.tiers}, prices, Targets(ttft_p99_ms=10.0), _price_label)
    assert none[0] == ("Nothing measured meets TTFT p99 ≤ 10 ms: the closest is **a100 · vllm/http/chat_stream · c1** "
                       "at TTFT p99 20.0 ms and TPOT p99 5.00 ms, $5 per 1M output tokens.")
    assert "Tier a100: no point within TTFT p99 ≤ 10 ms." in none


def test_the_pareto_frontiers(data: SweepData) -> None:
    prices = {tier: info.prices for tier, info in data.tiers.items()}
    primary = at_price(priced_points(data.sustained, prices))

    def frontier(x: str) -> list[tuple[str, str, str]]:
        return [(r.tier, r.variant, str(r.load)) for r in tables.pareto_frontier(primary, x=x, y=COST).itertuples()]

    assert frontier(TTFT) == [("a100", "vllm", "c1"), ("a100", "vllm", "c4"), ("l4", "vllm", "c4"),
                              ("a100", "vllm", "c16"), ("l4", "vllm", "c16")]
    assert frontier(TPOT) == [("a100", "vllm", "c1"), ("a100", "vllm", "c4"), ("a100", "vllm", "c16"),
                              ("l4", "vllm", "c16")]


def test_the_capacity_plan_in_tokens(data: SweepData) -> None:
    points = capacity_points(data.sustained, TARGETS)
    assert {tier: str(row["load"]) for tier, row in points.items()} == {"a100": "c16", "l4": "c4"}
    a100, l4 = (TokenPlan(tier, points[tier], 50.0, 0.2) for tier in ("a100", "l4"))
    assert a100.nodes == math.ceil(50 * 128 * 1.2 / 2000) == 4  # 7,680 output tok/s needed, 2,000 a node
    assert l4.nodes == 24  # 50 x 100 x 1.2 = 6,000 / 250, exactly: no extra node for a float's rounding
    spot = data.tiers["a100"].prices[1]
    assert float(a100.usd_per_month(spot)) == pytest.approx(4 * 1.8 * 730)
    # Without targets: the most output tokens/s per node of any stable point (the two-node tgi serves 250 a node).
    assert {tier: str(row["load"]) for tier, row in capacity_points(data.sustained, Targets()).items()} == {
        "a100": "c16", "l4": "c16"}


def test_the_report_speaks_of_tokens_and_writes_its_plots(data: SweepData, tmp_path: Path) -> None:
    options = ReportOptions(ttft_p99_ms=200.0, tpot_p99_ms=30.0, peak_rps=50.0)
    report = build_generative_report(data, tmp_path, options)
    md = report.document.to_markdown()
    assert {"pareto_ttft.png", "pareto_tpot.png"} <= set(report.images)
    assert all((tmp_path / name).stat().st_size > 10_000 for name in report.images)
    assert "img/s" not in md and "per 1k images" not in md and "images" not in md.replace("image(s)", "")
    for heading in ("## Answer", "## Capacity plan in tokens", "## Cost per 1M tokens across tiers",
                    "### Pareto frontier: TTFT p99 vs $ per 1M output tokens", "## Tier a100", "## Overloaded trials",
                    "### Tokens: latency, throughput and cost per trial", "## Errors and traffic over time",
                    "## How these numbers were made", "## Failed and skipped trials"):
        assert heading in md, heading
    assert "| a100 | a100 · vllm/http/chat_stream · c16 | 128.0 | 2,000.0 | 7,680.0 | 4 | spot $1.8/h |" in md
    assert "**Sized from the measured grid point**" in md
    assert "| vllm/http/chat_stream | c16 | 75.0 | 150.0 (140.0–160.0) |" in md  # the token table's intervals
    assert "| 2,000.0 (1,600.0–2,500.0) | 15.6 | 0.0% | 99.0% | $0.5 ($0.4–$0.625) |" in md
    assert "| $0.25 ($0.2–$0.312) |" in md  # at the spot price, from the rate's interval
    assert "1 trial(s) were measured 3 times each (`experiment.repeats`)" in md
    assert "**Answers shorter than asked**" in md
    knee = ("ramp l4 · vllm/http/chat_stream · b1 · ramp-r8: output tokens/s left the offered line at ≈ 8 req/s "
            "offered (≈ 800 output tokens/s)")  # 8 req/s x 100 tokens offered, 500 served: below 90 %
    assert any(line.startswith(knee) for line in report.summary), report.summary
    assert any(line.startswith("capacity plan for 50 req/s peak (+20 %): cheapest 4 × a100 · vllm/http/chat_stream · "
                               "c16") for line in report.summary)


def test_answers_not_streamed_and_a_tier_without_a_price_still_report(tmp_path: Path) -> None:
    """Answers not streamed have no TTFT, ITL or TPOT (no metric logged at all); a tier whose runs carry no price has
    no cost figure: the report says so, and the pick comes from what is priced."""
    rows = []
    for i, key in enumerate(k for k in POINTS if k[2] == "closed"):
        timed = ("metrics.ttft", "metrics.tpot", "metrics.itl")
        row = {k: v for k, v in _run(key, i).items() if not k.startswith(timed)}
        row["params.input_format"] = "chat"
        if key[0] == "l4":
            row.pop("params.price_per_hour_usd")
        rows.append(row)
    trials, _ = tidy_trials(pd.DataFrame(rows))
    data = SweepData(SWEEP_ID, "0", None, trials, tier_infos(pd.DataFrame(), trials))
    prices = {tier: info.prices for tier, info in data.tiers.items()}
    assert prices["l4"] == []
    lines = answer_lines(data, {t: t for t in data.tiers}, prices, TARGETS, _price_label)
    assert lines[0] == "Nothing measured meets TTFT p99 ≤ 200 ms and TPOT p99 ≤ 30 ms: no trial has the figures (an " \
                       "answer not streamed has no TTFT or TPOT)."
    assert lines[1].startswith("Cheapest operating point at each tier's primary price, whatever its latency: **a100 · "
                               "vllm/http/chat · c16**: **$0.5 per 1M output tokens**"), lines[1]
    assert "No trial streamed its answers: none has a time to first token." in lines
    report = build_generative_report(data, tmp_path, ReportOptions(peak_rps=5.0))
    md = report.document.to_markdown()
    assert "No trial has a TTFT p99 (an answer not streamed has none)." in md
    assert "No trial on this tier has a cost figure" in md and not report.images


def test_options_of_the_other_workload_are_refused(data: SweepData) -> None:
    with pytest.raises(ReportError, match=r"--slo-p99-ms \(experiment.slo.p99_ms\) is not allowed .* give "
                                          r"--ttft-p99-ms and --tpot-p99-ms instead"):
        report_builder(data, ReportOptions(slo_p99_ms=50.0))
    image = SweepData(SWEEP_ID, "0", None, data.trials.drop(columns="workload"), data.tiers)
    with pytest.raises(ReportError, match=r"--peak-rps \(capacity.peak_rps\) is not allowed .* give --traffic-img-s"):
        report_builder(image, ReportOptions(peak_rps=5.0))
    assert report_builder(data, ReportOptions(ttft_p99_ms=5.0)) is build_generative_report


@pytest.mark.parametrize(("argv", "says"), [
    (["--peak-rps", "0"], "--peak-rps=0 is not allowed: give the peak in requests/s, > 0"),
    (["--peak-rps", "10", "--headroom", "20"], "--headroom=20 is not allowed: a fraction of the peak in [0, 1]"),
    (["--peak-rps", "10", "--traffic-img-s", "100"], "--traffic-img-s is not allowed with --peak-rps"),
    (["--ttft-p99-ms", "-1"], "--ttft-p99-ms=-1 is not allowed: give a latency target > 0 in ms"),
])
def test_the_report_command_refuses_bad_token_options(argv: list[str], says: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        report_cli.parse_args(argv)
    assert says in capsys.readouterr().err


def test_the_report_command_takes_the_token_options() -> None:
    args = report_cli.parse_args(["s", "--ttft-p99-ms", "200", "--tpot-p99-ms", "30", "--peak-rps", "50",
                                  "--headroom", "0.3"])
    assert (args.ttft_p99_ms, args.tpot_p99_ms, args.peak_rps, args.headroom, args.capacity) == (200, 30, 50, 0.3, None)


def _log(uri: str) -> str:
    """The synthetic sweep in an MLflow store, as a sweep logs it (a sweep run, trial runs, the ramp's bins as step
    metrics); returns the sweep run's id."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.create_experiment("tierbench")
    sweep = client.create_run(experiment, run_name=f"sweep {SWEEP_ID}",
                              tags={"run_level": "sweep", "sweep_id": SWEEP_ID, "synthetic": "true"}).info.run_id
    for i, key in enumerate(POINTS):
        row = _run(key, i)
        run = client.create_run(experiment, tags={"mlflow.parentRunId": sweep}).info.run_id
        metrics = [Metric(k.removeprefix("metrics."), float(v), 0, 0) for k, v in row.items()
                   if k.startswith("metrics.")]
        if key[2] == "ramp":
            metrics += [Metric(f"series_{name}", float(value), 0, step) for name in RAMP.columns
                        for step, value in enumerate(RAMP[name])]
        params = [Param(k.removeprefix("params."), v) for k, v in row.items() if k.startswith("params.")]
        tags = [RunTag(k.removeprefix("tags."), v) for k, v in row.items() if k.startswith("tags.")]
        client.log_batch(run, metrics=metrics, params=params, tags=tags)
        client.set_terminated(run)
    client.set_terminated(sweep)
    return sweep


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """The synthetic sweep in a temporary MLflow store: its URI, the sweep run's id and a folder for results."""
    folder = tmp_path_factory.mktemp("generative")
    uri = premigrated_store(folder / "mlflow")
    return uri, _log(uri), folder / "runs"


def test_the_command_reports_a_generative_sweep_from_mlflow(store: tuple[str, str, Path]) -> None:
    uri, _, runs = store
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report_cli.main([SWEEP_ID, "--tracking-uri", uri, "--results-dir", str(runs), "--no-log",
                                "--ttft-p99-ms", "200", "--tpot-p99-ms", "30", "--peak-rps", "50"])
    printed = out.getvalue()
    assert code == 0, printed
    assert "  - Cheapest operating point with TTFT p99 ≤ 200 ms and TPOT p99 ≤ 30 ms, at each tier's primary price: " \
           "a100 · vllm/http/chat_stream · c16: $0.5 per 1M output tokens" in printed
    folder = runs / SWEEP_ID / "report"
    assert {p.name for p in folder.glob("*.png")} >= {"pareto_ttft.png", "pareto_tpot.png"}
    assert any(p.name.startswith("traffic_") for p in folder.glob("*.png"))  # the ramp, from its step metrics
    with contextlib.redirect_stdout(io.StringIO()):
        refused = report_cli.main([SWEEP_ID, "--tracking-uri", uri, "--results-dir", str(runs), "--no-log",
                                   "--slo-p99-ms", "50"])
    assert refused == 2 and (folder / "pareto_ttft.png").exists()  # refused before the old plots went


def test_the_sweep_run_carries_the_token_headline_figures(store: tuple[str, str, Path]) -> None:
    from mlflow.tracking import MlflowClient

    uri, sweep, runs = store
    published = make_report(uri, "tierbench", SWEEP_ID, runs, ReportOptions(), log_to_mlflow=True)
    assert published.logged_to == sweep
    metrics = MlflowClient(uri).get_run(sweep).data.metrics
    assert metrics["min_cost_per_1m_output_tokens_usd"] == pytest.approx(0.4)
    assert metrics["min_ttft_p99_ms"] == pytest.approx(20.0)
    assert metrics["max_output_tokens_s"] == pytest.approx(2000.0)
    assert "min_cost_per_1k_images_usd" not in metrics and metrics["trials_overloaded"] == 1


def test_the_end_of_a_sweep_answers_within_its_targets_and_plans_its_peak(store: tuple[str, str, Path]) -> None:
    """`sweep_answer` takes a generative sweep's targets from experiment.slo, and its peak from capacity.peak_rps
    where the config has one (read defensively: the schema may not have it yet)."""
    from types import SimpleNamespace as Config

    from experiments.report.publish import sweep_answer

    uri, _, runs = store
    cfg = Config(sweep_id=SWEEP_ID, results_dir=str(runs), mlflow=Config(tracking_uri=uri, experiment="tierbench"),
                 experiment=Config(workload="generative", slo=Config(p99_ms=None, ttft_p99_ms=200.0, tpot_p99_ms=30.0)),
                 capacity=Config(traffic_img_s=None, peak_img_s=None, headroom=0.2, peak_rps=50.0))
    lines = sweep_answer(cfg)
    assert any(line.startswith("  - Cheapest operating point with TTFT p99 ≤ 200 ms and TPOT p99 ≤ 30 ms") for line in
               lines), lines
    assert any(line.startswith("  - capacity plan for 50 req/s peak (+20 %): cheapest 4 × a100") for line in lines)
    del cfg.capacity.peak_rps  # a schema without the key: no plan, no failure
    assert not any("capacity plan" in line for line in sweep_answer(cfg))

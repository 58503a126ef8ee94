"""Traffic from a trace (issue 32, items 3 and 4): both formats read and told apart by their header, the shipped
SYNTHETIC example, the schedule that follows the trace's shape (checked against its per-step rates), every refusal
before anything starts (key, value, fix), and the cost of a replay in the report. No server runs here: the replay end to
end is in tests/test_tiers_emulated.py (one trace trial in its two-tier sweep)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.config.choices import LoadMode
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.trace import EXAMPLE, check_trace, read_trace, trace_settings
from experiments.config.validation import validate
from experiments.measure.load import LoadPoint, OpenLoopLoad
from experiments.measure.replay import Replay
from experiments.report.trace_section import trace_traffic

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- reading -----------------------------------------------------------------------------------------------------

def test_arrival_times_are_counted_per_second_of_the_recording(tmp_path: Path) -> None:
    trace = read_trace(_write(tmp_path, "# a comment\narrival_s\n10.0\n10.2\n10.9\n11.5\n13.1\n13.2\n"))
    assert trace.kind == "arrival_s" and trace.rates == (3.0, 1.0, 0.0, 2.0)  # seconds 10, 11, 12, 13
    assert trace.peak == 3.0 and trace.mean_to_peak == pytest.approx(6 / 4 / 3)
    assert trace.shape() == (1.0, 1 / 3, 0.0, 2 / 3)


def test_rates_per_step_are_taken_as_they_are(tmp_path: Path) -> None:
    trace = read_trace(_write(tmp_path, "rate_per_s,comment\n40,night\n100,noon\n60,evening\n"))
    assert trace.kind == "rate_per_s" and trace.rates == (40.0, 100.0, 60.0) and trace.mean_to_peak == pytest.approx(
        200 / 3 / 100)


def test_the_shipped_example_is_labelled_synthetic_and_diurnal() -> None:
    text = (REPO / EXAMPLE).read_text()
    assert text.startswith("# SYNTHETIC example trace, not production traffic")
    trace = read_trace(str(REPO / EXAMPLE))
    assert trace.kind == "rate_per_s" and len(trace.rates) == 288  # a day in 5-minute steps
    night, afternoon = np.mean(trace.rates[:60]), np.mean(trace.rates[156:180])  # 00:00-05:00, 13:00-15:00
    assert afternoon > 2 * night and trace.mean_to_peak == pytest.approx(0.548, abs=0.001)


# --- the schedule ------------------------------------------------------------------------------------------------

def test_the_arrivals_follow_the_traces_rates_step_by_step() -> None:
    """4 steps over 2 s at a peak of 1,000 req/s: 500, 1,000, 0 and 250 req/s, looped for 40 passes."""
    arrivals = Replay((0.5, 1.0, 0.0, 0.25), 2.0).arrivals(1000.0, np.random.default_rng(1))
    times = np.cumsum(np.concatenate([arrivals.take(5000) for _ in range(6)]))
    passes = np.floor(times[-1] / 2.0)
    times = times[times < passes * 2.0]
    per_step = np.bincount(np.floor(times % 2.0 / 0.5).astype(int), minlength=4) / passes / 0.5
    assert per_step[2] == 0  # a step at rate 0 gets no arrival
    assert per_step[[0, 1, 3]] == pytest.approx([500.0, 1000.0, 250.0], rel=0.05)


def test_the_python_client_and_the_compiled_engine_draw_the_same_schedule() -> None:
    replay = Replay((0.2, 1.0), 1.0)
    in_chunks = replay.arrivals(50.0, np.random.default_rng(7)).take(5000)
    one_by_one = replay.arrivals(50.0, np.random.default_rng(7))
    assert np.allclose([one_by_one.next_gap() for _ in range(5000)], in_chunks, rtol=1e-9, atol=1e-12)  # sums in chunks


def test_an_open_loop_trace_load_takes_its_gaps_from_the_replay() -> None:
    replay = Replay((1.0, 0.5), 2.0)
    load = LoadPoint(LoadMode.TRACE, 20.0, replay).generator(None, 1.0, 1, 0, 64)
    assert isinstance(load, OpenLoopLoad)
    load._begin(0.0)
    expected = replay.arrivals(20.0, np.random.default_rng(0)).take(10)
    assert [load._gap() for _ in range(10)] == pytest.approx(expected.tolist())


def test_a_replay_against_a_server_offers_the_traces_mean_each_window_from_intended_times() -> None:
    """A pass of (1.0, 0.2) in each 0.5 s window at a peak of 200 req/s: 60 % of the peak, 120 req/s, 60 per
    window; latency counts from each request's intended time, never before it was sent."""
    import asyncio

    from tests.test_load import SlowServer, _run

    server = SlowServer(service_s=0.001)
    load = LoadPoint(LoadMode.TRACE, 200.0, Replay((1.0, 0.2), 0.5)).generator(server.infer, 5.0, 1, 0, 64)
    _, parts = asyncio.run(_run(load, window_s=0.5, windows=3))
    assert 35 <= np.mean([p.requests for p in parts]) <= 85
    for part in parts:
        assert np.all(part.send_s >= part.intended_s - 1e-6) and np.all(part.latency_s >= part.send_latency_s - 1e-9)


def test_the_compiled_engine_gets_the_replays_gaps_as_its_schedule_file() -> None:
    import shutil

    from experiments.measure.engine.compiled_load import CompiledLoad
    from serving.clients.wire import WireRequest

    replay = Replay((0.5, 1.0), 1.0)
    load = CompiledLoad(WireRequest("http1", "127.0.0.1", 1, (b"x",)), LoadPoint(LoadMode.TRACE, 40.0, replay), 1.0, 1,
                        actor_index=0, horizon_s=10.0)
    try:
        args = load._arguments()
        gaps = np.fromfile(args[args.index("--open") + 1], dtype="<f8")
    finally:
        shutil.rmtree(load._folder)
    assert np.array_equal(gaps, replay.arrivals(40.0, np.random.default_rng(0)).take(gaps.size))
    assert np.sum(gaps) > 10.0  # the schedule outlasts the trial's horizon


def test_a_replays_load_is_split_by_rate_and_keeps_its_shape() -> None:
    assert LoadMode.TRACE.open_loop and LoadMode.TRACE.split(90.0, 3) == [30.0, 30.0, 30.0]
    assert LoadMode.TRACE.label(0, 120.0) == "trace-r120"


# --- refusals (before anything starts) ---------------------------------------------------------------------------

def _cfg(*overrides: str):
    return load_config(["experiment.load_mode=trace", "experiment.request_rates=[50]", *overrides])


@pytest.mark.parametrize(("text", "says"), [
    (None, "no such file"),
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("rate_per_s\n", "has a header (rate_per_s) but no rows"),
    ("time\n1\n2\n", "the header 'time' names neither format"),
    ("arrival_s\n1.0\n3.0\n2.0\n", "arrival times must be in order, but row 3 (2 s) comes before row 2 (3 s)"),
    ("rate_per_s\n10\n-1\n", "row 2 (rate_per_s='-1') is not a number >= 0"),
    ("rate_per_s\n10\nmany\n", "row 2 (rate_per_s='many') is not a number >= 0"),
    ("rate_per_s\n0\n0\n", "every rate_per_s is 0"),
])
def test_a_bad_trace_file_is_refused_with_key_value_and_fix(tmp_path: Path, text: str | None, says: str) -> None:
    path = str(tmp_path / "missing.csv") if text is None else _write(tmp_path, text, f"t{abs(hash(text))}.csv")
    with pytest.raises(ConfigError) as refused:
        validate(_cfg(f"experiment.trace={path}"))
    assert f"experiment.trace='{path}' is not allowed: " in str(refused.value) and says in str(refused.value)
    assert "docs/troubleshooting.md#bad-input" in str(refused.value)


@pytest.mark.parametrize(("overrides", "key", "says"), [
    ([], "experiment.trace=None", "experiment.load_mode=trace replays a trace file: give one, e.g. "
                                  "experiment.trace=conf/traces/diurnal_example.csv"),
    ([f"experiment.trace={EXAMPLE}", "experiment.request_rates=[2000]"], "experiment.request_rates=2000.0",
     "raise experiment.max_in_flight to at least 2000"),
    ([f"experiment.trace={EXAMPLE}", "experiment.request_rates=[50]", "experiment.max_in_flight=40"],
     "experiment.request_rates=50.0", "experiment.max_in_flight=40 lets be outstanding at once"),
    ([f"experiment.trace={EXAMPLE}", "experiment.slo.p99_ms=50"], "experiment.slo.p99_ms=50.0",
     "Search with experiment.load_mode=poisson (or closed) in the same sweep_id"),
])
def test_trace_settings_that_cannot_work_are_refused(overrides: list[str], key: str, says: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as refused:
        validate(_cfg(*overrides))
    assert f"{key} is not allowed: " in str(refused.value) and says in str(refused.value)


def test_a_trace_without_load_mode_trace_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError, match="a trace is replayed only with experiment.load_mode=trace"):
        validate(load_config([f"experiment.trace={EXAMPLE}"]))


def test_a_good_trace_passes_and_names_itself_in_the_trials_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    cfg = _cfg(f"experiment.trace={EXAMPLE}")
    assert check_trace(cfg.experiment) == []
    settings = trace_settings(cfg.experiment)
    assert settings["trace"] == EXAMPLE and settings["trace_kind"] == "rate_per_s" and settings["trace_steps"] == 288
    assert settings["trace_mean_to_peak"] == pytest.approx(0.548, abs=0.001) and len(settings["trace_sha256"]) == 16
    assert trace_settings(load_config([]).experiment) == {}  # other load modes keep the identity they had


# --- cost --------------------------------------------------------------------------------------------------------

def test_a_replays_traffic_is_its_peak_and_average_in_images() -> None:
    row = pd.Series({"request_rate": 100.0, "batch_size": 4, "trace_mean_to_peak": 0.5})
    traffic = trace_traffic(row, 0.2)
    assert (traffic.peak_img_s, traffic.average_img_s, float(traffic.required_img_s)) == (400.0, 200.0, 480.0)


def test_the_report_prices_the_images_a_replay_served_and_plans_its_peak() -> None:
    """SYNTHETIC figures: a replay at peak 100 req/s of b1 (mean/peak 0.5) served 48 img/s on a $0.36/h tier, so an
    image served cost 0.36 / 3600 / 48 x 1000 = $0.00208 per 1k; its peak of 100 img/s + 20 % needs 1 node of a
    search result of 200 (180-220) img/s per node: $262.8/month, $0.002 per 1k images of its 50 img/s average."""
    from experiments.config.prices import Price
    from experiments.report.data import SweepData, TierInfo
    from experiments.report.render import Document
    from experiments.report.trace_section import trace_section

    trial = {"status": "ok", "tier": "a100", "stack": "triton_onnx/http/tensor", "batch_size": 1, "load_mode": "trace",
             "request_rate": 100.0, "trace": EXAMPLE, "trace_mean_to_peak": "0.5", "throughput_img_s": 48.0,
             "latency_p50_ms": 3.0, "latency_p99_ms": 40.0, "late_requests": 2.0, "overloaded": False,
             "cost_per_1k_images_usd": 0.36 / 3600 / 48 * 1000}
    slo = pd.DataFrame([{"tier": "a100", "status": "ok", "variant": "triton_onnx", "protocol": "http",
                         "input_format": "tensor", "batch_size": 1, "slo_p99_ms": 50.0, "slo_met": 1.0,
                         "slo_limited": 0.0, "slo_max_throughput_img_s": 200.0, "slo_stable_at_max": 1.0,
                         "slo_max_throughput_img_s_ci_low": 180.0, "slo_max_throughput_img_s_ci_high": 220.0}])
    closed = {**trial, "load_mode": "closed", "request_rate": 0.0}
    data = SweepData("synthetic-trace", "0", None, pd.DataFrame([trial, closed]),
                     {"a100": TierInfo("a100", prices=[Price("primary", 0.36)])}, slo=slo)
    doc = Document("t")
    lines = trace_section(doc, data, {}, 0.2, None)
    text = doc.to_markdown()
    assert "# Traffic from a trace" in text and text.count("| a100 |") == 2  # a replay and a plan; no closed trial
    assert ("| a100 | triton_onnx/http/tensor | 1 | conf/traces/diurnal_example.csv | 100.0 | 50.0 | 48.0 | 3.00 | "
            "40.0 | 2 | no | $0.00208 |") in text
    assert "| 100.0 | 50.0 | a100 | triton_onnx/http/tensor b1 | 1 (1–1) | primary $0.36/h" in text
    assert "$263 ($263–$263) | $0.002 |" in text
    assert lines[0] == ("trace replay a100 · triton_onnx/http/tensor · b1 at peak 100 req/s: $0.00208 per 1k images "
                        "served, p99 40.0 ms")
    assert lines[1].startswith("trace traffic (peak 100 img/s, average 50.0): 1 × a100 · triton_onnx/http/tensor · b1")
    no_search = SweepData("synthetic-trace", "0", None, pd.DataFrame([trial]), data.tiers)
    doc = Document("t")
    trace_section(doc, no_search, {}, 0.2, None)
    assert "experiment.load_mode=poisson experiment.slo.p99_ms=MS sweep_id=synthetic-trace" in doc.to_markdown()

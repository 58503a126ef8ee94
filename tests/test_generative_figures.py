"""A generative trial's figures from its requests' token traces: TTFT from when the request was due, TPOT, every
ITL, tokens per second by completion, $ per 1M tokens, goodput within the targets; the load's records keep each
request's trace and end it at its answer's last byte; merged windows keep traces in order; repeats pool them
(fast, no server)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from experiments.config.schema import SloConfig
from experiments.measure.load import ClosedLoopLoad
from experiments.measure.metrics import window_metrics, windows_stable
from experiments.measure.pooled import pooled_metrics
from experiments.measure.samples import Failures, WindowSamples
from serving.clients.base import ServerReport
from serving.workloads.generative.tokens import TokenTrace
from serving.workloads.registry import workload

GENERATIVE = workload("generative")


def trace(first_s: float, itl_s: float, tokens: int, input_tokens: int = 10, requested: int | None = None,
          events: int | None = None) -> TokenTrace:
    count = tokens if events is None else events
    return TokenTrace(first_s + itl_s * np.arange(count), tokens, input_tokens, requested or tokens, "usage")


def samples(traces: list[TokenTrace], waits_s: list[float], tails_s: list[float], duration_s: float = 10.0,
            completed: list[TokenTrace] | None = None, failed: int = 0) -> WindowSamples:
    """Requests due at 0, 1, 2, ... s, sent `waits_s` later, each ending `tails_s` after its last output."""
    n = len(traces)
    intended = np.arange(n, dtype=float)
    send = intended + np.asarray(waits_s)
    done = send + np.array([t.output_after_s[-1] if t.streamed else 0.0 for t in traces]) + np.asarray(tails_s)
    failures = Failures(intended_s=np.zeros(failed), send_s=np.zeros(failed), done_s=np.zeros(failed),
                        outcome=np.full(failed, 8), status=np.zeros(failed, dtype=np.int64))
    if completed is None:  # the same requests completed inside the window
        completed, c_intended, c_send, c_done = traces, intended, send, done
    else:  # others, each sent when due and done at its last output
        c_intended = c_send = np.zeros(len(completed))
        c_done = np.array([t.output_after_s[-1] if t.streamed else 0.0 for t in completed])
    return WindowSamples(0.0, duration_s, 1, intended, send, done, np.full(n, math.nan), np.zeros(n, dtype=np.int32),
                         completed=n, sent=n, failures=failures, detail=traces, completed_detail=completed,
                         completed_intended_s=c_intended, completed_send_s=c_send, completed_done_s=c_done)


def test_ttft_counts_from_when_the_request_was_due_and_tpot_from_the_first_token_to_the_end() -> None:
    # two requests: the second waited 100 ms for a free slot before it went out
    window = samples([trace(0.050, 0.010, 11), trace(0.030, 0.020, 6)], waits_s=[0.0, 0.100], tails_s=[0.0, 0.0])
    m = window_metrics(window, 3.6, GENERATIVE, SloConfig())
    ttft = sorted([50.0, 130.0])
    assert m["ttft_p50_ms"] == pytest.approx(np.percentile(ttft, 50))
    assert m["ttft_mean_ms"] == pytest.approx(90.0)
    # TPOT = (end-to-end - TTFT) / (tokens - 1): 10 ms and 20 ms, whatever the wait before the send
    assert m["tpot_p50_ms"] == pytest.approx(15.0) and m["tpot_mean_ms"] == pytest.approx(15.0)
    # every gap: ten of 10 ms and five of 20 ms
    assert m["itl_mean_ms"] == pytest.approx((10 * 10 + 5 * 20) / 15)
    assert m["latency_p50_ms"] == pytest.approx(np.percentile([150.0, 230.0], 50))
    assert (m["output_tokens_mean"], m["output_tokens_min"], m["output_tokens_max"]) == (8.5, 6.0, 11.0)
    assert m["tokens_per_event_mean"] == pytest.approx(1.0) and m["output_short_share"] == 0.0
    assert "throughput_img_s" not in m and "cost_per_1k_images_usd" not in m


def test_tokens_per_second_count_the_answers_completed_in_the_windows_and_price_them() -> None:
    answered = [trace(0.05, 0.01, 100, input_tokens=300) for _ in range(4)]
    window = samples(answered[:2], [0, 0], [0, 0], duration_s=2.0, completed=answered)
    m = window_metrics(window, 3.6, GENERATIVE, SloConfig())
    assert m["output_tokens_s"] == pytest.approx(200.0) and m["input_tokens_s"] == pytest.approx(600.0)
    assert m["total_tokens_s"] == pytest.approx(800.0)
    # $3.60/h is $0.001/s: at 200 tok/s, 1M output tokens take 5,000 s
    assert m["cost_per_1m_output_tokens_usd"] == pytest.approx(5.0)
    assert m["cost_per_1m_tokens_usd"] == pytest.approx(1.25)
    assert m["requests_s"] == pytest.approx(1.0)


def test_goodput_holds_every_request_to_the_ttft_and_tpot_targets() -> None:
    traces = [trace(0.05, 0.01, 11), trace(0.30, 0.01, 11), trace(0.05, 0.05, 11), trace(0.05, 0.01, 1)]
    window = samples(traces, [0, 0, 0, 0], [0, 0, 0, 0], failed=1)
    m = window_metrics(window, 3.6, GENERATIVE, SloConfig(ttft_p99_ms=100, tpot_p99_ms=20))
    # the slow first token and the slow pace miss; the one-token answer has no pace to miss; the failure is not good
    assert m["goodput_rps"] == pytest.approx(2 / 10.0)
    assert m["goodput_output_tokens_s"] == pytest.approx(12 / 10.0)
    assert m["goodput_share"] == pytest.approx(2 / 5)
    assert "goodput_rps" not in window_metrics(window, 3.6, GENERATIVE, SloConfig())


def test_a_server_that_packs_tokens_in_events_or_stops_early_shows_it() -> None:
    packed = trace(0.05, 0.04, 16, events=4, requested=16)
    short = trace(0.05, 0.01, 5, requested=16)
    m = window_metrics(samples([packed, short], [0, 0], [0, 0]), 3.6, GENERATIVE, SloConfig())
    assert m["tokens_per_event_mean"] == pytest.approx(21 / 9)
    assert m["output_short_share"] == pytest.approx(0.5) and m["requested_tokens_mean"] == 16.0


def test_an_answer_not_streamed_has_tokens_but_no_token_timing() -> None:
    whole = TokenTrace(np.zeros(0), 20, 5, 20, "usage")
    m = window_metrics(samples([whole, whole], [0, 0], [0.2, 0.3]), 3.6, GENERATIVE, SloConfig())
    assert not any(k.startswith(("ttft", "tpot", "itl")) for k in m)
    assert m["output_tokens_s"] == pytest.approx(4.0) and m["latency_p50_ms"] == pytest.approx(250.0)


def test_the_load_keeps_each_trace_and_ends_a_request_at_its_answers_last_byte() -> None:
    async def send() -> ServerReport:
        await asyncio.sleep(0.02)
        # the answer's last byte came 10 ms after the send: the 10 ms more the client spent are not latency
        return ServerReport(math.nan, answered_after_s=0.010, detail=trace(0.005, 0.001, 6))

    async def scenario() -> WindowSamples:
        load = ClosedLoopLoad(send, concurrency=2, timeout_s=5, images_per_request=1)
        load.start()
        await load.wait_warm(2, 0.05, 5)
        start = load.now()
        window = await load.collect(start, start + 0.3)
        await load.stop()
        return window

    window = asyncio.run(scenario())
    assert window.requests > 4 and len(window.detail) == window.requests
    assert np.allclose(window.done_s - window.send_s, 0.010)
    assert len(window.completed_detail) == window.completed
    assert all(t.output_tokens == 6 for t in window.detail)


def test_merged_windows_keep_each_trace_with_its_request() -> None:
    a = samples([trace(0.01, 0.01, 2), trace(0.02, 0.01, 3)], [0, 0], [0, 0], duration_s=2.0)
    b = samples([trace(0.03, 0.01, 4)], [0], [0], duration_s=2.0)
    b.intended_s, b.send_s, b.done_s = b.intended_s + 0.5, b.send_s + 0.5, b.done_s + 0.5  # due between a's two
    merged = WindowSamples.merge([a, b])
    assert [t.output_tokens for t in merged.detail] == [2, 4, 3]
    assert len(merged.completed_detail) == 3


def test_stability_compares_tokens_per_second() -> None:
    steady = [samples([trace(0.01, 0.01, 10)] * 3, [0] * 3, [0] * 3) for _ in range(3)]
    assert windows_stable(steady, 10, 95, GENERATIVE)
    fewer = [*steady[:2], samples([trace(0.01, 0.01, 10)] * 3, [0] * 3, [0] * 3,
                                  completed=[trace(0.01, 0.01, 5)] * 3)]
    assert not windows_stable(fewer, 10, 95, GENERATIVE)


def test_repeats_pool_the_raw_token_figures_and_price_the_pooled_rate() -> None:
    repeats = []
    for first in (0.04, 0.05, 0.06):
        window = samples([trace(first, 0.01, 11)] * 5, [0] * 5, [0] * 5, duration_s=1.0)
        repeats.append((window, window_metrics(window, 3.6, GENERATIVE, SloConfig())))
    pooled = pooled_metrics(repeats, 3.6, GENERATIVE)
    assert pooled["repeats"] == 3.0
    assert pooled["ttft_p50_ms"] == pytest.approx(50.0)
    assert pooled["ttft_p50_ms_ci_low"] <= 50.0 <= pooled["ttft_p50_ms_ci_high"]
    assert pooled["output_tokens_s"] == pytest.approx(55.0)
    assert pooled["cost_per_1m_output_tokens_usd"] == pytest.approx(1e6 / 55.0 / 1000.0)
    assert "output_tokens_s_ci_low" in pooled and "cost_per_1m_output_tokens_usd_ci_high" in pooled
    assert "throughput_img_s" not in pooled


def test_goodput_counts_good_answers_as_tokens_per_second_counts_answers_never_more() -> None:
    """Rates by completion, the share by schedule: a good answer completed inside the window counts in the rate even
    when it was due before the window; goodput never exceeds what was answered."""
    early = trace(0.05, 0.01, 11)
    window = samples([trace(0.05, 0.01, 11)], [0], [0], completed=[early, early, trace(0.5, 0.01, 11)])
    m = window_metrics(window, 3.6, GENERATIVE, SloConfig(ttft_p99_ms=100))
    assert m["goodput_rps"] == pytest.approx(2 / 10.0) and m["goodput_output_tokens_s"] == pytest.approx(2.2)
    assert m["goodput_output_tokens_s"] <= m["output_tokens_s"] and m["goodput_share"] == 1.0

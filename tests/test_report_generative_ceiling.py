"""The generative report's "How close to the engine's limit", on a SYNTHETIC sweep (never measured): on l4, two
launched servers set against their engine's in-process output tokens/s (a tokens ceiling of round numbers) and a
vLLM whose engine was not timed; on a100, an endpoint. Each trial's efficiency figures and verdict are made by the
functions a sweep makes them with (`token_efficiency`, `token_verdict`), and the section is checked to show them, per
tier and backend; a sweep of endpoints alone has no such section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.measure.efficiency import Bottleneck
from experiments.measure.token_efficiency import FIXES, TokenCeiling, token_efficiency, token_verdict
from experiments.report.build import ReportOptions
from experiments.report.data import SweepData, tidy_trials, tier_infos
from experiments.report.generative.build import build_generative_report
from experiments.report.generative.ceiling_section import ceiling_section
from experiments.report.render import Document

SWEEP_ID = "synthetic-generative-ceiling"
ENGINE = "transformers/cuda/dtype=bfloat16"
# The engine in-process on l4: output tokens/s at each batch timed (read between them at a server's average batch).
CEILING = TokenCeiling(hostname="l4-box", input_tokens=64, output_tokens=32,
                       points={ENGINE: {"1": 400.0, "2": 700.0, "4": 1300.0, "8": 2000.0}})
PRICES = {"l4": 0.72, "a100": 3.6}
# (tier, backend, variant, engine's max batch, concurrency) -> served output tok/s, the server's average generate,
# GPU busy %, mean TTFT and end to end (ms)
TRIALS = {
    ("l4", "serve_transformers", "serve_transformers_when_free", 4, 1): (300.0, 1.0, 30.0, 20.0, 200.0),
    ("l4", "serve_transformers", "serve_transformers_when_free", 4, 4): (1000.0, 3.0, 85.0, 20.0, 200.0),
    ("l4", "serve_transformers", "serve_transformers_when_free", 4, 8): (1105.0, 4.0, 60.0, 20.0, 200.0),
    ("l4", "triton_stream", "triton_stream", 8, 1): (560.0, 1.0, 40.0, 20.0, 200.0),  # 140 %: the timing reads low
    ("l4", "triton_stream", "triton_stream", 8, 4): (520.0, 4.0, 40.0, 20.0, 200.0),
    ("l4", "vllm", "vllm", 0, 4): (900.0, None, 50.0, 20.0, 200.0),  # its engine not timed: no figure
    ("a100", "endpoint", "openai", 0, 4): (800.0, None, None, 20.0, 200.0),  # an endpoint: the client's verdict
}


def _run(key: tuple[str, str, str, int, int], index: int) -> dict[str, Any]:
    """One trial run as `mlflow.search_runs` returns it, its efficiency figures and verdict made as a sweep makes them
    (`TokenCeilingJob.annotate`)."""
    tier, backend, variant, max_batch, concurrency = key
    served, merged, busy, ttft, latency = TRIALS[key]
    price = PRICES[tier]
    metrics = {"ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft, "ttft_mean_ms": ttft, "tpot_p50_ms": 6.0,
               "tpot_p99_ms": 8.0, "tpot_mean_ms": 6.0, "latency_p50_ms": latency, "latency_p99_ms": 2 * latency,
               "latency_mean_ms": latency, "output_tokens_s": served, "total_tokens_s": 3 * served,
               "requests_s": served / 32, "error_rate": 0.0, "output_tokens_mean": 32.0,
               "cost_per_1m_output_tokens_usd": price / 3600 / served * 1e6,
               "cost_per_1m_tokens_usd": price / 3600 / (3 * served) * 1e6, "stable": 1.0, "overloaded": 0.0}
    params = {"gpu_tier": tier, "backend": backend, "backend_variant": variant, "protocol": "http",
              "input_format": "chat_stream", "batch_size": "1", "concurrency": str(concurrency), "load_mode": "closed",
              "request_rate": "0.0", "workload": "generative", "tokens_counted_by": "usage",
              "price_per_hour_usd": str(price)}
    tags = {"status": "ok", "run_level": "trial", "sweep_id": SWEEP_ID, "trial_key": f"k{index}", "gpu_tier": tier,
            "mlflow.runName": f"{tier}/{variant}/http/chat_stream/b1/c{concurrency}"}
    if busy is not None:
        metrics["gpu_util_pct"] = busy
    if merged is not None:  # a launched server whose engine was timed: set against it at the batch it generated
        metrics["server_batch_avg"] = merged
        metrics |= token_efficiency(metrics, CEILING.at(ENGINE, merged), merged)
        params["ceiling_runtime"] = ENGINE
        tags |= token_verdict(metrics, params, True, 0.9, max_batch).tags()
    elif backend == "endpoint":  # what the client can decide, as the sweep tags an endpoint's trial
        metrics["client_cpu_util_max"] = 0.95
        tags |= {"bottleneck": "client", "bottleneck_evidence": "the busiest client actor used 95 % of a core",
                 "bottleneck_fix": Bottleneck.CLIENT.fix}
    start = pd.Timestamp("2026-12-01", tz="UTC") + pd.Timedelta(minutes=index)
    return {"run_id": f"run{index:02d}", "start_time": start, **{f"tags.{k}": v for k, v in tags.items()},
            **{f"params.{k}": v for k, v in params.items()}, **{f"metrics.{k}": v for k, v in metrics.items()}}


def _data(keys: list[tuple[str, str, str, int, int]]) -> SweepData:
    trials, _ = tidy_trials(pd.DataFrame([_run(key, i) for i, key in enumerate(keys)]))
    return SweepData(SWEEP_ID, "0", None, trials, tier_infos(pd.DataFrame(), trials))


@pytest.fixture(scope="module")
def data() -> SweepData:
    return _data(list(TRIALS))


def test_each_trial_carries_the_figures_the_section_shows(data: SweepData) -> None:
    """The synthetic figures are the sweep's own: the share is served over the engine at the batch generated."""
    row = data.ok.set_index(["variant", "concurrency"]).loc[("serve_transformers_when_free", 4)]
    assert row["ceiling_batch"] == 3.0 and row["ceiling_output_tokens_s"] == pytest.approx(1000.0)  # 700 + 600 / 2
    assert row["ceiling_share"] == pytest.approx(1.0) and row["bottleneck"] == "decode"
    verdicts = dict(zip(zip(data.ok["variant"], data.ok["concurrency"], strict=True), data.ok["bottleneck"],
                        strict=True))
    assert verdicts == {("openai", 4): "client", ("serve_transformers_when_free", 1): "load",
                        ("serve_transformers_when_free", 4): "decode", ("serve_transformers_when_free", 8): "queue",
                        ("triton_stream", 1): "load", ("triton_stream", 4): "transport", ("vllm", 4): ""}


def test_the_section_shows_per_tier_and_backend_the_engine_the_served_tokens_the_share_and_the_verdict(
        data: SweepData) -> None:
    doc = Document("t")
    summary = ceiling_section(doc, data, {"l4": "l4", "a100": "a100"})
    md = doc.to_markdown()
    # The closest believable point: serve_transformers_when_free at c4, 1,000 of 1,000 tok/s at batch 3 (triton's c1
    # outran its engine: its in-process figure reads low there, so it is not the closest).
    assert summary == ["closest to its engine: l4 · serve_transformers_when_free/http/chat_stream · c4: 100 % of "
                       f"{ENGINE}'s in-process output tokens/s at batch 3 (bottleneck: decode)"]
    assert "## How close to the engine's limit" in md and "### Tier l4" in md and "### Tier a100" in md
    assert "in this order: client, kv_cache, queue, prefill, decode, cpu, transport, load" in md
    # Each backend's row: its point that served the most output tokens/s, against its engine at the batch generated.
    assert (f"| `serve_transformers_when_free` | `{ENGINE}` | http/chat_stream · c8 | 4 | 1,300.0 | 1,105.0 | 85 % "
            "| queue |") in md
    assert (f"| `triton_stream` | `{ENGINE}` | http/chat_stream · c1 | 1 | 400.0 | 560.0 | 140 %, reads low "
            "| load |") in md
    # The verdict with its numbers and its fix, then every trial's verdict and share.
    assert ("`serve_transformers_when_free` at http/chat_stream · c8: **queue**: 8 conversations in flight and one "
            "engine generates 4 at once: the rest wait; it streamed 85 % of the engine's in-process 1,300 output "
            f"tokens/s at batch 4. Fix: {FIXES[Bottleneck.QUEUE]}. Each trial: c1: load, 75 %; c4: decode, 100 %; "
            "c8: queue, 85 %.") in md
    assert "Each trial: c1: load, 140 %; c4: transport, 40 %." in md
    assert "1 trial(s) here served more than their engine in-process by over 15 %" in md
    # What was not set against an engine says why, and claims nothing of it.
    assert ("Not set against an engine: `vllm` (1 trial(s): no in-process figure to set them against: the engine was "
            "not timed, with `ceiling.enabled=false` or where its timing failed (the tier run's `ceiling.json` says "
            "why), or not at their batch).") in md
    assert ("Not set against an engine: `openai` (1 trial(s): an endpoint, whose engine tierbench does not run).") in md
    assert "| `vllm` |" not in md and "| `openai` |" not in md


def test_the_report_places_the_section_before_the_tiers_tables(data: SweepData, tmp_path: Path) -> None:
    md = build_generative_report(data, tmp_path, ReportOptions()).document.to_markdown()
    assert md.index("## Cost per 1M tokens across tiers") < md.index("## How close to the engine's limit") \
        < md.index("## Tier a100")


def test_a_sweep_of_endpoints_alone_has_no_such_section(tmp_path: Path) -> None:
    """No engine was timed (an endpoint's is not tierbench's): nothing to set the served figures against, and the
    client's verdicts alone do not make the section."""
    endpoints = _data([key for key in TRIALS if key[1] == "endpoint"])
    assert endpoints.ok["bottleneck"].tolist() == ["client"]
    doc = Document("t")
    assert ceiling_section(doc, endpoints, {"a100": "a100"}) == [] and doc.blocks == []
    report = build_generative_report(endpoints, tmp_path, ReportOptions())
    md = report.document.to_markdown()
    assert "close to the engine" not in md and "in-process" not in md
    assert not any("engine" in line for line in report.summary)

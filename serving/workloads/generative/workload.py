"""Generative text as a workload: conversations to an OpenAI-compatible server, priced per 1M output tokens."""

from __future__ import annotations

from typing import Any

from serving.workloads.generative import figures
from serving.workloads.generative.api import RequestFormat
from serving.workloads.workload import Workload


def _figures(samples: Any, usd_per_hour: float, slo: Any) -> dict[str, float]:
    return figures.window_figures(samples, usd_per_hour, slo.ttft_p99_ms, slo.tpot_p99_ms, slo.deadline_ms)


def _lacks(request_format: str) -> frozenset[str]:
    """An answer not streamed (`chat`, `completions`) has no token timing: no TTFT, ITL or TPOT."""
    return frozenset() if RequestFormat(request_format).streamed else figures.TOKEN_TIMING


WORKLOAD = Workload(
    name="generative",
    unit="token",
    per=1e6,
    request_formats=tuple(RequestFormat),
    throughput="output_tokens_s",
    cost="cost_per_1m_output_tokens_usd",
    latency="ttft_p99_ms",
    slo_targets=("ttft_p99_ms", "tpot_p99_ms", "deadline_ms"),
    metrics=figures.METRICS,
    figures=_figures,
    throughput_of=figures.throughput,
    params_of=figures.window_params,
    costs=(("cost_per_1m_output_tokens_usd", "output_tokens_s", 1e6),
           ("cost_per_1m_tokens_usd", "total_tokens_s", 1e6)),
    raw_figures=figures.raw_figures,
    lacks=_lacks,
)

"""A generative trial's figures, from its requests' raw token traces (never from averaged percentiles), and their
declarations for the metric catalog.

Per request (the requests scheduled inside the windows and answered well, as for latency):
    TTFT   from when the request was due (its loop free, or its arrival) to its first output: the wait a user sees
    ITL    every gap between two consecutive events that carried output (a server that packs several tokens per
           event shows fewer, longer gaps: `tokens_per_event_mean` says so)
    TPOT   (end-to-end - TTFT) / (output tokens - 1): the pace of the answer after its first token
Throughput counts the tokens of the requests answered inside the windows, whenever scheduled (the rule images use),
and prices them: $ per 1M output tokens, and per 1M tokens in and out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from serving.metric import PERCENTILES, Metric, Pool, cost_per, family
from serving.workloads.generative.tokens import TokenTrace

PER_MILLION = 1e6


def percentile_figures(prefix: str, seconds: np.ndarray) -> dict[str, float]:
    """`<prefix>_p50_ms` ... `<prefix>_p99_ms` and `<prefix>_mean_ms` of `seconds` (none of an empty array)."""
    if seconds.size == 0:
        return {}
    ms = seconds * 1e3
    out = {f"{prefix}_p{p}_ms": float(v) for p, v in zip(PERCENTILES, np.percentile(ms, PERCENTILES), strict=True)}
    out[f"{prefix}_mean_ms"] = float(ms.mean())
    return out


def per_request(intended_s: np.ndarray, send_s: np.ndarray, done_s: np.ndarray,
                traces: Sequence[TokenTrace]) -> dict[str, np.ndarray]:
    """Each answered request's TTFT, TPOT (seconds; NaN where it has none) and token counts, and every ITL."""
    streamed = np.array([t.streamed for t in traces], dtype=bool)
    first = np.array([t.first_token_after_s for t in traces], dtype=np.float64)
    output = np.array([t.output_tokens for t in traces], dtype=np.float64)
    ttft = np.where(streamed, send_s - intended_s + first, np.nan)
    after_first = done_s - send_s - first
    tpot = np.where(streamed & (output > 1), after_first / np.maximum(output - 1, 1), np.nan)
    gaps = [t.gaps_s for t in traces if t.output_after_s.size > 1]
    return {"ttft_s": ttft, "tpot_s": tpot, "itl_s": np.concatenate(gaps) if gaps else np.zeros(0),
            "output_tokens": output, "streamed": streamed,
            "input_tokens": np.array([t.input_tokens for t in traces], dtype=np.float64),
            "requested_tokens": np.array([t.requested_tokens for t in traces], dtype=np.float64),
            "events": np.array([t.output_after_s.size for t in traces], dtype=np.float64)}


def token_rate(traces: Sequence[TokenTrace], duration_s: float) -> tuple[float, float]:
    """(output, input) tokens per second of the requests answered inside a span of `duration_s`."""
    output = float(sum(t.output_tokens for t in traces))
    given = float(sum(max(t.input_tokens, 0) for t in traces))
    return output / duration_s, given / duration_s


def cost_per_million(usd_per_hour: float, tokens_s: float) -> float:
    return cost_per(usd_per_hour, tokens_s, PER_MILLION)


def window_figures(samples: Any, usd_per_hour: float, ttft_ms: float | None = None, tpot_ms: float | None = None,
                   deadline_ms: float | None = None) -> dict[str, float]:
    """The trial's token figures from its merged windows. `samples`: `experiments.measure.samples.WindowSamples`
    (its `intended_s`, `send_s`, `done_s`, `detail` and `completed_detail`, `failures`, `duration_s`). With targets,
    the goodput: requests answered well with TTFT <= `ttft_ms`, TPOT <= `tpot_ms` and end-to-end <= `deadline_ms`
    (each where set), per second, their output tokens per second, and their share of the requests scheduled."""
    out: dict[str, float] = {}
    output_s, input_s = token_rate(samples.completed_detail, samples.duration_s)
    out.update(output_tokens_s=output_s, input_tokens_s=input_s, total_tokens_s=output_s + input_s)
    served = sum(t.output_tokens for t in samples.completed_detail)
    if samples.clients and served:  # the client's own cost per token: near its budget, it measures itself
        out["client_cpu_us_per_token"] = sum(c.cpu_s for c in samples.clients) / served * 1e6
    if output_s > 0:
        out["cost_per_1m_output_tokens_usd"] = cost_per_million(usd_per_hour, output_s)
        out["cost_per_1m_tokens_usd"] = cost_per_million(usd_per_hour, output_s + input_s)
    traces = samples.detail or []
    if not traces:
        return out
    r = per_request(samples.intended_s, samples.send_s, samples.done_s, traces)
    for name, seconds in raw_figures(samples).items():
        out.update(percentile_figures(name, seconds))
    output, requested = r["output_tokens"], r["requested_tokens"]
    out.update(output_tokens_mean=float(output.mean()), output_tokens_min=float(output.min()),
               output_tokens_max=float(output.max()), requested_tokens_mean=float(requested.mean()),
               output_short_share=float(np.mean(output < requested)))
    known = r["input_tokens"][r["input_tokens"] >= 0]
    if known.size:
        out.update(input_tokens_mean=float(known.mean()), input_tokens_max=float(known.max()))
    events = r["events"][r["streamed"]]
    if events.sum() > 0:
        out["tokens_per_event_mean"] = float(output[r["streamed"]].sum() / events.sum())
    if ttft_ms is not None or tpot_ms is not None or deadline_ms is not None:
        # the rates by completion, as tokens/s (never above it); the share of the requests scheduled
        done = per_request(samples.completed_intended_s, samples.completed_send_s, samples.completed_done_s,
                           samples.completed_detail)
        good_done = _good(done, samples.completed_done_s - samples.completed_intended_s, ttft_ms, tpot_ms,
                          deadline_ms)
        good = _good(r, samples.done_s - samples.intended_s, ttft_ms, tpot_ms, deadline_ms)
        scheduled = output.size + samples.failures.count
        out.update(goodput_rps=float(good_done.sum()) / samples.duration_s,
                   goodput_output_tokens_s=float(done["output_tokens"][good_done].sum()) / samples.duration_s,
                   goodput_share=float(good.sum()) / scheduled if scheduled else 0.0)
        if out["goodput_output_tokens_s"] > 0:
            out["cost_per_1m_good_output_tokens_usd"] = cost_per_million(usd_per_hour,
                                                                         out["goodput_output_tokens_s"])
    return out


def _good(requests: dict[str, np.ndarray], latency_s: np.ndarray, ttft_ms: float | None, tpot_ms: float | None,
          deadline_ms: float | None) -> np.ndarray:
    """Which of `requests` (`per_request`'s) were answered within the targets set (a one-token answer has no pace to
    miss; an answer not streamed has no first token to be late with)."""
    good = np.ones(latency_s.size, dtype=bool)
    if ttft_ms is not None:
        good &= np.nan_to_num(requests["ttft_s"], nan=np.inf) * 1e3 <= ttft_ms
    if tpot_ms is not None:
        good &= np.nan_to_num(requests["tpot_s"], nan=0.0) * 1e3 <= tpot_ms
    if deadline_ms is not None:
        good &= latency_s * 1e3 <= deadline_ms
    return good


def raw_figures(samples: Any) -> dict[str, np.ndarray]:
    """Each answered request's TTFT and TPOT and every ITL, in seconds (the repeats of a trial pool them)."""
    if not samples.detail:
        return {}
    r = per_request(samples.intended_s, samples.send_s, samples.done_s, samples.detail)
    return {"ttft": r["ttft_s"][~np.isnan(r["ttft_s"])], "tpot": r["tpot_s"][~np.isnan(r["tpot_s"])],
            "itl": r["itl_s"]}


def window_params(samples: Any) -> dict[str, str]:
    """Who counted the tokens (`tokens_counted_by`: usage, tokenizer or events; several joined by `+`)."""
    counted = sorted({t.counted_by for t in (samples.detail or [])})
    return {"tokens_counted_by": "+".join(counted)} if counted else {}


def throughput(samples: Any) -> float:
    """Output tokens answered per second: what the stability rule compares and a tier is sized on."""
    return token_rate(samples.completed_detail, samples.duration_s)[0]


_TIMED = "(streamed answers: a request not streamed has no token timing)"
METRICS: tuple[Metric, ...] = (
    *family("ttft_p{}_ms", PERCENTILES, "ms", Pool.SAMPLES, "the p{} of time to first token, from when the request "
                                                            "was due to its first output " + _TIMED),
    Metric("ttft_mean_ms", "ms", Pool.SAMPLES, "mean time to first token"),
    *family("itl_p{}_ms", PERCENTILES, "ms", Pool.SAMPLES, "the p{} of inter-token latency: every gap between two "
                                                           "consecutive events carrying output"),
    Metric("itl_mean_ms", "ms", Pool.SAMPLES, "mean inter-token latency"),
    *family("tpot_p{}_ms", PERCENTILES, "ms", Pool.SAMPLES, "the p{} over requests of time per output token, "
                                                            "(end-to-end - TTFT) / (output tokens - 1)"),
    Metric("tpot_mean_ms", "ms", Pool.SAMPLES, "mean time per output token"),
    Metric("output_tokens_s", "tok/s", Pool.GEOMETRIC, "output tokens of the requests answered inside the windows, "
                                                       "per second"),
    Metric("input_tokens_s", "tok/s", Pool.GEOMETRIC, "prompt tokens of those requests, per second"),
    Metric("total_tokens_s", "tok/s", Pool.GEOMETRIC, "prompt and output tokens of those requests, per second"),
    Metric("cost_per_1m_output_tokens_usd", "USD", Pool.PRICED, "price per hour (x endpoint_nodes) / 3600 / output "
                                                                "tokens per second x 1M"),
    Metric("cost_per_1m_tokens_usd", "USD", Pool.PRICED, "price per hour (x endpoint_nodes) / 3600 / prompt and "
                                                         "output tokens per second x 1M"),
    Metric("output_tokens_mean", "tokens", Pool.MEAN, "output tokens a request was served, on average"),
    Metric("output_tokens_min", "tokens", Pool.MIN, "the shortest answer, in tokens"),
    Metric("output_tokens_max", "tokens", Pool.MAX, "the longest answer, in tokens"),
    Metric("requested_tokens_mean", "tokens", Pool.MEAN, "max_tokens asked for, on average"),
    Metric("output_short_share", "share", Pool.MAX, "share of requests served fewer tokens than asked for (the model "
                                                    "stopped early: the server did not pin the length)"),
    Metric("input_tokens_mean", "tokens", Pool.MEAN, "prompt tokens per request, on average (the server's usage, "
                                                     "else the tokenizer's count)"),
    Metric("input_tokens_max", "tokens", Pool.MAX, "the longest prompt, in tokens"),
    Metric("client_cpu_us_per_token", "us", Pool.MEAN, "the clients' CPU per output token answered: streamed, about "
                                                       "25 us is a client core's budget at 40,000 tokens/s"),
    Metric("tokens_per_event_mean", "ratio", Pool.MEAN, "output tokens per streamed event: above 1 the server packs "
                                                        "several tokens per event, and ITL is per event"),
    Metric("goodput_rps", "req/s", Pool.GEOMETRIC, "requests answered well within the TTFT and TPOT targets "
                                                   "(experiment.slo.ttft_p99_ms, tpot_p99_ms) and deadline_ms, per "
                                                   "second"),
    Metric("goodput_output_tokens_s", "tok/s", Pool.GEOMETRIC, "the output tokens of those requests, per second"),
    Metric("cost_per_1m_good_output_tokens_usd", "USD", Pool.MEAN, "price per hour (x endpoint_nodes) / 3600 / "
                                                                    "goodput tokens per second x 1M"),
    # what the client's requests carried (serving.workloads.generative.prompts.pool_stats)
    Metric("pool_prompts", "count", Pool.MIN, "distinct requests in the client's pool"),
    Metric("pool_conversations", "count", Pool.MIN, "distinct conversations they come from"),
    Metric("pool_turns_max", "count", Pool.MAX, "the most user turns of a conversation in the pool"),
    *family("pool_input_tokens_{}", ("mean", "p50", "min", "max"), "tokens", Pool.MEAN,
            "the pool's prompts in tokens by the model's tokenizer (chat template applied): {}"),
    *family("pool_max_tokens_{}", ("mean", "p50", "min", "max"), "tokens", Pool.MEAN,
            "the pool's max_tokens: {}"),
)

# What only a streamed answer has (its token timing): an answer not streamed has none of these figures.
TOKEN_TIMING = frozenset(m.name for m in METRICS if m.name.startswith(("ttft_", "itl_", "tpot_")))

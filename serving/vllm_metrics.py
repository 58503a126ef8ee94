"""vLLM's Prometheus metrics (`/metrics` of `vllm serve`), read as the counters a trial snapshots before and after
its window (`Backend.server_counters`) and the figures between them (`Backend.server_breakdown`) that tell why the
server saturated: KV-cache-bound (requests preempted, the cache near full) or queue-bound (requests waiting for a
seat among `max_num_seqs`). Pure: text in, numbers out.

Names as vLLM's V1 engine writes them; the cache's gauge was `vllm:gpu_cache_usage_perc` before
`vllm:kv_cache_usage_perc`, and the TPOT histogram `vllm:time_per_output_token_seconds` became
`vllm:inter_token_latency_seconds`: either is read."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

# Our key -> vLLM's names, the first one present wins (newer names first).
COUNTERS = {
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "tpot_sum": ("vllm:time_per_output_token_seconds_sum", "vllm:inter_token_latency_seconds_sum"),
    "tpot_count": ("vllm:time_per_output_token_seconds_count", "vllm:inter_token_latency_seconds_count"),
    "queue_sum": ("vllm:request_queue_time_seconds_sum",),
    "queue_count": ("vllm:request_queue_time_seconds_count",),
}
# Gauges: the state at the snapshot, summed over engines (data-parallel ranks) but the cache's share, their highest.
GAUGES = {
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
HIGHEST = ("kv_cache_usage",)
# A window's end state that says what bounds the server: the cache this full (vLLM preempts at 100 %) ...
KV_CACHE_NEAR_FULL = 0.9

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Every sample of Prometheus's text format: (name, labels, value); comments and malformed lines skipped."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
        yield match["name"], labels, value


def counters(text: str, model: str) -> dict[str, float]:
    """Our counters and gauges from a metrics text, over the samples of `model` (label `model_name`; a sample
    without that label counts for every model). A metric the server does not write is absent."""
    by_name: dict[str, list[float]] = {}
    for name, labels, value in samples(text):
        if labels.get("model_name", model) == model and not math.isnan(value):
            by_name.setdefault(name, []).append(value)
    out: dict[str, float] = {}
    for key, names in (*COUNTERS.items(), *GAUGES.items()):
        found = next((by_name[n] for n in names if n in by_name), None)
        if found is not None:
            out[key] = max(found) if key in HIGHEST else sum(found)
    return out


def _mean_ms(delta: dict[str, float], what: str) -> float | None:
    count = delta.get(f"{what}_count", 0.0)
    return delta.get(f"{what}_sum", 0.0) / count * 1000.0 if count > 0 else None


def breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The server's own figures for a window between two `counters` snapshots: tokens and preemptions in it, the
    mean TTFT, TPOT and queue time of the requests it finished, the state at its end (running, waiting, cache
    share), and two flags: `server_kv_cache_bound` (it preempted, or its cache was near full) and
    `server_queue_bound` (requests waited for a seat)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in COUNTERS if key in after}
    out: dict[str, float] = {}
    for key in ("preemptions", "prompt_tokens", "generation_tokens"):
        if key in delta:
            out[f"server_{key}"] = delta[key]
    for what in ("ttft", "tpot", "queue"):
        mean = _mean_ms(delta, what)
        if mean is not None:
            out[f"server_{what}_mean_ms"] = mean
    if delta.get("prefix_cache_queries", 0.0) > 0:
        out["server_prefix_cache_hit_pct"] = 100.0 * delta.get("prefix_cache_hits", 0.0) / delta["prefix_cache_queries"]
    for key in GAUGES:
        if key in after:
            out[f"server_{key}"] = after[key]
    if "kv_cache_usage" in after:
        out["server_kv_cache_usage_pct"] = 100.0 * out.pop("server_kv_cache_usage")
    preempted = delta.get("preemptions", 0.0) > 0
    near_full = after.get("kv_cache_usage", 0.0) >= KV_CACHE_NEAR_FULL
    if "preemptions" in delta or "kv_cache_usage" in after:
        out["server_kv_cache_bound"] = float(preempted or near_full)
    if "requests_waiting" in after:
        out["server_queue_bound"] = float(after["requests_waiting"] > 0)
    return out

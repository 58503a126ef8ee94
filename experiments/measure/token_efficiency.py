"""How much of its engine a generative server streams, and what holds it back: each trial against the token ceiling
(`serving.generation.ceiling`: the same engine in-process, same lengths), and one verdict that names the setting
that would move it.

Efficiency (metrics of the trial): `ceiling_batch`, the conversations the engine generated at once (the server's own
average where it counts its generates, `server_batch_avg`; else the trial's concurrency, at most the engine's limit:
`max_batch_size`, vLLM's `max_num_seqs`);
`ceiling_output_tokens_s`, the engine's output tokens/s in-process at that batch (read between the batches timed);
`ceiling_share` = the served output tokens/s over it.

The verdict (tags `bottleneck`, `bottleneck_evidence`, `bottleneck_fix`), first that applies:

1. client: a client actor used more than `experiment.client_cpu_limit` of a core, or fell behind its schedule;
2. kv_cache: the server preempted requests, or its KV cache was >= 90 % full at the window's end (vLLM's metrics);
3. queue: conversations waited for a seat in the engine: the trial keeps more in flight than one engine generates at
   once, or the server's generates carried far fewer than were in flight (static batches: the rest waited for the
   next), or the server says so (vLLM's waiting requests);
4. the engine at its limit (the GPU >= 80 % busy, or on a CPU >= 70 % of its in-process throughput): prefill when
   the first token takes >= half of an answer's time, else decode;
5. cpu: the node's CPU >= 85 % busy without the engine at its limit: the engine, the serving path and colocated
   clients share too few cores;
6. transport: the engine was not at its limit and the served tokens/s fell below 70 % of its in-process throughput at
   the same batch: the rest went to the serving path (HTTP, events per token, Serve's proxy and streaming);
7. load: otherwise: too few conversations in flight to fill the engine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from experiments.measure.efficiency import (
    AT_CEILING,
    BUSY_GPU_PCT,
    NODE_CPU_BUSY,
    Bottleneck,
    Verdict,
    client_cores,
    client_verdict,
)

# The trial's figures against its engine's ceiling (the module's docstring says them)
ENGINE_BATCH, ENGINE_OUTPUT_TOKENS_S, SHARE = "ceiling_batch", "ceiling_output_tokens_s", "ceiling_share"
# The verdicts `token_verdict` gives, in the order it tries them
VERDICTS = (Bottleneck.CLIENT, Bottleneck.KV_CACHE, Bottleneck.QUEUE, Bottleneck.PREFILL, Bottleneck.DECODE,
            Bottleneck.CPU, Bottleneck.TRANSPORT, Bottleneck.LOAD)
PREFILL_SHARE = 0.5  # the first token's share of an answer's time from which prompts, not tokens, hold it
QUEUED_SHARE = 1.5  # in flight over a generate's conversations (plus one) from which the rest queued for the next
# What moves a generative server held by these (the others' fixes are the bottleneck's own)
FIXES = {
    Bottleneck.QUEUE: "more conversations per engine step (vLLM max_num_seqs; Serve's and Triton's max_batch_size), "
                      "more replicas or instances, or a continuous-batching engine (vLLM) in place of static batches",
    Bottleneck.TRANSPORT: "fewer events per token or a lighter path: the engine's own server (vLLM's) or Serve's "
                          "direct ingress; gRPC streaming where the client keeps up",
    Bottleneck.LOAD: "more conversations in flight (experiment.concurrency) or a higher rate",
}


@dataclass
class TokenCeiling:
    """Each engine's output tokens/s in-process on one node, by batch, at the prompts' lengths; why one has none."""

    hostname: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    points: dict[str, dict[str, float]] = field(default_factory=dict)  # engine key -> batch -> output tokens/s
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    kind: str = "tokens"  # tells this file from an image sweep's ceiling.json

    def at(self, key: str, batch: float) -> float | None:
        """The engine's output tokens/s at `batch` conversations: timed there, or read on the line between the two
        batches timed around it (a server's average generate is seldom a whole number); None outside them."""
        points = sorted((int(b), float(v)) for b, v in self.points.get(key, {}).items() if v)
        for (low, low_v), (high, high_v) in zip(points, points[1:], strict=False):
            if low <= batch <= high:
                return low_v + (high_v - low_v) * (batch - low) / (high - low)
        return next((v for b, v in points if b == batch), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> TokenCeiling:
        return TokenCeiling(**{k: v for k, v in data.items() if k in TokenCeiling.__dataclass_fields__})

    def tier_metrics(self) -> dict[str, float]:
        """The tier run's metrics: each engine's output tokens/s at each batch timed."""
        return {f"ceiling/{key}/b{batch}_output_tokens_s".replace("=", "-").replace(",", "_"): float(value)
                for key, points in self.points.items() for batch, value in points.items()}


def read_token_ceiling(path: Path) -> TokenCeiling | None:
    """A generative tier job's ceiling.json; None when there is none, or it is an image sweep's."""
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return TokenCeiling.from_json(data) if isinstance(data, dict) and data.get("kind") == "tokens" else None


def ceiling_batch(concurrency: int, max_batch: int) -> int:
    """The most conversations one engine generates at once when a trial keeps `concurrency` in flight."""
    return max(1, min(int(concurrency), int(max_batch)))


def timed_batches(reached: set[int]) -> list[int]:
    """The batches the ceiling times for trials reaching `reached`: those, and the powers of two below the largest
    (a server's generates may carry fewer conversations than are in flight: the ceiling is read between them)."""
    top = max(reached)
    return sorted(reached | {2 ** k for k in range(top.bit_length()) if 2 ** k < top})


def engine_batch(metrics: dict[str, float], concurrency: int, max_batch: int) -> float:
    """The conversations the engine generated at once: the server's own average where it counts its generates
    (`server_batch_avg`), else as many as were in flight, up to the engine's limit."""
    counted = metrics.get("server_batch_avg")
    return float(counted) if counted else float(ceiling_batch(concurrency, max_batch))


def token_efficiency(metrics: dict[str, float], ceiling_tok_s: float | None, batch: float) -> dict[str, float]:
    served = metrics.get("output_tokens_s")
    if not served or not ceiling_tok_s:
        return {}
    return {ENGINE_BATCH: float(batch), ENGINE_OUTPUT_TOKENS_S: ceiling_tok_s, SHARE: served / ceiling_tok_s}


def token_verdict(metrics: dict[str, float], params: dict[str, Any], on_gpu: bool, client_cpu_limit: float,
                  max_batch: int) -> Verdict:
    """What holds a generative trial back (the module's docstring says the rules)."""
    m = metrics
    found = client_verdict(m, client_cpu_limit)
    if found is not None:
        return found
    share = m.get(SHARE)
    batch = m.get(ENGINE_BATCH)
    share_text = (f"it streamed {share * 100:.0f} % of the engine's in-process {m[ENGINE_OUTPUT_TOKENS_S]:,.0f} "
                  f"output tokens/s at batch {batch:.0f}") if share is not None else ""
    if m.get("server_kv_cache_bound") == 1:
        parts = [f"{m['server_preemptions']:.0f} requests preempted" if m.get("server_preemptions") else "",
                 f"the KV cache {m['server_kv_cache_usage_pct']:.0f} % full" if "server_kv_cache_usage_pct" in m
                 else ""]
        return Verdict(Bottleneck.KV_CACHE, "; ".join(p for p in parts if p) or "the server reports its KV cache full")
    concurrency = int(params.get("concurrency") or 0)
    merged = m.get("server_batch_avg")
    if concurrency > max_batch:
        why = f"{concurrency} conversations in flight and one engine generates {max_batch} at once: the rest wait"
    elif merged and concurrency >= QUEUED_SHARE * merged + 1:
        why = (f"each generate carried {merged:.1f} conversations of the {concurrency} in flight: the others waited "
               "for the next one (a static batch takes no one once it runs)")
    elif m.get("server_queue_bound") == 1:
        why = "the server kept requests waiting for a seat in its engine"
    else:
        why = ""
    if why:
        return Verdict(Bottleneck.QUEUE, "; ".join(p for p in (why, share_text) if p), FIXES[Bottleneck.QUEUE])
    busy = m.get("gpu_util_pct")
    at_limit = [text for hit, text in (
        (on_gpu and busy is not None and busy >= BUSY_GPU_PCT, f"the GPU {busy or 0:.0f} % busy"),
        (not on_gpu and share is not None and share >= AT_CEILING, share_text)) if hit]
    if at_limit:
        ttft, latency = m.get("ttft_mean_ms"), m.get("latency_mean_ms")
        if ttft is not None and latency and ttft >= PREFILL_SHARE * latency:
            return Verdict(Bottleneck.PREFILL, "; ".join([*at_limit, f"the first token took {ttft:.1f} ms of a "
                                                                     f"{latency:.1f} ms answer"]))
        tpot = m.get("tpot_mean_ms")
        return Verdict(Bottleneck.DECODE, "; ".join([*at_limit, *([f"{tpot:.2f} ms per output token after the "
                                                                   "first"] if tpot is not None else [])]))
    node_cpu = m.get("node_cpu_util_pct")
    if node_cpu is not None and node_cpu >= NODE_CPU_BUSY:
        parts = [f"the node's CPU {node_cpu:.0f} % busy over the window, the engine not at its limit"]
        clients = client_cores(m)
        if clients:
            parts.append(f"the clients on it used {clients:.2f} cores")
        return Verdict(Bottleneck.CPU, "; ".join([*parts, *([share_text] if share_text else [])]))
    if share is not None and share < AT_CEILING:
        return Verdict(Bottleneck.TRANSPORT, f"{share_text}, without the engine at its limit: the rest went to the "
                                             "serving path (HTTP, an event per token, the server's proxy and "
                                             "streaming)", FIXES[Bottleneck.TRANSPORT])
    evidence = [f"{concurrency} conversations in flight" if concurrency else "the load offered"]
    if share_text:
        evidence.append(share_text)
    return Verdict(Bottleneck.LOAD, "; ".join(evidence), FIXES[Bottleneck.LOAD])

"""How much of the GPU an operating point uses, and what holds it back: each trial against its runtime's in-process
ceiling (`experiments.measure.ceiling`), and one verdict from its own measured breakdown that names the setting
that would move it.

Efficiency (metrics of the trial):

- `ceiling_img_s`: what the runtime does in-process, host round trip included (what a server pays), at the batch the
  server computed (`ceiling_batch`: the request's images, or the server's average batch where it merged requests);
  `ceiling_share` = served img/s over it;
- `ceiling_best_img_s` / `ceiling_best_batch`: the runtime's best round-trip throughput over batch sizes;
  `ceiling_share_best` = served over it (how far this point is from the runtime's limit at any batch);
- `ceiling_resident_best_img_s` (at `ceiling_resident_best_batch`), `ceiling_share_resident`: the same against the
  device-resident best (the GPU's own limit with this runtime, no copies);
- `ceiling_p50_ms`, `served_p50_over_inprocess`: the in-process p50 at the request's batch, and the served p50 over it;
  `ceiling_b1_p50_ms`: the in-process p50 at batch 1.

A server cannot outrun its own runtime by much: a share above `ABOVE_CEILING` (the ceiling check's 15 % agreement)
says the in-process timing reads low there, and the report says so wherever it shows that share. On a GPU several
instances overlap copies with compute, so there only the device-resident best bounds a served point.

The verdict (tags `bottleneck`, `bottleneck_evidence`, `bottleneck_fix`), first that applies:

1. client: a client actor used more than `experiment.client_cpu_limit` of a core, or an open-loop client fell behind
   its own schedule (`client_behind`: its timer ran late, so its sends did): the figure is the client's;
2. compute: the GPU was busy >= `BUSY_GPU_PCT` % of the window (GPU runtimes);
3. cpu: one thread of the server's own processes was busy >= `SATURATED_THREAD` of the window (a single loop that
   never rests: a Python event loop holding its GIL, a one-threaded server), or the node's CPU was >= `NODE_CPU_BUSY` %
   busy over the window (every process on it: servers, proxies,
   colocated clients), or, on a CPU runtime, it reached >= `AT_CEILING` of its in-process throughput or colocated
   clients took >= `CLIENT_CORE_SHARE` of the node's cores (which the server then did not have);
4. queue / proxy / transport: the largest of the server's queue time, the time outside the replica behind a proxy
   (`PROXIES`: Serve's own, or HAProxy), or the time outside the server (client p50 side: loopback,
   (de)serialising, the HTTP/gRPC stack), when it is >= `DOMINANT_SHARE` of the mean request;
5. load: otherwise: the server computes most of each request and the device still idles: too little work in flight.

A trial without its runtime's ceiling (a server tierbench did not start, whose node it does not see; a generative
server) gets what the client can decide (`client_side_verdict`): 1, a node's full CPU where one was sampled, the
network's round trip to an endpoint taking >= `DOMINANT_SHARE` of a request, and with the server's own time per
request (an endpoint's metrics URL) 4 and 5; else no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from serving.inprocess import RESIDENT, ROUND_TRIP, RuntimeTiming

# The tags a verdict sets on a trial (and an SLO summary repeats from its highest load).
VERDICT_TAGS = ("bottleneck", "bottleneck_evidence", "bottleneck_fix")
BUSY_GPU_PCT = 80.0
NODE_CPU_BUSY = 85.0
SATURATED_THREAD = 0.9
AT_CEILING = 0.7
CLIENT_CORE_SHARE = 0.25
DOMINANT_SHARE = 0.3
ABOVE_CEILING = 1.15
# The `server_ingress` values with a proxy between the client and the replica (Ray Serve's), and what it is
PROXIES = {"proxy": "Serve's proxy", "haproxy": "Serve's HAProxy"}


def _bounding_share(share: float | None, resident_share: float | None) -> float | None:
    """The share no server can pass: `ceiling_share_resident` where the runtime has a device-resident best (several
    instances overlap copies with compute, so the round trip's share may pass 1), else `ceiling_share`."""
    def known(value: float | None) -> bool:
        return value is not None and value == value
    bound = resident_share if known(resident_share) else share
    return float(bound) if known(bound) else None


def above_ceiling(share: float | None, resident_share: float | None = None) -> bool:
    """Whether a served point outran its runtime in-process by more than the timing's noise: then the timing reads
    low there, not the server fast. None or NaN: unknown."""
    bound = _bounding_share(share, resident_share)
    return bound is not None and bound > ABOVE_CEILING


def level_with_ceiling(share: float | None, resident_share: float | None = None) -> bool:
    """Whether a served point is past its runtime in-process, but by no more than the timing's noise: level with
    it, not past it."""
    bound = _bounding_share(share, resident_share)
    return bound is not None and 1.0 < bound <= ABOVE_CEILING


class Bottleneck(StrEnum):
    CLIENT = "client"
    COMPUTE = "compute"
    CPU = "cpu"
    QUEUE = "queue"
    PROXY = "proxy"
    TRANSPORT = "transport"
    LOAD = "load"
    # generative servers alone (experiments/measure/token_efficiency.py)
    PREFILL = "prefill"
    DECODE = "decode"
    KV_CACHE = "kv_cache"

    @property
    def of_tokens_only(self) -> bool:
        """A verdict only a generative server gets (an image trial never does)."""
        return self in (Bottleneck.PREFILL, Bottleneck.DECODE, Bottleneck.KV_CACHE)

    @property
    def fix(self) -> str:
        """The settings that would move a point held back by this."""
        return {
            Bottleneck.CLIENT: "more client actors (experiment.max_client_actors), the compiled engine where the "
                               "Python client measured (experiment.load_engine=auto), or clients on their own node "
                               "(clients.placement=separate); the served figure is a lower bound",
            Bottleneck.COMPUTE: "the GPU is the limit: lower precision (FP16), TensorRT, or a bigger GPU",
            Bottleneck.CPU: "the CPU is the limit: for one saturated server thread, more server processes "
                            "(instance_count, num_replicas, workers) or less Python per request (direct ingress, "
                            "batching); for a busy node, more or faster cores or clients on their own node "
                            "(clients.placement=separate); on a CPU tier, a GPU",
            Bottleneck.QUEUE: "more model instances (Triton instance_count, Serve num_replicas) or server-side "
                              "batching (dynamic_batching / batching); where the server batches already, a shorter "
                              "wait to gather a batch on Triton (max_queue_delay_us); on Serve, whose @serve.batch "
                              "closes a batch when its wait ends even while a pass runs (so only requests that arrive "
                              "within it merge), batcher: when_free or a wait about a forward pass long "
                              "(batch_wait_timeout_s)",
            Bottleneck.PROXY: "Serve's HAProxy ingress in place of its proxy (haproxy: true, e.g. pytorch_haproxy), "
                              "or its direct ingress to one replica (direct_ingress: true, e.g. pytorch_direct)",
            Bottleneck.TRANSPORT: "fewer bytes per image or fewer requests: shared memory (http_shm/grpc_shm), JPEG "
                                  "input, larger batches",
            Bottleneck.LOAD: "more work in flight: higher concurrency, larger batches, or server-side batching",
            Bottleneck.PREFILL: "prompts hold the engine: chunked prefill with a smaller token budget per step "
                                "(enable_chunked_prefill, max_num_batched_tokens), prefix caching where prompts share "
                                "a beginning (enable_prefix_caching), or shorter prompts",
            Bottleneck.DECODE: "generating tokens is the limit: more conversations per step (max_num_seqs, "
                               "max_batch_size) while TPOT allows, lower precision or quantization (dtype, "
                               "quantization), or a GPU with more memory bandwidth",
            Bottleneck.KV_CACHE: "the KV cache is full (requests preempted): more of the GPU's memory for it "
                                 "(gpu_memory_utilization), fewer conversations at once (max_num_seqs), a shorter "
                                 "max_model_len, a quantized model or KV cache, tensor parallelism, or a bigger GPU",
        }[self]


@dataclass(frozen=True)
class Verdict:
    bottleneck: Bottleneck
    evidence: str  # the numbers that decided it
    fix: str = ""  # the settings that would move it, where they are not the bottleneck's own (a generative server's)

    def tags(self) -> dict[str, str]:
        return dict(zip(VERDICT_TAGS, (str(self.bottleneck), self.evidence, self.fix or self.bottleneck.fix),
                        strict=True))


def efficiency_metrics(metrics: dict[str, float], timing: RuntimeTiming, batch_size: int) -> dict[str, float]:
    """The trial's figures against its runtime's ceiling (see the module's docstring)."""
    served = metrics.get("throughput_img_s")
    if not served:
        return {}
    computed_batch = max(float(batch_size), float(metrics.get("server_batch_avg") or 0.0))
    out: dict[str, float] = {"ceiling_batch": computed_batch}
    at = timing.img_s_at(computed_batch, ROUND_TRIP)
    if at:
        out.update(ceiling_img_s=at, ceiling_share=served / at)
    best = timing.best(ROUND_TRIP)
    if best is not None:
        out.update(ceiling_best_img_s=best.img_s, ceiling_best_batch=float(best.batch_size),
                   ceiling_share_best=served / best.img_s)
    if timing.of_mode(RESIDENT):
        resident = timing.best(RESIDENT)
        out.update(ceiling_resident_best_img_s=resident.img_s, ceiling_resident_best_batch=float(resident.batch_size),
                   ceiling_share_resident=served / resident.img_s)
    same = timing.point(batch_size, ROUND_TRIP)
    if same is not None and "latency_p50_ms" in metrics:
        out.update(ceiling_p50_ms=same.p50_ms, served_p50_over_inprocess=metrics["latency_p50_ms"] / same.p50_ms)
    one = timing.point(1, ROUND_TRIP)
    if one is not None:
        out["ceiling_b1_p50_ms"] = one.p50_ms
    return out


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def client_verdict(m: dict[str, float], client_cpu_limit: float) -> Verdict | None:
    client = m.get("client_cpu_util_max")
    if client is not None and client > client_cpu_limit:
        return Verdict(Bottleneck.CLIENT, f"the busiest client actor used {_pct(client)} of a core (limit "
                                          f"{_pct(client_cpu_limit)})")
    if m.get("client_behind") == 1:
        return Verdict(Bottleneck.CLIENT, f"{_pct(m['late_fraction'])} of the arrivals left more than 5 ms late, and "
                                          f"the client's own timer ran p99 {m['client_loop_lag_p99_ms_max']:.0f} ms "
                                          "late: the client fell behind its schedule")
    return None


def client_side_verdict(metrics: dict[str, float], params: dict[str, Any], client_cpu_limit: float) -> Verdict | None:
    """What the client can decide of a trial without its runtime's ceiling (a server tierbench did not start, a
    generative server): a client-bound trial, a node whose CPU was full, the network's round trip or the server's own
    breakdown (an endpoint's metrics URL, Server-Timing) taking most of a request. None when none of it shows: the
    server's side is then not known to the client."""
    m = metrics
    found = client_verdict(m, client_cpu_limit)
    if found is not None:
        return found
    node_cpu = m.get("node_cpu_util_pct")
    if node_cpu is not None and node_cpu >= NODE_CPU_BUSY:
        return Verdict(Bottleneck.CPU, f"the node's CPU was {node_cpu:.0f} % busy over the window")
    latency = m.get("latency_mean_ms") or m.get("latency_p50_ms")
    rtt = m.get("endpoint_rtt_p50_ms")
    if latency and rtt is not None and rtt >= DOMINANT_SHARE * latency:
        return Verdict(Bottleneck.TRANSPORT, f"the network's round trip to the endpoint ({rtt:.2f} ms, p50 of small "
                                             f"requests before the trials) is {rtt / latency:.0%} of a {latency:.2f} "
                                             "ms request")
    server = m.get("server_request_ms", m.get("server_replica_ms"))
    if latency and server is not None:
        return verdict(m, params, False, client_cpu_limit, 0)
    return None


def verdict(metrics: dict[str, float], params: dict[str, Any], on_gpu: bool, client_cpu_limit: float,
            node_cpus: int) -> Verdict:
    """What holds this trial back, from its own figures (see the module's docstring for the rules)."""
    m = metrics
    found = client_verdict(m, client_cpu_limit)
    if found is not None:
        return found
    busy = m.get("gpu_util_pct")
    share = m.get("ceiling_share")
    share_text = f"{_pct(share)} of the runtime's in-process throughput at batch {m['ceiling_batch']:.3g}" if (
        share is not None) else ""
    if on_gpu and busy is not None and busy >= BUSY_GPU_PCT:
        return Verdict(Bottleneck.COMPUTE, f"GPU busy {busy:.0f} % of the window" + (f"; {share_text}" if share_text
                                                                                     else ""))
    thread = m.get("server_thread_cpu_max")
    if thread is not None and thread >= SATURATED_THREAD:
        who = params.get("server_busiest_thread")
        parts = [f"one thread of the server{f' ({who})' if who else ''} used {thread * 100:.0f} % of a core over the "
                 f"window (its processes {m.get('server_cpu_cores', thread):.1f} cores in all): a single loop that "
                 "never rested"]
        if on_gpu and busy is not None:
            parts.append(f"the GPU busy only {busy:.0f} %")
        if share_text:
            parts.append(share_text)
        return Verdict(Bottleneck.CPU, "; ".join(parts))
    node_cpu = m.get("node_cpu_util_pct")
    clients_cores = client_cores(m)
    colocated = str(params.get("client_placement", "colocated")) == "colocated"
    crowded = colocated and clients_cores is not None and node_cpus and clients_cores / node_cpus >= CLIENT_CORE_SHARE
    cpu_full = node_cpu is not None and node_cpu >= NODE_CPU_BUSY
    if cpu_full or (not on_gpu and ((share is not None and share >= AT_CEILING) or crowded)):
        parts = []
        if node_cpu is not None:
            parts.append(f"the node's CPU was {node_cpu:.0f} % busy over the window "
                         f"({m.get('node_cpu_cores_busy', node_cpu / 100 * node_cpus):.1f} of {node_cpus} cores)")
        if on_gpu and busy is not None:
            parts.append(f"the GPU only {busy:.0f} %")
        if share_text:
            parts.append(share_text)
        if clients_cores is not None and colocated:
            parts.append(f"the clients on the same node used {clients_cores:.2f} of its {node_cpus} cores")
        return Verdict(Bottleneck.CPU, "; ".join(parts))
    latency = m.get("latency_mean_ms") or m.get("latency_p50_ms")
    server = m.get("server_request_ms", m.get("server_replica_ms"))
    parts: dict[Bottleneck, tuple[float, str]] = {}
    if latency and m.get("server_queue_ms") is not None:
        merged = m.get("server_batch_avg")
        passes = f" (its passes ran {merged:.1f} images each)" if merged else ""
        parts[Bottleneck.QUEUE] = (m["server_queue_ms"], f"{m['server_queue_ms']:.2f} ms of a {latency:.2f} ms "
                                                         f"request waited in the server's queue{passes}")
    if latency and server is not None:
        outside = max(0.0, latency - server)
        ingress = str(params.get("server_ingress", ""))
        proxied = ingress in PROXIES
        where = f"outside the replica, through {PROXIES[ingress]}" if proxied else "outside the server (client, " \
                                                                                   "loopback, protocol)"
        cpu = m.get("client_cpu_us_per_request")
        extra = f"; the client spent {cpu / 1000:.2f} ms of CPU per request" if cpu is not None and not proxied \
            else ""
        parts[Bottleneck.PROXY if proxied else Bottleneck.TRANSPORT] = (
            outside, f"{outside:.2f} ms of a {latency:.2f} ms request {where} (the server's own time "
                     f"{server:.2f} ms){extra}")
    if parts:
        kind, (ms, text) = max(parts.items(), key=lambda item: item[1][0])
        if ms >= DOMINANT_SHARE * latency:
            return Verdict(kind, text)
    evidence = []
    if latency and server is not None:
        evidence.append(f"the server's own time is {server:.2f} ms of a {latency:.2f} ms request")
    if on_gpu and busy is not None:
        evidence.append(f"yet the GPU was busy only {busy:.0f} % of the window")
    if share_text:
        evidence.append(share_text)
    evidence.append(f"at {_load(params)} with batch {params.get('batch_size', '?')}")
    return Verdict(Bottleneck.LOAD, "; ".join(evidence))


def _load(params: dict[str, Any]) -> str:
    mode = str(params.get("load_mode", "closed"))
    if mode == "closed":
        return f"concurrency {params.get('concurrency', '?')}"
    return f"{mode} {params.get('request_rate', '?')} req/s"


def client_cores(metrics: dict[str, float]) -> float | None:
    """Cores the clients used on average: their CPU per request times the requests per second."""
    per_request = metrics.get("client_cpu_us_per_request")
    rate = metrics.get("requests_s")
    if per_request is None or rate is None:
        return None
    return per_request * rate / 1e6

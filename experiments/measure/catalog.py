"""Every metric a trial, a repeat or an SLO summary carries, declared once: its name, its unit, how the repeats of a
trial pool it, and what it means. The engine's own (every workload's) are declared here, each workload's beside the
code that computes them (`serving/workloads/<name>/figures.py`: `Workload.metrics`), and this catalog holds them all.
Pooling (`experiments.measure.pooled`) asks this, never a list of its own, so a new metric is declared once and
nowhere else; one that is not declared is pooled as a mean with a warning, and the tests fail on it
(tests/test_metric_catalog.py). docs/metrics.md is rendered from it.

Names are the MLflow metric names; a family (`latency_p{50,90,95,99}_ms`) is declared by its members."""

from __future__ import annotations

import re

from serving.metric import PERCENTILES, Metric, Pool, family
from serving.workloads.registry import workloads

ENGINE: tuple[Metric, ...] = (
    # Latency and throughput, from the measurement windows' raw samples (experiments.measure.metrics); what a trial
    # serves in its workload's unit is the workload's figure (throughput_img_s, output_tokens_s).
    *family("latency_p{}_ms", PERCENTILES, "ms", Pool.SAMPLES,
             "the p{} of request latency, from when the request was due (its loop free, or its arrival) to its answer"),
    Metric("latency_mean_ms", "ms", Pool.SAMPLES, "mean request latency"),
    Metric("latency_min_ms", "ms", Pool.SAMPLES, "fastest request"),
    Metric("latency_max_ms", "ms", Pool.SAMPLES, "slowest request"),
    Metric("answer_gap_max_ms", "ms", Pool.MAX, "the longest time between two answers while a request was in flight "
                                                "all along: about the service time when busy; far longer (tag "
                                                "`stalled`) when the server froze"),
    Metric("requests_s", "req/s", Pool.GEOMETRIC, "requests answered inside the windows per second"),
    Metric("request_count", "count", Pool.SUM, "requests scheduled inside the windows, answered or failed (the "
                                               "denominator of error_rate; the latency figures are of those answered "
                                               "well: request_count - failed_requests)"),
    Metric("completed_requests", "count", Pool.SUM, "requests answered inside the windows"),
    Metric("windows", "count", Pool.SUM, "measurement windows until the last ones agreed (or the most allowed)"),
    Metric("stable", "flag", Pool.MIN, "1 when the last windows agreed within experiment.stability.percent"),
    Metric("measured_s", "s", Pool.SUM, "seconds the figures were measured over: the last windows' span, longer than "
           "their count times window_s where experiment.stability.min_requests joined short ones (or one in which "
           "no request ended: a slow server's)"),
    # What the requests carried: each client's pool of distinct requests, sent in turn (docs/inputs.md).
    Metric("payload_bytes", "bytes", Pool.MEAN, "data one request carries (image: the tensor, JPEG files or their "
                                                "base64 text; generative: its JSON body), the mean over the client's "
                                                "distinct requests"),
    Metric("distinct_requests", "count", Pool.MIN, "distinct requests each client sent in turn (its pool: the corpus "
                                                   "once over, or fewer within experiment.inputs.pool_mib)"),
    Metric("input_repeats", "ratio", Pool.MEAN, "requests inside the windows per distinct request: above 1 the "
                                                "windows sent some bytes more than once (a cache could answer them)"),
    Metric("warmup_s", "s", Pool.MEAN, "seconds of warm-up before the first window"),
    Metric("warmup_requests_done", "count", Pool.SUM, "requests sent in the warm-up (dropped)"),
    Metric("warmup_failed_requests", "count", Pool.SUM, "requests of the warm-up that failed (a server that "
                                                        "recovered before the windows: outside every figure)"),
    Metric("first_request_ms", "ms", Pool.MEAN, "latency of the trial's first request"),
    # Errors and goodput (serving.clients.outcomes; experiments.measure.metrics.outcome_metrics).
    Metric("error_rate", "share", Pool.MEAN, "share of the requests scheduled inside the windows that failed (an "
                                             "error status, a timeout, a lost connection, an answer that does not "
                                             "check out); the latency figures are of those answered well"),
    Metric("failed_requests", "count", Pool.SUM, "requests scheduled inside the windows that failed"),
    *family("latency_all_p{}_ms", PERCENTILES, "ms", Pool.MEAN,
             "the p{} of latency over every request, failed ones included (logged when any failed)"),
    Metric("goodput_share", "share", Pool.MEAN, "the share of the requests scheduled inside the windows answered well "
                                                "within the SLO's targets (images: experiment.slo.deadline_ms, else "
                                                "slo.p99_ms; generative: its TTFT, TPOT and deadline)"),
    # Open loop: the rates side by side, and what coordinated omission would hide.
    Metric("target_rate_rps", "req/s", Pool.MEAN, "the configured arrival rate"),
    Metric("offered_rate_rps", "req/s", Pool.MEAN, "arrivals scheduled in the windows per second, answered or failed"),
    Metric("achieved_rate_rps", "req/s", Pool.MEAN, "requests sent in the windows per second, answered or failed"),
    Metric("backlog_growth_requests", "count", Pool.SUM,
           "arrivals minus requests ended (answered or failed) over the windows"),
    Metric("overloaded", "flag", Pool.MAX, "1 when the backlog grew beyond a steady queue's jitter"),
    Metric("late_requests", "count", Pool.SUM,
           "arrivals sent over 5 ms after their schedule (experiment.max_in_flight reached, or a client behind)"),
    Metric("late_fraction", "share", Pool.MEAN, "share of arrivals sent late"),
    Metric("client_behind", "flag", Pool.MAX,
           "1 when the client fell behind its own schedule: > 5 % sent late, its timer p99 >= 10 ms late"),
    *family("send_latency_p{}_ms", PERCENTILES, "ms", Pool.SAMPLES,
             "the p{} of latency from the send (not the arrival): what coordinated omission would show"),
    # The clients: a client near a full core measures itself.
    Metric("client_cpu_util_max", "share", Pool.MAX, "the busiest client actor's CPU, in cores"),
    Metric("client_loop_lag_p99_ms_max", "ms", Pool.MAX, "the busiest client actor's event-loop lag, p99"),
    Metric("client_cpu_us_per_request", "us", Pool.MEAN, "the clients' CPU per completed request"),
    # A shared card's other servers (gpu.gpu_share 1/N without a MIG profile), measured at once with the trial's.
    Metric("tenants_measured", "count", Pool.MIN, "servers measured sharing the card at once, the trial's included"),
    Metric("card_throughput_img_s", "img/s", Pool.GEOMETRIC, "what every server sharing the card served together"),
    Metric("neighbour_throughput_img_s", "img/s", Pool.GEOMETRIC, "what one of the other servers served, on average"),
    Metric("tenant_fairness", "share", Pool.MIN, "the least served tenant's throughput over the most served's"),
    Metric("neighbour_latency_p50_ms", "ms", Pool.MEAN, "the other servers' p50 latency, their samples pooled"),
    Metric("neighbour_latency_p99_ms", "ms", Pool.MEAN, "the other servers' p99 latency, their samples pooled"),
    # The server: what it says of itself, its start, its own count of images.
    Metric("server_replica_ms", "ms", Pool.MEAN, "the replica's own time per request (Ray Serve)"),
    Metric("server_replica_p50_ms", "ms", Pool.MEAN, "the replica's own time per request, p50"),
    Metric("server_replica_p99_ms", "ms", Pool.MEAN, "the replica's own time per request, p99"),
    Metric("server_batch_avg", "batch", Pool.MEAN, "images per forward pass the server formed (a generative server: "
           "conversations per generate)"),
    # A launched generative server's own figures: tierbench's transformers replica, vLLM's Prometheus metrics.
    Metric("server_generating_tokens_s", "tok/s", Pool.MEAN, "output tokens per second while the server's engine "
           "was generating (its generates' tokens over their time)"),
    Metric("server_preemptions", "count", Pool.SUM, "vLLM: requests preempted in the window (their KV cache "
           "evicted, to be computed again)"),
    Metric("server_prompt_tokens", "count", Pool.SUM, "vLLM: prompt tokens it computed in the window"),
    Metric("server_generation_tokens", "count", Pool.SUM, "vLLM: tokens it generated in the window"),
    Metric("server_ttft_mean_ms", "ms", Pool.MEAN, "vLLM: its own mean time to first token"),
    Metric("server_tpot_mean_ms", "ms", Pool.MEAN, "vLLM: its own mean time per output token"),
    Metric("server_queue_mean_ms", "ms", Pool.MEAN, "vLLM: mean time a request waited for a seat in the engine"),
    Metric("server_prefix_cache_hit_pct", "%", Pool.MEAN, "vLLM: prompt tokens found in its prefix cache"),
    Metric("server_requests_running", "count", Pool.MEAN, "vLLM: requests in the engine at the window's end"),
    Metric("server_requests_waiting", "count", Pool.MEAN, "vLLM: requests waiting for a seat at the window's end"),
    Metric("server_kv_cache_usage_pct", "%", Pool.MEAN, "vLLM: its KV cache in use at the window's end"),
    Metric("server_kv_cache_bound", "flag", Pool.MAX, "vLLM: 1 when it preempted requests or its KV cache was >= 90 % "
           "full"),
    Metric("server_queue_bound", "flag", Pool.MAX, "vLLM: 1 when requests were waiting for a seat"),
    Metric("server_requests", "count", Pool.SUM, "requests the server counted between the window's snapshots"),
    Metric("server_request_ms", "ms", Pool.MEAN, "the server's time per request, end to end"),
    Metric("server_queue_ms", "ms", Pool.MEAN, "time a request waited in the server for its forward pass (Triton, "
           "TorchServe: their statistics; Ray Serve, FastAPI: each answer's Server-Timing)"),
    Metric("server_compute_input_ms", "ms", Pool.MEAN, "Triton: copying a request's inputs in"),
    Metric("server_compute_infer_ms", "ms", Pool.MEAN, "Triton: running the model"),
    Metric("server_compute_output_ms", "ms", Pool.MEAN, "Triton: copying a request's outputs out"),
    Metric("server_backend_input_ms", "ms", Pool.MEAN, "Triton's Python model (bundled server): gathering a pass's "
           "inputs into one batch, per request"),
    Metric("server_backend_run_ms", "ms", Pool.MEAN, "Triton's Python model: the ONNX Runtime run, per request"),
    Metric("server_backend_output_ms", "ms", Pool.MEAN, "Triton's Python model: building the responses, per request"),
    Metric("server_backend_stub_ms", "ms", Pool.MEAN, "Triton's infer time beyond its Python model's own: the server "
           "handing requests to the stub process and taking the responses back"),
    Metric("server_throughput_img_s", "img/s", Pool.GEOMETRIC, "images the server itself counts as served, per second"),
    Metric("server_count_ratio", "ratio", Pool.MEAN, "the server's count over the clients' (far from 1: one is wrong)"),
    Metric("server_count_read_ms", "ms", Pool.MEAN, "how long the two reads of the server's counters took (the "
           "server's span is known to within it)"),
    Metric("server_startup_s", "s", Pool.MEAN, "seconds from start to the model answering"),
    Metric("server_ready_s", "s", Pool.MEAN, "seconds until the server said ready"),
    Metric("server_archive_s", "s", Pool.MEAN, "TorchServe: seconds to archive the model"),
    Metric("server_warmup_s", "s", Pool.MEAN, "seconds of the server's own warm-up"),
    Metric("server_warmup_first_call_s", "s", Pool.MEAN, "the slowest first call of the server's warm-up"),
    Metric("torch_compile_s", "s", Pool.MEAN, "seconds torch.compile took in the server's warm-up"),
    Metric("trt_engine_build_s", "s", Pool.MEAN, "seconds to build the TensorRT engine (outside every window)"),
    Metric("endpoint_rtt_p50_ms", "ms", Pool.MEAN, "an endpoint's network round trip before its trials: the p50 of "
                                                   "small GETs on a kept-alive connection from the sweep's driver"),
    Metric("trt_engine_load_s", "s", Pool.MEAN, "seconds to load a cached TensorRT engine"),
    # The cross-check against the reference.
    Metric("crosscheck_top1_agreement", "share", Pool.MIN, "share of images whose top-1 class matches the reference"),
    Metric("crosscheck_max_abs_diff", "abs", Pool.MAX, "largest absolute difference of an output from the reference"),
    # Accuracy on the corpus (experiments.run.crosscheck: with labels, or under experiment.accuracy.max_top1_drop).
    Metric("accuracy_images", "count", Pool.MIN, "corpus images the trial's path was evaluated on"),
    Metric("accuracy_top1", "share", Pool.MIN, "share of the labelled images whose label is the served top-1"),
    Metric("accuracy_top5", "share", Pool.MIN, "share of the labelled images whose label is in the served top-5"),
    Metric("reference_top1", "share", Pool.MIN, "the FP32 reference's top-1 on the same labelled images"),
    Metric("reference_top5", "share", Pool.MIN, "the FP32 reference's top-5 on the same labelled images"),
    Metric("reference_top1_agreement", "share", Pool.MIN, "share of them whose served top-1 is the reference's"),
    Metric("top1_drop", "points", Pool.MAX, "points of top-1 lost against the FP32 reference (on the labels; without "
                                             "them, the top-1 disagreement in percent): held to "
                                             "experiment.accuracy.max_top1_drop"),
    # The node's telemetry over the windows (experiments.measure.telemetry).
    Metric("gpu_util_pct", "%", Pool.MEAN, "share of time the GPU was busy"),
    Metric("gpu_mem_used_mb", "MB", Pool.MAX, "the GPU's memory in use, at most"),
    Metric("gpu_power_w", "W", Pool.MEAN, "the GPU's mean power"),
    Metric("gpu_energy_j", "J", Pool.MEAN, "the GPU's energy over the windows"),
    Metric("energy_per_image_j", "J", Pool.MEAN, "the GPU's energy per image served"),
    Metric("gpu_telemetry_samples", "count", Pool.SUM, "NVML samples inside the windows"),
    Metric("node_cpu_util_pct", "%", Pool.MEAN, "share of the node's CPU time busy (every process there)"),
    Metric("node_cpu_cores_busy", "cores", Pool.MEAN, "the node's busy CPU, in cores"),
    Metric("server_cpu_cores", "cores", Pool.MEAN, "the server's own processes' CPU, in cores"),
    Metric("server_thread_cpu_max", "cores", Pool.MAX, "the server's busiest thread's CPU, in cores"),
    # Against the runtime's in-process ceiling (experiments.measure.efficiency; set after pooling).
    Metric("ceiling_batch", "batch", Pool.MEAN, "the batch the ceiling is read at: the request's or the server's"),
    Metric("ceiling_img_s", "img/s", Pool.MEAN, "the runtime's in-process throughput at that batch"),
    Metric("ceiling_output_tokens_s", "tok/s", Pool.MEAN, "a generative server's engine in-process at that batch and "
           "the prompts' lengths: output tokens per second (experiments.measure.token_efficiency)"),
    Metric("ceiling_share", "share", Pool.MEAN, "served throughput over the ceiling at the same batch"),
    Metric("ceiling_best_img_s", "img/s", Pool.MEAN, "the runtime's best in-process throughput, round trip"),
    Metric("ceiling_best_batch", "batch", Pool.MEAN, "the batch of that best"),
    Metric("ceiling_share_best", "share", Pool.MEAN, "served throughput over that best"),
    Metric("ceiling_resident_best_img_s", "img/s", Pool.MEAN, "the best with inputs already on the GPU"),
    Metric("ceiling_resident_best_batch", "batch", Pool.MEAN, "the batch of the device-resident best"),
    Metric("ceiling_share_resident", "share", Pool.MEAN, "served throughput over the device-resident best"),
    Metric("ceiling_p50_ms", "ms", Pool.MEAN, "the runtime's in-process p50 at the request's batch"),
    Metric("ceiling_b1_p50_ms", "ms", Pool.MEAN, "the runtime's in-process p50 at batch 1"),
    Metric("served_p50_over_inprocess", "ratio", Pool.MEAN, "served p50 over the in-process p50, same batch"),
    # The pooled trial itself.
    Metric("repeats", "count", Pool.SUM, "the repeats pooled into the trial's figures"),
    # An SLO summary: the highest load within the p99 target (experiments.run.slo; never pooled); an image sweep's.
    Metric("slo_p99_ms", "ms", Pool.MEAN, "the p99 target searched for"),
    Metric("slo_probes", "count", Pool.SUM, "loads measured by the search"),
    Metric("slo_met", "flag", Pool.MIN, "1 when a load met the target"),
    Metric("slo_limited", "flag", Pool.MAX, "1 when the search stopped at the configured highest load"),
    Metric("slo_client_bound", "flag", Pool.MAX,
           "1 when the lowest load that missed had a client that fell behind its schedule: the bound is the client's"),
    Metric("slo_max_load", "load", Pool.MEAN, "the highest load within the target (loops or req/s)"),
    Metric("slo_max_throughput_img_s", "img/s", Pool.GEOMETRIC, "throughput at that load"),
    Metric("slo_p99_at_max_ms", "ms", Pool.MEAN, "p99 at that load"),
    Metric("slo_stable_at_max", "flag", Pool.MIN, "1 when that load's windows agreed"),
    Metric("cost_per_1k_images_at_slo_usd", "USD", Pool.PRICED, "$ per 1k images at that load"),
    Metric("slo_min_goodput_share", "share", Pool.MEAN, "the goodput rule the search also kept "
                                                        "(experiment.slo.min_goodput_share)"),
    Metric("slo_goodput_share_at_max", "share", Pool.MEAN, "goodput over the offered requests at that load"),
    Metric("slo_max_goodput_img_s", "img/s", Pool.GEOMETRIC, "goodput at that load (with a deadline): what the "
                                                             "capacity plan sizes nodes on"),
    *family("slo_{}_at_max", ("ceiling_share", "ceiling_share_best", "ceiling_share_resident", "gpu_util_pct"),
             "share", Pool.MEAN, "the trial figure {} at the highest load within the target"),
    # A generative sweep's SLO summary: the highest load within its TTFT and TPOT p99 targets, in output tokens.
    Metric("slo_ttft_p99_ms", "ms", Pool.MEAN, "the TTFT p99 target searched for (generative)"),
    Metric("slo_tpot_p99_ms", "ms", Pool.MEAN, "the TPOT p99 target searched for (generative)"),
    Metric("slo_ttft_p99_at_max_ms", "ms", Pool.MEAN, "TTFT p99 at the highest load within the targets"),
    Metric("slo_tpot_p99_at_max_ms", "ms", Pool.MEAN, "TPOT p99 at the highest load within the targets"),
    Metric("slo_max_output_tokens_s", "tok/s", Pool.GEOMETRIC, "output tokens per second at that load"),
    Metric("slo_max_goodput_output_tokens_s", "tok/s", Pool.GEOMETRIC, "output tokens of the requests answered well "
                                                                       "(within TTFT, TPOT and deadline) at that load"),
    Metric("cost_per_1m_output_tokens_at_slo_usd", "USD", Pool.PRICED, "$ per 1M output tokens at that load"),
)
# Each workload's own figures (serving/workloads/<name>/figures.py: an image trial's img/s and $ per 1k images, a
# generative trial's TTFT, ITL, tokens/s and $ per 1M tokens).
METRICS: tuple[Metric, ...] = (*ENGINE, *(m for workload in workloads().values() for m in workload.metrics))
# A family whose members are named by what was measured: the share failed by each error class.
PATTERNS: tuple[tuple[re.Pattern[str], Metric], ...] = (
    (re.compile(r"^error_rate_(?:http_\d+|grpc_\d+|[a-z]+(?:_[a-z]+)?)$"),
     Metric("error_rate_<class>", "share", Pool.MEAN, "share of the requests that failed with this error class: "
                                                      "http_<status>, grpc_<code>, timeout, reset, refused, invalid, "
                                                      "other, and for streamed answers truncated and stream_error "
                                                      "(serving/clients/outcomes.py)")),
    (re.compile(r"^series_(?:t_s|offered_rps|throughput_img_s|output_tokens_s|goodput_img_s|error_rate|"
                r"latency_p(?:50|99)_ms)$"),
     Metric("series_<figure>", "per bin", Pool.MEAN, "the trial over time, as MLflow step metrics (step: the bin, "
                                                     "a fifth of a window): t_s, offered_rps, throughput_img_s "
                                                     "(generative: output_tokens_s), goodput_img_s, error_rate, "
                                                     "latency_p50_ms, latency_p99_ms; "
                                                     "the run's own value is the last bin's")),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
# The 95 % interval of a pooled figure: `<figure>_ci_low` and `<figure>_ci_high` (experiments.measure.intervals).
INTERVAL_END = re.compile(r"^(?P<figure>.+)_ci_(?:low|high)$")


def metric(name: str) -> Metric | None:
    """The declared metric `name`, or the figure an interval end belongs to; None when it is not declared."""
    found = BY_NAME.get(name)
    if found is None and (end := INTERVAL_END.match(name)):
        found = BY_NAME.get(end["figure"])
    return found or next((m for pattern, m in PATTERNS if pattern.match(name)), None)


def undeclared(names: object) -> list[str]:
    """The names among `names` this catalog does not declare, sorted."""
    return sorted(str(n) for n in names if metric(str(n)) is None)  # type: ignore[attr-defined]


def render_markdown() -> str:
    """docs/metrics.md: one table row per metric, the engine's first, then each workload's own."""
    lines = ["# Metrics", "",
             "Every metric a trial run carries in MLflow, rendered from the catalog, `experiments/measure/catalog.py`: "
             "the engine's own (the load, the clients, the servers, the node, the cross-check, the ceiling, the SLO "
             "search) are declared there, each workload's own beside the code that computes them, in its folder "
             "(`serving/workloads/<name>/`); "
             "`tests/test_metric_catalog.py` checks this page is current. *Pooled* says how the repeats of a trial "
             "(`experiment.repeats`) make its one figure; each pooled figure with an interval also has "
             "`<metric>_ci_low` and `<metric>_ci_high` ([Confidence intervals](confidence-intervals.md))."]
    sections = [("The engine's metrics", "", (*ENGINE, *(m for _, m in PATTERNS)))]
    sections += [(f"The `{w.name}` workload's metrics",
                  f"Declared in `serving/workloads/{w.name}/`; priced in {w.cost_label}.", w.metrics)
                 for w in workloads().values() if w.metrics]
    for title, intro, metrics in sections:
        lines += ["", f"## {title}", "", *([intro, ""] if intro else []),
                  "| metric | unit | pooled | meaning |", "|---|---|---|---|"]
        lines += [f"| `{m.name}` | {m.unit} | {m.pool} | {m.doc} |" for m in metrics]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")

"""Summaries computed from raw samples: latency percentiles, throughput, cost per image."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.measure.catalog import PERCENTILES
from experiments.measure.samples import WindowSamples
from serving.clients.outcomes import SHED_CLASSES
from serving.workloads.image import figures as image_figures
from serving.workloads.registry import workload as workload_named
from serving.workloads.workload import Workload

IMAGE = workload_named("image")

if TYPE_CHECKING:
    from experiments.config.schema import SloConfig

# An open loop is overloaded when its backlog (requests scheduled but not yet served) grew over the measured
# windows by more than this share of the arrivals, and by more than twice their Poisson noise (sqrt of the
# count): a queue that merely fluctuates near capacity does not trip it, one that falls behind does.
OVERLOAD_FRACTION = 0.05
# An open-loop client fell behind its own schedule when more than CLIENT_LATE_SHARE of the arrivals left more than
# 5 ms late while the client's own timer ran at least CLIENT_LAG_MS late (p99, twice what makes a send late): then
# the lateness, and any backlog it left, is the client's, whatever the server did. A server too slow for the load
# makes sends wait for a free slot, not the client's timer late (its p99 stays within 1-7 ms on a 2-core VM).
CLIENT_LATE_SHARE = 0.05
CLIENT_LAG_MS = 10.0
# A trial stalled when its server answered nothing for this many times its p50, and at least STALL_MIN_MS, while
# requests waited: a freeze (a batcher asleep, a pause) that a p99 over thousands of requests can hide.
STALL_FACTOR = 10.0
STALL_MIN_MS = 100.0
# The client's and the server's count of served images may differ by this share before a trial is flagged.
SERVER_COUNT_TOLERANCE = 0.05


def percentile_metrics(prefix: str, latency_s: np.ndarray,
                       percentiles: tuple[int, ...] = PERCENTILES) -> dict[str, float]:
    """`<prefix>_p50_ms` ... `<prefix>_p99_ms` of latencies in seconds."""
    values = np.percentile(latency_s * 1e3, percentiles)
    return {f"{prefix}_p{p}_ms": float(v) for p, v in zip(percentiles, values, strict=True)}


def latency_metrics(latency_s: np.ndarray) -> dict[str, float]:
    if latency_s.size == 0:
        return {}
    ms = latency_s * 1e3
    out = percentile_metrics("latency", latency_s)
    out.update(latency_mean_ms=float(ms.mean()), latency_min_ms=float(ms.min()), latency_max_ms=float(ms.max()))
    return out


def throughput_metrics(samples: WindowSamples) -> dict[str, float]:
    """What was served: requests (images) that completed inside the windows per second, whenever they were
    scheduled (perf_analyzer and LoadGen count so), in closed and open loop alike."""
    requests_s = samples.completed / samples.duration_s
    return {"requests_s": requests_s, "throughput_img_s": image_figures.throughput(samples)}


def cost_metrics(price_per_hour_usd: float, throughput_img_s: float) -> dict[str, float]:
    """$ per 1k images and images per $ (absent when the tier is free)."""
    return image_figures.cost_figures(price_per_hour_usd, throughput_img_s)


def window_metrics(samples: WindowSamples, price_per_hour_usd: float, workload: Workload = IMAGE,
                   slo: SloConfig | None = None) -> dict[str, float]:
    """Latency and requests answered per second (every workload's), then the workload's own figures: an image
    trial's images per second and $ per 1k images, a generative one's tokens per second, TTFT, ITL, TPOT, $ per 1M
    tokens (with `slo`'s targets, its goodput)."""
    metrics = {**latency_metrics(samples.latency_s), "requests_s": samples.completed / samples.duration_s,
               # every request scheduled inside the windows, answered or failed: error_rate's denominator
               "request_count": float(samples.arrivals), "completed_requests": float(samples.completed)}
    metrics.update(workload.figures(samples, price_per_hour_usd, slo))
    return metrics


def answer_gap_metrics(samples: WindowSamples) -> dict[str, float]:
    """`answer_gap_max_ms`: the longest time between two answers while a request was in flight all along (sent by
    the first answer, ended, answered or failed, no earlier than the second). A busy server's gaps are about its
    service time; a stalled one's far longer, with refusals meanwhile not ending the gap."""
    answered = np.sort(samples.done_s)
    if answered.size < 2:
        return {}
    sent = np.concatenate([samples.send_s, samples.failures.send_s])
    ended = np.concatenate([samples.done_s, samples.failures.done_s])
    order = np.argsort(sent, kind="stable")
    latest_end = np.maximum.accumulate(ended[order])  # of the requests sent so far, the latest to end
    sent_by = np.searchsorted(sent[order], answered[:-1], side="right")  # requests sent by each answer
    waited = (sent_by > 0) & (latest_end[np.maximum(sent_by - 1, 0)] >= answered[1:])
    gaps = np.diff(answered)[waited]
    return {"answer_gap_max_ms": float(gaps.max() * 1e3) if gaps.size else 0.0}


def is_stalled(metrics: Any) -> Any:
    """The server answered nothing for STALL_FACTOR times the trial's p50 (and STALL_MIN_MS) while requests waited.
    `metrics`: one trial's (a dict: a bool), or a frame of trials (a boolean Series; a missing figure is no stall)."""
    gap, p50 = metrics.get("answer_gap_max_ms", 0.0), metrics.get("latency_p50_ms", math.inf)
    return (gap >= STALL_MIN_MS) & (gap >= STALL_FACTOR * p50)


def is_stable(values: list[float], percent: float) -> bool:
    """perf_analyzer's rule: every value within `percent` % of their mean."""
    mean = float(np.mean(values))
    if mean == 0:
        return all(v == 0 for v in values)
    return all(abs(v - mean) / mean * 100.0 <= percent for v in values)


def window_stats(samples: WindowSamples, latency_percentile: float,
                 workload: Workload = IMAGE) -> tuple[float, float]:
    """(the workload's throughput: img/s, output tok/s; latency percentile ms) of one window: what the stability rule
    compares."""
    if samples.requests == 0:
        return 0.0, float("inf")
    return (workload.throughput_of(samples), float(np.percentile(samples.latency_s * 1e3, latency_percentile)))


def windows_stable(windows: list[WindowSamples], percent: float, latency_percentile: float,
                   workload: Workload = IMAGE) -> bool:
    stats = [window_stats(w, latency_percentile, workload) for w in windows]
    return is_stable([s[0] for s in stats], percent) and is_stable([s[1] for s in stats], percent)


def is_overloaded(samples: WindowSamples) -> bool:
    """Completions fell behind arrivals: the backlog grew over the windows beyond what a steady queue jitters.
    A rejection ends a request as surely as an answer: a server that sheds what it cannot serve keeps up."""
    growth = samples.arrivals - samples.ended
    return growth > max(OVERLOAD_FRACTION * samples.arrivals, 2.0 * math.sqrt(samples.arrivals))


def client_fell_behind(late_fraction: float, loop_lag_p99_ms: float) -> bool:
    """The open-loop client, not the server, missed the arrivals' schedule (see CLIENT_LAG_MS)."""
    return late_fraction > CLIENT_LATE_SHARE and loop_lag_p99_ms >= CLIENT_LAG_MS


def open_loop_metrics(samples: WindowSamples, target_rate: float) -> dict[str, float]:
    """The rates side by side: target (configured), offered (arrivals scheduled in the windows), achieved
    (requests sent in them); the backlog's growth (arrivals - requests ended) and whether it means overload; late
    sends, whether the client itself fell behind, and the send-time latencies that coordinated omission would show.
    Failed requests count in every rate: a load that is half rejected was still offered in full."""
    late = sum(c.late_sends for c in samples.clients)
    arrivals = samples.arrivals
    out = {"target_rate_rps": target_rate, "offered_rate_rps": arrivals / samples.duration_s,
           "achieved_rate_rps": samples.sent / samples.duration_s,
           "backlog_growth_requests": float(arrivals - samples.ended),
           "overloaded": float(is_overloaded(samples)),
           "late_requests": float(late), "late_fraction": late / arrivals if arrivals else 0.0}
    if samples.clients:
        out["client_behind"] = float(client_fell_behind(out["late_fraction"],
                                                        max(c.loop_lag_p99_ms for c in samples.clients)))
    if samples.requests:
        out.update(percentile_metrics("send_latency", samples.send_latency_s))
    return out


def tenancy_metrics(samples: WindowSamples, neighbours: list[WindowSamples]) -> dict[str, float]:
    """A shared card's other servers over the same windows, each under the same load as the trial's own: what the
    whole card served, what a neighbour served and answered in, and how evenly the card was shared (the least
    served tenant over the most served)."""
    if not neighbours:
        return {}
    rates = [image_figures.throughput(s) for s in (samples, *neighbours)]
    out = {"tenants_measured": float(len(rates)), "card_throughput_img_s": float(sum(rates)),
           "neighbour_throughput_img_s": float(np.mean(rates[1:])),
           "tenant_fairness": min(rates) / max(rates) if max(rates) > 0 else 0.0}
    latency = np.concatenate([s.latency_s for s in neighbours])
    if latency.size:
        out.update(percentile_metrics("neighbour_latency", latency, (50, 99)))
    return out


def server_count_metrics(server_images: float, server_span_s: float, throughput_img_s: float,
                         read_s: float = 0.0) -> dict[str, float]:
    """The server's own count of images it served (e.g. Triton's `nv_inference_count`) over `server_span_s`,
    as a rate beside the clients' throughput: `server_count_ratio` far from 1 means one of them is wrong. `read_s`:
    how long the two reads of the counters took together (the span is known to within it)."""
    if server_span_s <= 0:
        return {}
    server_img_s = server_images / server_span_s
    out = {"server_throughput_img_s": server_img_s, "server_count_read_ms": read_s * 1e3}
    if throughput_img_s > 0:
        out["server_count_ratio"] = server_img_s / throughput_img_s
    return out


def counts_disagree(metrics: dict[str, float], samples: WindowSamples) -> bool:
    """The two counts differ by more than SERVER_COUNT_TOLERANCE, by more than the two requests a counter read
    a few ms off a window's edge can move (which matters in a short, slow trial only), and by more than the reads'
    own length can: the server took each snapshot somewhere inside its read, which a loaded server can answer
    100 ms late, so the server's span is uncertain by the two reads' length (`server_count_read_ms`)."""
    ratio = metrics.get("server_count_ratio")
    images = samples.completed * samples.images_per_request
    if ratio is None or images == 0:
        return False
    span_s = samples.duration_s
    read_share = metrics.get("server_count_read_ms", 0.0) / 1e3 / span_s if span_s > 0 else 0.0
    return abs(ratio - 1.0) > max(SERVER_COUNT_TOLERANCE, 2.0 * samples.images_per_request / images) + read_share


def client_metrics(samples: WindowSamples) -> dict[str, float]:
    """The busiest client actor (a client near a full core measures itself, not the server), and the clients'
    CPU per completed request over every actor and window: set against the latency, it says how much of a
    request's time the client itself may have taken (close to it: the trial was client-bound)."""
    if not samples.clients:
        return {}
    out = {"client_cpu_util_max": max(c.cpu_util for c in samples.clients),
           "client_loop_lag_p99_ms_max": max(c.loop_lag_p99_ms for c in samples.clients)}
    completed = sum(c.completed for c in samples.clients)
    if completed:
        out["client_cpu_us_per_request"] = sum(c.cpu_s for c in samples.clients) / completed * 1e6
    return out


def server_reported_metrics(samples: WindowSamples) -> dict[str, float]:
    """Per-request figures the server itself reported (Ray Serve's replica, the FastAPI service): its processing
    time; `server_queue_ms`, how long a request waited for its forward pass (in the batcher, then for the inference
    thread: what Triton's statistics call queue time); and `server_batch_avg`, images per forward pass as Triton's
    statistics count them (inference count over execution count). A request of b images in a pass of E is b/E of an
    execution, so over the window the average is the harmonic mean of E over requests."""
    reported = samples.server_ms[~np.isnan(samples.server_ms)]
    if reported.size == 0:
        return {}
    out = {"server_replica_ms": float(reported.mean()), "server_replica_p50_ms": float(np.percentile(reported, 50)),
           "server_replica_p99_ms": float(np.percentile(reported, 99))}
    if samples.server_batch is not None:
        executed = samples.server_batch[~np.isnan(samples.server_batch)]
        if executed.size:
            out["server_batch_avg"] = float(executed.size / np.sum(1.0 / executed))
    if samples.server_queue_ms is not None:
        waited = samples.server_queue_ms[~np.isnan(samples.server_queue_ms)]
        if waited.size:
            out["server_queue_ms"] = float(waited.mean())
    return out


def good_deadline_ms(slo: SloConfig) -> float | None:
    """The latency within which an answered request is good: `slo.deadline_ms`, else the p99 target; None: no
    goodput is computed."""
    return slo.deadline_ms if slo.deadline_ms is not None else slo.p99_ms


def outcome_metrics(samples: WindowSamples, deadline_ms: float | None) -> dict[str, float]:
    """Errors and goodput over the requests scheduled inside the windows: the share that failed (in all, and by error
    class: `error_rate_http_503`, `error_rate_timeout`, ...), the latency of every request, failed ones included
    (when any failed: the latency figures above are of the requests answered well), and with a deadline the goodput:
    images of requests answered well within it, per second (counted as they completed, as throughput is: never above
    it), and the share of the requests scheduled answered well within it."""
    failed = samples.failures
    scheduled = samples.requests + failed.count
    out = {"error_rate": failed.count / scheduled if scheduled else 0.0, "failed_requests": float(failed.count)}
    for name, count in sorted(failed.by_class().items()):
        out[f"error_rate_{name}"] = count / scheduled
    if failed.count:
        everything = np.concatenate([samples.latency_s, failed.done_s - failed.intended_s])
        out.update(percentile_metrics("latency_all", everything))
    if deadline_ms is not None:
        # the rate by completion, as throughput's (never above it); the share of the requests scheduled
        good_answers = int(np.count_nonzero(samples.completed_latency_s * 1e3 <= deadline_ms))
        out["goodput_img_s"] = good_answers * samples.images_per_request / samples.duration_s
        good = int(np.count_nonzero(samples.latency_s * 1e3 <= deadline_ms))
        out["goodput_share"] = good / scheduled if scheduled else 0.0
    return out


def over_error_budget(metrics: dict[str, float], max_error_rate: float, closed_loop: bool = False) -> str | None:
    """Why a trial's errors fail it (its share above `max_error_rate`, experiment.max_error_rate); None within it.
    A closed loop whose errors are mostly refusals resends each at once, so its share counts its own resends: the
    reason says to measure shedding with an open loop."""
    rate = metrics.get("error_rate", 0.0)
    if rate <= max_error_rate:
        return None
    by_class = {k.removeprefix("error_rate_"): v for k, v in sorted(metrics.items()) if k.startswith("error_rate_")}
    classes = ", ".join(f"{name} {share:.1%}" for name, share in by_class.items())
    reason = (f"{rate:.1%} of the requests failed ({classes}), above experiment.max_error_rate={max_error_rate:g}: "
              "its figures are kept (latency of the requests answered well, errors by class)")
    if closed_loop and sum(v for k, v in by_class.items() if k in SHED_CLASSES) > rate / 2:
        reason += ("; most are what a server that sheds load answers, and a closed loop sends a refused request's "
                   "successor at once, so this share counts its own resends: measure a server that sheds with an "
                   "open loop (experiment.load_mode=poisson and experiment.request_rates)")
    return reason


def time_series(windows: list[WindowSamples], bins_per_window: int,
                deadline_ms: float | None) -> list[dict[str, float]]:
    """The trial over time: every window cut in `bins_per_window` bins, each with its start (`t_s`, seconds from the
    first window's), the requests scheduled in it per second (`offered_rps`, failed ones included), the images
    answered well that completed in it (`throughput_img_s`; requests whose tokens were traced: their output tokens,
    `output_tokens_s`), with a deadline those answered within it (`goodput_img_s`), and the error rate and latency
    p50 / p99 of the requests scheduled in it."""
    out: list[dict[str, float]] = []
    origin = windows[0].window_start if windows else 0.0
    for window in windows:
        edges = np.linspace(window.window_start, window.window_end, bins_per_window + 1)
        failed, images = window.failures, window.images_per_request
        latency_ms = window.latency_s * 1e3
        tokens = (np.array([t.output_tokens for t in window.detail], dtype=np.float64)
                  if window.detail is not None else None)
        for start, end in zip(edges[:-1], edges[1:], strict=True):
            span = end - start
            ok = (window.intended_s >= start) & (window.intended_s < end)
            bad = int(np.count_nonzero((failed.intended_s >= start) & (failed.intended_s < end)))
            scheduled = int(np.count_nonzero(ok)) + bad
            answered = (window.done_s >= start) & (window.done_s < end)
            point = {"t_s": float(start - origin), "offered_rps": scheduled / span,
                     "error_rate": bad / scheduled if scheduled else 0.0}
            if tokens is not None:
                point["output_tokens_s"] = float(tokens[answered].sum()) / span
            else:
                point["throughput_img_s"] = int(np.count_nonzero(answered)) * images / span
                if deadline_ms is not None:  # of the answers counted above, those within the deadline
                    within = answered & (latency_ms <= deadline_ms)
                    point["goodput_img_s"] = int(np.count_nonzero(within)) * images / span
            if ok.any():
                p50, p99 = np.percentile(latency_ms[ok], [50, 99])
                point.update(latency_p50_ms=float(p50), latency_p99_ms=float(p99))
            out.append(point)
    return out

"""A SYNTHETIC sweep for tests: runs with made-up, round numbers logged through the sweep's own Tracker into a
temporary MLflow store, so report tables can be checked exactly. Never measured, never shown as measured:
every run carries the tag `synthetic=true` and the sweep id says so."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiments.config.compose import load_config
from experiments.config.prices import tier_price_params
from experiments.config.search import add_candidate
from experiments.measure.metrics import cost_metrics
from experiments.plan import Trial
from experiments.results.records import Status, TrialRecord
from experiments.results.tracking import Tracker
from experiments.run.slo import SloProbe, SloResult
from experiments.run.trial import new_record
from serving.node import NodeInfo

SWEEP_ID = "synthetic-fixture"
TAGS = {"synthetic": "true"}
NODE = NodeInfo("synthetic-host", "127.0.0.1", "node", "synthetic CPU", 2)
# Tier a100: primary $0.36/h ($ per 1k images = 0.1 / throughput), spot $0.18/h (= 0.05 / throughput).
# Tier rtx4090 (tagged emulated): primary $0.18/h; p50 and p99 x2, throughput x0.75 of a100's.
PRICES = {"a100": 0.36, "rtx4090": 0.18}
A100_SPOT = 0.18
CROSSCHECK_DIFF = {"a100": 2e-5, "rtx4090": 3e-5}
# (variant, protocol, batch, concurrency) -> (p50 ms, p99 ms, throughput img/s) on a100
A100 = {
    ("triton_onnx", "http", 1, 1): (10.0, 20.0, 100.0),
    ("triton_onnx", "http", 8, 1): (40.0, 60.0, 200.0),
    ("triton_onnx", "http", 1, 4): (30.0, 50.0, 130.0),
    ("triton_onnx", "http", 8, 4): (100.0, 150.0, 320.0),
    ("triton_onnx", "grpc", 1, 1): (8.0, 16.0, 125.0),
    ("triton_onnx", "grpc", 8, 1): (50.0, 70.0, 160.0),
    ("triton_onnx", "grpc", 1, 4): (20.0, 40.0, 200.0),
    ("triton_onnx", "grpc", 8, 4): (80.0, 120.0, 400.0),
    ("pytorch", "http", 1, 1): (25.0, 45.0, 40.0),
    ("pytorch", "http", 8, 1): (100.0, 160.0, 80.0),
    ("pytorch", "http", 1, 4): (50.0, 90.0, 80.0),
    ("pytorch", "http", 8, 4): (200.0, 300.0, 160.0),
}


def numbers(tier: str, key: tuple[str, str, int, int]) -> tuple[float, float, float]:
    p50, p99, thr = A100[key]
    return (p50, p99, thr) if tier == "a100" else (2 * p50, 2 * p99, 0.75 * thr)


def _cfg(tier: str) -> Any:
    overrides = [f"gpu={tier}", f"gpu.price_per_hour_usd={PRICES[tier]}", f"sweep_id={SWEEP_ID}"]
    cfg = load_config(overrides)
    # Only the prices this fixture states (the tier files' real alternatives would blur exact checks).
    cfg.gpu.prices = {"spot": {"usd_per_hour": A100_SPOT, "kind": "spot", "provider": "Synthetic",
                               "source": "test fixture", "seen": "2026-01-01"}} if tier == "a100" else {}
    return cfg


def _metrics(p50: float, p99: float, thr: float, price: float, batch: int) -> dict[str, float]:
    return {"latency_p50_ms": p50, "latency_p90_ms": (p50 + p99) / 2, "latency_p95_ms": (p50 + p99) / 2,
            "latency_p99_ms": p99, "latency_mean_ms": p50, "throughput_img_s": thr, "requests_s": thr / batch,
            "payload_bytes": 602_112.0 * batch, **cost_metrics(price, thr)}


@dataclass
class _TierRun:
    """One tier's run in a synthetic sweep: every trial logged under it carries the same tags and no raw samples."""

    tracker: Tracker
    run: str
    tags: dict[str, str]

    def log(self, record: TrialRecord) -> None:
        self.tracker.log_trial(self.run, record, _no_dir(), self.tags, "synthetic: true\n")

    def finish(self) -> None:
        self.tracker.finish(self.run, Status.OK)


class _Sweep:
    """The setup every synthetic sweep below shares: its sweep run in `uri`, each tier's config and run under it."""

    def __init__(self, uri: str, sweep_id: str) -> None:
        self.sweep_id = sweep_id
        self.tracker = Tracker(uri, "tierbench")
        self.run = self.tracker.sweep_run(sweep_id, TAGS)

    def cfg(self, tier: str) -> Any:
        cfg = _cfg(tier)
        cfg.sweep_id = self.sweep_id
        return cfg

    def tags(self, tier: str, emulated: bool = False) -> dict[str, str]:
        return {"sweep_id": self.sweep_id, "gpu_tier": tier, "emulated": str(emulated).lower(), **TAGS}

    def tier_run(self, tier: str, params: dict[str, Any], emulated: bool = False) -> _TierRun:
        tags = self.tags(tier, emulated)
        return _TierRun(self.tracker, self.tracker.tier_run(self.sweep_id, tier, self.run, params, tags), tags)

    def finish(self, status: str = Status.OK) -> dict[str, str]:
        """Close the sweep run; returns {"sweep_run": id, "experiment_id": id}, what the tests look runs up by."""
        self.tracker.finish(self.run, status)
        return {"sweep_run": self.run, "experiment_id": self.tracker.experiment_id}


def build(uri: str, superseded_failure: bool = True) -> dict[str, str]:
    """Log the synthetic sweep into `uri`; returns {"sweep_run": id, "experiment_id": id}."""
    sweep = _Sweep(uri, SWEEP_ID)
    for tier in ("a100", "rtx4090"):
        cfg = sweep.cfg(tier)
        tier_params = {"gpu_tier": tier, "gpu_display_name": cfg.gpu.display_name, "gpu_name": "synthetic GPU",
                       "price_per_hour_usd": PRICES[tier], "price_source": "test fixture",
                       "price_seen": "2026-01-01", **tier_price_params(cfg.gpu)}
        tier_run = sweep.tier_run(tier, tier_params, emulated=tier == "rtx4090")
        for key in A100:
            variant, protocol, batch, conc = key
            trial = Trial(tier, "resnet18", variant, variant, protocol, "tensor", batch, conc)
            if superseded_failure and tier == "a100" and key == ("pytorch", "http", 1, 1):
                failed = new_record(cfg, trial, NODE, status=Status.FAILED, reason="earlier attempt: server crashed")
                failed.tags["retried"] = "true"  # measured again at once (experiment.trial_retries)
                tier_run.log(failed)
            record = new_record(cfg, trial, NODE)
            if superseded_failure and tier == "a100" and key == ("pytorch", "http", 1, 1):
                record.tags |= {"attempt": "2", "earlier_failure": "earlier attempt: server crashed"}
            record.metrics = _metrics(*numbers(tier, key), PRICES[tier], batch)
            # The cross-check's figures: under the metric names written since (a100), and before (rtx4090).
            prefix = "crosscheck" if tier == "a100" else "validation"
            record.metrics |= {f"{prefix}_top1_agreement": 1.0, f"{prefix}_max_abs_diff": CROSSCHECK_DIFF[tier]}
            tier_run.log(record)
        if tier == "a100":  # an SLO search result: at most concurrency 6 keeps p99 <= 45 ms (synthetic)
            point = Trial(tier, "resnet18", "triton_onnx", "triton_onnx", "grpc", "tensor", 1, 0)
            slo = new_record(cfg, point, NODE)
            slo.key, slo.run_name = "synthetic-slo", f"{tier}/triton_onnx/grpc/tensor/b1/slo-p99-45ms"
            slo.tags["run_level"] = "slo"
            slo.metrics = SloResult(45.0, SloProbe(6, 44.0, 240.0), [SloProbe(c, 30 + 2 * c, 40.0 * c)
                                                                     for c in (1, 2, 4, 6, 8)]).metrics(PRICES[tier])
            tier_run.log(slo)
        for protocol in ("http", "grpc"):
            trial = Trial(tier, "resnet18", "triton_trt", "triton_trt", protocol, "tensor", 1, 1)
            record = new_record(cfg, trial, NODE, status=Status.SKIPPED, reason="needs an NVIDIA GPU (synthetic)")
            tier_run.log(record)
        if tier == "a100":  # what the benchmark cost: 30 min of node time (synthetic), logged as a sweep logs it
            sweep.tracker.log_metrics(tier_run.run, {"node_uptime_s": 1800.0, "sweep_cost_usd": PRICES[tier] / 2})
        tier_run.finish()
    jpeg = Trial("a100", "resnet18", "pytorch", "pytorch", "http", "jpeg", 1, 1)
    bad = new_record(_cfg("a100"), jpeg, NODE, status=Status.FAILED, reason="measurement failed: synthetic failure")
    # One more a100 trial, under its tier run found again by its identity (no params or tags to add).
    _TierRun(sweep.tracker, sweep.tracker.tier_run(SWEEP_ID, "a100", sweep.run, {}, {}), sweep.tags("a100")).log(bad)
    return sweep.finish(Status.FAILED)


FLAGS_SWEEP_ID = "synthetic-flags"
# A second synthetic sweep (one tier, a100, $0.36/h: $ per 1k = 0.1 / throughput) with the caveats the report
# must mark: (variant, protocol, batch, load) -> (p50, p99, img/s, extra metrics). Open-loop loads are rates.
FLAGGED = {
    ("triton_onnx", "grpc", 1, "c1"): (8.0, 16.0, 125.0, {"client_cpu_us_per_request": 310.0,
                                                          "client_cpu_util_max": 0.42}),
    ("triton_onnx", "grpc", 1, "c4"): (20.0, 40.0, 200.0, {"stable": 0.0, "server_count_ratio": 1.12}),  # cheaper
    ("triton_onnx", "grpc", 8, "c4"): (80.0, 120.0, 400.0, {}),
    ("pytorch", "http", 1, "c1"): (5.0, 10.0, 50.0, {"stable": 0.0}),  # the fastest, unstable
    # It stalled once: nothing answered for 500 ms while requests waited (55 x its p50), which its p99 hides.
    ("triton_onnx", "grpc", 1, 100.0): (9.0, 30.0, 100.0, {
        "target_rate_rps": 100.0, "offered_rate_rps": 100.4, "achieved_rate_rps": 100.4, "overloaded": 0.0,
        "backlog_growth_requests": 1.0, "server_count_ratio": 1.01, "server_queue_ms": 1.5,
        "answer_gap_max_ms": 500.0, "latency_max_ms": 506.0}),
    # 60 req/s of 8 images offered, 55 served: the backlog grew; cheaper than anything if it counted. Stable: once
    # the backlog is long, a window adds little to it, so its windows can agree.
    ("triton_onnx", "grpc", 8, 60.0): (2400.0, 4800.0, 440.0, {
        "target_rate_rps": 60.0, "offered_rate_rps": 60.2, "achieved_rate_rps": 60.2, "overloaded": 1.0,
        "backlog_growth_requests": 31.0, "server_count_ratio": 0.99, "server_queue_ms": 2300.0}),
    # The same rate over HTTP, where the client fell behind its own schedule: 62 % of the arrivals left late while its
    # timer ran 140 ms late, so 41 req/s were sent of 60: the backlog is the client's.
    ("triton_onnx", "http", 1, 60.0): (900.0, 2000.0, 40.0, {
        "target_rate_rps": 60.0, "offered_rate_rps": 60.1, "achieved_rate_rps": 41.0, "overloaded": 1.0,
        "backlog_growth_requests": 57.0, "server_count_ratio": 1.0, "late_fraction": 0.62,
        "client_loop_lag_p99_ms_max": 140.0, "client_behind": 1.0}),
}


def build_flagged(uri: str) -> dict[str, str]:
    """Log the flagged sweep into `uri` (a store of its own: it would be `latest` in the main fixture's)."""
    sweep = _Sweep(uri, FLAGS_SWEEP_ID)
    cfg = sweep.cfg("a100")
    # Its node had 1.9 of its 2 cores busy before the sweep started anything on it.
    tier_run = sweep.tier_run("a100", {"gpu_tier": "a100", "price_per_hour_usd": 0.36, "node_cpu_count": 2,
                                       "node_cpu_busy_before": 1.9, **tier_price_params(cfg.gpu)})
    for (variant, protocol, batch, load), (p50, p99, thr, extra) in FLAGGED.items():
        trial = Trial("a100", "resnet18", variant, variant, protocol, "tensor", batch,
                      int(load[1:]) if isinstance(load, str) else 0)
        if not isinstance(load, str):
            trial = replace(trial, load_mode="poisson", request_rate=load)
        record = new_record(cfg, trial, NODE)
        record.metrics = {**_metrics(p50, p99, thr, PRICES["a100"], batch), "stable": 1.0, **extra}
        record.tags["stable"] = str(record.metrics["stable"] == 1).lower()
        if "overloaded" in extra:
            record.tags["overloaded"] = str(extra["overloaded"] == 1).lower()
        if abs(extra.get("server_count_ratio", 1.0) - 1) > 0.05:
            record.tags["server_count_mismatch"] = "true"
        tier_run.log(record)
    tier_run.finish()
    return sweep.finish()


def _no_dir() -> Path:
    """No raw-result folder: a synthetic trial has no latencies.csv to attach."""
    return Path("/nonexistent-synthetic-trial-dir")


SEARCH_SWEEP_ID = "synthetic-search"
# A settings search on two tiers (a100 $0.36/h: $ per 1k = 0.1 / img/s; rtx4090 $0.18/h: 0.05 / img/s):
# tier -> [(instance_count, max_queue_delay_us, img/s at p99 <= 50 ms or None when no load met it, start?)].
SEARCHED = {
    "a100": [(1, 2000, 200.0, True), (2, 2000, 400.0, False), (2, 10000, 360.0, False), (1, 10000, None, False)],
    "rtx4090": [(1, 2000, 150.0, True), (2, 2000, 200.0, False), (2, 500, 240.0, False)],
}


def build_searched(uri: str) -> dict[str, str]:
    """Log the search sweep's SLO summaries into `uri` (a store of its own), as `BackendSearch` logs them."""
    import json

    sweep = _Sweep(uri, SEARCH_SWEEP_ID)
    for tier, candidates in SEARCHED.items():
        cfg = sweep.cfg(tier)
        tier_run = sweep.tier_run(tier, {"gpu_tier": tier, "price_per_hour_usd": PRICES[tier]})
        for instances, delay, throughput, start in candidates:
            values = {"instance_count": instances, "max_queue_delay_us": delay}
            entry = add_candidate(cfg, "triton_onnx_dynbatch", values)
            point = Trial(tier, "resnet18", "triton_onnx", entry, "grpc", "tensor", 1, 0)
            record = new_record(cfg, point, NODE)  # a trial the grid measured, so the report has trials
            record.metrics = _metrics(10.0, 20.0, throughput or 50.0, PRICES[tier], 1)
            tier_run.log(record)
            slo = new_record(cfg, point, NODE)
            slo.key, slo.run_name = f"synthetic-slo-{tier}-{entry}", f"{tier}/{entry}/grpc/tensor/b1/slo-p99-50ms"
            slo.tags["run_level"] = "slo"
            best = SloProbe(8, 45.0, throughput) if throughput else None
            slo.metrics = SloResult(50.0, best, [best or SloProbe(1, 80.0, 50.0)]).metrics(PRICES[tier])
            slo.params.update(search_of="triton_onnx_dynbatch", search_strategy="quick",
                              search_start=str(start).lower(), search_values=json.dumps(values))
            tier_run.log(slo)
        tier_run.finish()
    return sweep.finish()


CAPACITY_SWEEP_ID = "synthetic-capacity"
CAPACITY_SLO_MS = 50.0
# SLO search results at p99 <= 50 ms for the capacity plan (synthetic): tier -> [(variant, protocol, batch, img/s per
# node within the target, search stopped at its load limit?)]. a100 $0.36/h (spot $0.18/h), rtx4090 $0.18/h. For a
# peak of 1,000 img/s + 20 % (1,200 img/s): a100 needs 3 nodes (1,500 img/s), rtx4090 6 (1,200: exactly), and
# 2 a100 + 1 rtx4090 (1,200) cost $0.90/h, less than either alone ($1.08/h).
CAPACITY = {
    "a100": [("triton_onnx", "grpc", 8, 500.0, False), ("pytorch", "http", 1, 100.0, True)],
    "rtx4090": [("triton_onnx", "grpc", 8, 200.0, False)],
}


def build_capacity(uri: str) -> dict[str, str]:
    """Log the capacity sweep into `uri` (a store of its own): per point a grid trial and its SLO summary."""
    sweep = _Sweep(uri, CAPACITY_SWEEP_ID)
    for tier, points in CAPACITY.items():
        cfg = sweep.cfg(tier)
        tier_params = {"gpu_tier": tier, "gpu_display_name": cfg.gpu.display_name, "price_per_hour_usd": PRICES[tier],
                       "price_source": "test fixture", "price_seen": "2026-01-01", "experiment": "quick",
                       "model": "resnet18", **tier_price_params(cfg.gpu)}
        tier_run = sweep.tier_run(tier, tier_params)
        for variant, protocol, batch, throughput, limited in points:
            point = Trial(tier, "resnet18", variant, variant, protocol, "tensor", batch, 1)
            record = new_record(cfg, point, NODE)
            record.metrics = _metrics(20.0, 30.0, throughput / 4, PRICES[tier], batch)
            tier_run.log(record)
            slo = new_record(cfg, point.at_load(0), NODE)
            slo.key = f"synthetic-capacity-{tier}-{variant}-{protocol}-b{batch}"
            slo.run_name = f"{tier}/{variant}/{protocol}/tensor/b{batch}/slo-p99-50ms"
            slo.tags["run_level"] = "slo"
            best = SloProbe(8, 45.0, throughput)
            slo.metrics = SloResult(CAPACITY_SLO_MS, best, [best], limited=limited).metrics(PRICES[tier])
            tier_run.log(slo)
        tier_run.finish()
    return sweep.finish()


REPEATS_SWEEP_ID = "synthetic-repeats"
REPEATS_APART_SWEEP_ID = "synthetic-repeats-apart"
# Trials measured 3 times (experiment.repeats=3), as their pooled figures and 95 % intervals (synthetic): tier -> (p50,
# p99, img/s, img/s interval) at triton_onnx/grpc/tensor b8 c4. a100 $0.36/h: $0.00025 per 1k images ($0.000238 to
# $0.000263). rtx4090 $0.18/h: at 190 img/s (170-210) $0.000263 ($0.000238-$0.000294), within noise of a100's; in the
# "apart" sweep at 150 img/s (145-155) $0.000333 ($0.000323-$0.000345), clear of it.
REPEATED = {
    "a100": (80.0, 120.0, 400.0, (380.0, 420.0)),
    "rtx4090": (160.0, 240.0, 190.0, (170.0, 210.0)),
}
REPEATED_APART = {**REPEATED, "rtx4090": (160.0, 240.0, 150.0, (145.0, 155.0))}


def build_repeats(uri: str, apart: bool = False) -> dict[str, str]:
    """Log a sweep of trials measured several times into `uri` (both variants fit one store: report them by id)."""
    from experiments.measure.intervals import Interval, interval_metrics
    from experiments.measure.pooled import cost_intervals

    sweep = _Sweep(uri, REPEATS_APART_SWEEP_ID if apart else REPEATS_SWEEP_ID)
    for tier, (p50, p99, thr, (low, high)) in (REPEATED_APART if apart else REPEATED).items():
        cfg = sweep.cfg(tier)
        cfg.experiment.repeats = 3
        tier_run = sweep.tier_run(tier, {"gpu_tier": tier, "price_per_hour_usd": PRICES[tier],
                                         **tier_price_params(cfg.gpu)})
        record = new_record(cfg, Trial(tier, "resnet18", "triton_onnx", "triton_onnx", "grpc", "tensor", 8, 4), NODE)
        throughput = Interval(low, high)
        record.metrics = {**_metrics(p50, p99, thr, PRICES[tier], 8), "repeats": 3.0,
                          **interval_metrics("latency_p50_ms", Interval(0.95 * p50, 1.05 * p50)),
                          **interval_metrics("latency_p99_ms", Interval(0.9 * p99, 1.1 * p99)),
                          **interval_metrics("throughput_img_s", throughput),
                          **cost_intervals(PRICES[tier], throughput)}
        tier_run.log(record)
        tier_run.finish()
    return sweep.finish()

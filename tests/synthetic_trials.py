"""MANY SYNTHETIC trials logged exactly as a sweep's driver logs them (`Publisher`: sweep run, tier runs, one run per
trial with its record.json, latencies.csv and config.yaml), with no server measured: for the tracking-scale benchmark
and the concurrent-writers test. Made-up figures, never shown as measured: every run is tagged `synthetic=true`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count, product
from pathlib import Path
from typing import Any

import numpy as np

from experiments.config.compose import load_config
from experiments.config.prices import tier_price_params
from experiments.plan import Trial
from experiments.results.layout import LATENCIES_FILE, TierFolder
from experiments.results.publish import Publisher, TierInfo
from experiments.results.records import Status, TrialRecord, write_record
from experiments.run.trial import new_record
from serving.node import NodeInfo
from tests.synthetic_sweep import _metrics

TAGS = {"synthetic": "true"}
PRICE = 0.36  # $/h of every synthetic tier: $ per 1k images = 0.1 / throughput
STACKS = list(product(("triton_onnx", "pytorch", "fastapi", "torchserve"), ("http", "grpc"), (1, 8)))
NODE = NodeInfo("synthetic-host", "127.0.0.1", "node", "synthetic CPU", 2)


@dataclass
class Logged:
    """What one tier's logging took: seconds per trial (Publisher.trial), and the publisher's own verdict."""

    tier: str
    trial_s: list[float] = field(default_factory=list)
    offline_reason: str | None = None


def records(cfg: Any, tier: str, trials: int, seed: int = 0) -> Iterator[TrialRecord]:
    """`trials` ok records of `tier`: every stack at concurrency 1, 2, 3, ... (distinct keys), round figures."""
    rng = np.random.default_rng(seed)
    loads = count(1)
    made = 0
    while True:
        concurrency = next(loads)
        for backend, protocol, batch in STACKS:
            if made == trials:
                return
            trial = Trial(tier, cfg.model.name, backend, backend, protocol, "tensor", batch, concurrency)
            record = new_record(cfg, trial, NODE)
            record.tags.update(TAGS)
            p50 = float(rng.uniform(5, 50)) * batch
            record.metrics = {**_metrics(p50, 2 * p50, 1000.0 * batch * concurrency / p50, PRICE, batch),
                              "stable": 1.0, "request_count": 200.0, "completed_requests": 200.0}
            record.finished_at = record.started_at + 1.0
            made += 1
            yield record


def write_latencies(trial_dir: Path, requests: int, rng: np.random.Generator) -> None:
    """A latencies.csv of `requests` rows, in the columns a measured trial writes."""
    sent = time.time() + np.cumsum(rng.uniform(0.001, 0.02, requests))
    latency_ms = rng.uniform(5, 50, requests)
    rows = [f"{s:.6f},{s:.6f},{ms:.4f},{ms:.4f},,,0" for s, ms in zip(sent, latency_ms, strict=True)]
    (trial_dir / LATENCIES_FILE).write_text("intended_epoch_s,send_epoch_s,latency_ms,send_latency_ms,server_ms,"
                                            "server_batch,client_actor\n" + "\n".join(rows) + "\n")


def synthetic_config(sweep_id: str) -> Any:
    return load_config([f"sweep_id={sweep_id}", "gpu=local", f"gpu.price_per_hour_usd={PRICE}"])


def synthetic_tier(cfg: Any, tier: str, results_dir: Path,
                   experiment: str = "tierbench") -> tuple[TierFolder, TierInfo]:
    """A tier's run folder and its TierInfo (saved), as the driver makes them; the tier is `local`'s config renamed."""
    sweep_id = str(cfg.sweep_id)
    folder = TierFolder.of(results_dir, sweep_id, tier)
    info = TierInfo(sweep_id, tier, experiment, tags={"sweep_id": sweep_id, "gpu_tier": tier, "emulated": "false",
                                                      **TAGS},
                    params={"gpu_tier": tier, "gpu_display_name": f"synthetic {tier}", "gpu_name": "synthetic",
                            "price_per_hour_usd": PRICE, "price_source": "synthetic", "price_seen": "2026-01-01",
                            "model": cfg.model.name, "experiment": "synthetic", **tier_price_params(cfg.gpu)},
                    config_yaml="synthetic: true\n")
    info.save(folder)
    return folder, info


def log_sweep(uri: str, sweep_id: str, tiers: list[str], trials_per_tier: int, results_dir: Path,
              requests_per_trial: int = 500, experiment: str = "tierbench") -> list[Logged]:
    """Write and publish a synthetic sweep, tier after tier, as the driver does: each trial's folder written, then
    `Publisher.trial` (timed). The tiers are the `local` tier's config under other names."""
    cfg = synthetic_config(sweep_id)
    rng = np.random.default_rng(1)
    logged = []
    for tier in tiers:
        folder, info = synthetic_tier(cfg, tier, results_dir, experiment)
        publisher = Publisher(uri, info, folder)
        done = Logged(tier)
        if publisher.open():
            for record in records(cfg, tier, trials_per_tier, seed=len(logged)):
                trial_dir = write_record(record, folder.trial(record.slug))
                write_latencies(trial_dir, requests_per_trial, rng)
                started = time.perf_counter()
                publisher.trial(record, trial_dir)
                done.trial_s.append(time.perf_counter() - started)
            publisher.finish(Status.OK)
        done.offline_reason = publisher.offline_reason
        logged.append(done)
    return logged

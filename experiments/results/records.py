"""Trial records: what a trial measured, written to the sweep's run folder before anything else sees it.

The folder is the source of truth (`experiments.results.layout`): `record.json` with params, metrics and tags,
`latencies.csv` with every measured request. MLflow gets a copy of both. A trial measured several times
(`experiment.repeats`) pools its repeats' figures, and each repeat's record and samples go in a folder of their own.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from experiments.measure.samples import WindowSamples
from experiments.plan import Trial
from experiments.results.layout import LATENCIES_FILE, RECORD_FILE, REPEATS_DIR


class Status(StrEnum):
    """What became of a trial (the `status` tag): measured, attempted and failed (`reason` says why), or not
    runnable where it was planned (`reason` says why; never faked)."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


SERIES_PREFIX = "series_"  # the MLflow step metrics of a trial's series: series_offered_rps, series_latency_p99_ms...


@dataclass
class TrialRecord:
    trial: Trial
    key: str
    status: str
    reason: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    run_name: str | None = None  # defaults to the trial's name (SLO summaries name themselves)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. an SLO search's probes
    # The trial over time, bin by bin (experiments.measure.metrics.time_series): MLflow step metrics `series_<name>`
    series: list[dict[str, float]] = field(default_factory=list)
    samples: WindowSamples | None = None
    # A trial measured several times: every measurement of it (each repeat, and a repeat's attempts that failed and
    # were measured again), in order; this record pools them.
    repeats: list[TrialRecord] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.run_name or self.trial.name

    @property
    def slug(self) -> str:
        return self.name.replace("/", "_")

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("samples", "repeats")}
        data["trial"] = asdict(self.trial)
        data["name"] = self.name
        if self.samples is not None:
            data["window"] = {"start": self.samples.window_start, "end": self.samples.window_end,
                              "images_per_request": self.samples.images_per_request}
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> TrialRecord:
        values = {k: v for k, v in data.items() if k not in ("name", "window")}
        values["trial"] = Trial(**data["trial"])
        return TrialRecord(**values)


REASON_CHARS = 2000
REASON_HEAD_CHARS = 600


def root_cause(exc: BaseException) -> BaseException:
    """The error a Ray task or actor method raised, unwrapped: Ray's wrapper repeats it after its own traceback."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def error_reason(exc: BaseException) -> str:
    """An error as a record's `reason`: its message (its type when it has none), at most 2,000 characters. A longer
    one keeps its start and its end, where a server's log tail says why it stopped."""
    cause = root_cause(exc)
    text = str(cause).strip() or type(cause).__name__
    if len(text) <= REASON_CHARS:
        return text
    gap = "\n…\n"
    return text[:REASON_HEAD_CHARS] + gap + text[-(REASON_CHARS - REASON_HEAD_CHARS - len(gap)):]


def write_record(record: TrialRecord, trial_dir: Path) -> Path:
    """Write record.json (atomically) and latencies.csv, and each repeat's in `repeats/<repeat>/` (replacing those of
    an earlier record of the trial); returns the folder."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(trial_dir / REPEATS_DIR, ignore_errors=True)
    for repeat in record.repeats:
        write_record(repeat, trial_dir / REPEATS_DIR / repeat.name.rsplit("/", 1)[-1])
    if record.samples is None:  # nothing of an earlier record of the trial stays beside this one
        (trial_dir / LATENCIES_FILE).unlink(missing_ok=True)
    else:
        with open(trial_dir / LATENCIES_FILE, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["intended_epoch_s", "send_epoch_s", "latency_ms", "send_latency_ms", "server_ms",
                             "server_batch", "client_actor", "server_queue_ms"])
            s = record.samples
            unsaid = np.full(s.requests, np.nan)
            batches = s.server_batch if s.server_batch is not None else unsaid
            waits = s.server_queue_ms if s.server_queue_ms is not None else unsaid
            for row in zip(s.intended_s, s.send_s, s.latency_s, s.send_latency_s, s.server_ms, batches, s.actor,
                           waits, strict=True):
                intended, sent, latency, send_latency, server_ms, batch, actor, waited = row
                writer.writerow([f"{intended:.6f}", f"{sent:.6f}", f"{latency * 1e3:.4f}",
                                 f"{send_latency * 1e3:.4f}", "" if server_ms != server_ms else f"{server_ms:.4f}",
                                 "" if batch != batch else int(batch), int(actor),
                                 "" if waited != waited else f"{waited:.4f}"])
    tmp = trial_dir / (RECORD_FILE + ".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=2, sort_keys=True, default=str))
    tmp.replace(trial_dir / RECORD_FILE)
    return trial_dir


def read_record(trial_dir: Path) -> TrialRecord:
    return TrialRecord.from_json(json.loads((trial_dir / RECORD_FILE).read_text()))

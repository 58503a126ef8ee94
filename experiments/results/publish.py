"""Publish a tier's run folder to MLflow: live during the sweep, trial by trial, and later by
`python -m runners.relog` from the same files, so both produce the same runs.

The folder (`experiments.results.layout`) is written first and is the source of truth. When the tracking store
is unreachable the publisher goes offline and the sweep carries on; at the end of a later trial (at most every
`RECONNECT_EVERY_S`) and at the end of the sweep it asks the store again, and once the store answers it logs what the
folder has and the store lacks, as relog would, and goes on online.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from experiments.measure.ceiling import read_ceiling
from experiments.measure.token_efficiency import read_token_ceiling
from experiments.results.layout import NODE_TIME_FILE, TIER_ARTIFACTS, TierFolder, server_artifact
from experiments.results.node_time import node_time_metrics
from experiments.results.records import Status, TrialRecord, read_record
from experiments.results.redaction import redact

log = logging.getLogger(__name__)
RECONNECT_EVERY_S = 30.0  # offline: how often, at most, a trial's end asks the store again


class CaughtUp(NamedTuple):
    """What a catch-up found in the folder: trials logged now, trials the store already had, and whether any failed."""

    logged: int
    present: int
    any_failed: bool


@dataclass
class TierInfo:
    sweep_id: str
    tier: str
    experiment: str
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    config_yaml: str = ""

    def save(self, folder: TierFolder) -> None:
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.tier_file.write_text(json.dumps(asdict(self), indent=2, sort_keys=True, default=str))

    @staticmethod
    def load(folder: TierFolder) -> TierInfo:
        return TierInfo(**json.loads(folder.tier_file.read_text()))


def relog_command(folder: TierFolder) -> str:
    return f"python -m runners.relog {folder.path.resolve()}"


def probe_store(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast on an HTTP tracking server that does not answer (MLflow's client would retry for minutes)."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    netloc = parsed.hostname or ""
    if parsed.port:
        netloc = f"{netloc}:{parsed.port}"
    health = urllib.parse.urlunparse((parsed.scheme, netloc, parsed.path.rstrip("/") + "/health", "", "", ""))
    with urllib.request.urlopen(health, timeout=timeout_s):
        pass


class Publisher:
    """Logs a tier folder to MLflow; on a store error it goes offline, and catches up once the store answers again."""

    def __init__(self, uri: str, info: TierInfo, folder: TierFolder) -> None:
        self.uri = uri
        self.info = info
        self.folder = folder
        self.tracker = None
        self.offline_reason: str | None = None
        self.sweep_run: str | None = None
        self.tier_run: str | None = None
        self.next_reconnect = 0.0  # monotonic time before which an offline publisher does not ask again
        self.outage_said = False  # the warning is said once per outage, not at every failed reconnect

    @property
    def online(self) -> bool:
        return self.tracker is not None and self.offline_reason is None

    def _go_offline(self, exc: BaseException) -> None:
        if self.offline_reason is None:
            self.offline_reason = redact(f"{type(exc).__name__}: {exc}")[:500]
            self.next_reconnect = time.monotonic() + RECONNECT_EVERY_S
            if not self.outage_said:
                self.outage_said = True
                log.warning("MLflow store %s unreachable (%s): results stay in %s; the sweep logs them when the store "
                            "answers again (asked at a trial's end, every %.0f s at most, and at the sweep's end), or "
                            "later with: %s", redact(self.uri), self.offline_reason, self.folder.path.resolve(),
                            RECONNECT_EVERY_S, relog_command(self.folder))

    def open(self) -> bool:
        """Connect and get-or-create the sweep and tier runs; False (offline) when the store fails."""
        from experiments.results.tracking import Tracker

        self.offline_reason = None  # a new attempt: a failure records its own reason
        try:
            probe_store(self.uri)
            self.tracker = Tracker(self.uri, self.info.experiment)
            self.sweep_run = self.tracker.sweep_run(self.info.sweep_id, {"emulated": self.info.tags.get("emulated",
                                                                                                       "false")})
            self.tier_run = self.tracker.tier_run(self.info.sweep_id, self.info.tier, self.sweep_run,
                                                  self.info.params, self.info.tags)
        except Exception as exc:  # noqa: BLE001 - any store failure: keep measuring, relog later
            self._go_offline(exc)
        return self.online

    def reconnect(self, now: bool = False) -> bool:
        """Offline: ask the store again (at most every RECONNECT_EVERY_S unless `now`); when it answers, log what the
        folder has and the store lacks, and go on online. True when online."""
        if self.online:
            return True
        if not now and time.monotonic() < self.next_reconnect:
            return False
        if not self.open():  # still away: open() went offline again, asking again RECONNECT_EVERY_S from now
            return False
        try:
            caught_up = self.catch_up()
        except Exception as exc:  # noqa: BLE001 - gone again while catching up: the next reconnect goes on
            self._go_offline(exc)
            return False
        if self.online:
            self.outage_said = False
            log.info("MLflow store %s answers again: %d trial run(s) measured meanwhile logged from %s",
                     redact(self.uri), caught_up.logged, self.folder.path.resolve())
        return self.online

    def catch_up(self) -> CaughtUp:
        """Log what the folder has and the store lacks: the tier's files, and each trial not there yet (a trial run the
        store cut off mid-logging, still RUNNING, is deleted and logged anew)."""
        existing = set()
        for run in self.tracker.trial_runs(self.info.sweep_id, self.info.tier):
            if run.info.status == "RUNNING":  # never ended: the store went while the run was logged
                self.tracker.discard(run.info.run_id)
                continue
            existing.add((run.data.tags.get("trial_key"), run.info.start_time))
        for name in TIER_ARTIFACTS:
            if (self.folder.path / name).exists():
                self.tier_file(name, (self.folder.path / name).read_text())
        for name, text in self.folder.deploy_files().items():
            self.tier_file(name, text)
        for variant_dir in sorted(self.folder.servers.glob("*")):
            for path in sorted(variant_dir.glob("*")):
                self.server_file(variant_dir.name, path.name, path.read_text(errors="replace"))
        logged = present = 0
        records = sorted(((read_record(d), d) for d in self.folder.trials()), key=lambda pair: pair[0].started_at)
        for record, trial_dir in records:
            if (record.key, int(record.started_at * 1000)) in existing:
                present += 1
                continue
            self._log_trial(record, trial_dir)
            logged += 1
        return CaughtUp(logged, present, any(record.status == Status.FAILED for record, _ in records))

    def _safely(self, what: str, method: str, *args: Any) -> Any:
        """Call `self.tracker.<method>(*args)` while online; the first failure turns the publisher offline."""
        if not self.online:
            return None
        try:
            return getattr(self.tracker, method)(*args)
        except Exception as exc:  # noqa: BLE001
            log.debug("MLflow %s failed", what, exc_info=True)
            self._go_offline(exc)
            return None

    def ok_keys(self) -> set[str]:
        """Keys of trials of this tier already `ok` in the store (for resume)."""
        found = self._safely("search", "trial_runs", self.info.sweep_id, self.info.tier)
        return {r.data.tags.get("trial_key") for r in found or [] if r.data.tags.get("status") == Status.OK}

    def tier_file(self, name: str, text: str) -> None:
        self._safely("artifact", "log_artifact_text", self.tier_run, text, name)

    def server_file(self, variant: str, name: str, text: str) -> None:
        self._safely("artifact", "log_artifact_text", self.tier_run, text, server_artifact(variant, name))

    def trial(self, record: TrialRecord, trial_dir: Path) -> None:
        """Log a trial already written to the folder; offline, a store that answers again logs it in its catch-up."""
        if not self.online:
            self.reconnect()
            return
        self._log_trial(record, trial_dir)

    def _log_trial(self, record: TrialRecord, trial_dir: Path) -> None:
        self._safely("log_trial", "log_trial", self.tier_run, record, trial_dir, self.info.tags, self.info.config_yaml)

    def finish(self, status: str, catch_up: bool = True) -> None:
        """Catch up if offline (with `catch_up`); log the node time the tier's runs took (`results.node_time`) and the
        ceiling's figures (`measure.ceiling`), then close the tier and sweep runs."""
        if catch_up:
            self.reconnect(now=True)
        metrics = node_time_metrics(self.folder)
        if metrics:
            self._safely("metrics", "log_metrics", self.tier_run, metrics)
            self.tier_file(NODE_TIME_FILE, self.folder.node_time_file.read_text())
        ceiling = read_ceiling(self.folder.ceiling_file)
        if ceiling is not None and ceiling.timings:
            self._safely("metrics", "log_metrics", self.tier_run, ceiling.tier_metrics())
        tokens = read_token_ceiling(self.folder.ceiling_file)
        if tokens is not None and tokens.points:
            self._safely("metrics", "log_metrics", self.tier_run, tokens.tier_metrics())
        self._safely("finish", "finish", self.tier_run, status)
        self._safely("finish", "finish_shared", self.sweep_run, status)


def publish_folder(uri: str, tier_folder: TierFolder) -> tuple[int, int]:
    """Log a tier folder written by a sweep (for `runners.relog`); returns (logged, already there)."""
    info = TierInfo.load(tier_folder)
    publisher = Publisher(uri, info, tier_folder)
    if not publisher.open():
        raise ConnectionError(f"MLflow store {redact(uri)} unreachable: {publisher.offline_reason}")
    caught_up = publisher.catch_up()
    publisher.finish(Status.FAILED if caught_up.any_failed else Status.OK, catch_up=False)  # caught up, or raised
    if not publisher.online:
        raise ConnectionError(f"MLflow store {redact(uri)} failed while logging: {publisher.offline_reason}")
    return caught_up.logged, caught_up.present

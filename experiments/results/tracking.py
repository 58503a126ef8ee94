"""MLflow, written by the driver only: sweep run -> tier run -> trial runs (-> repeat runs, `experiment.repeats`), all
tagged with `sweep_id`.

Uses `MlflowClient` with explicit parent ids (the `mlflow.parentRunId` tag) rather than the fluent API's
process-global active run, so several tier jobs can write into one sweep.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from experiments.results.layout import LATENCIES_FILE, RECORD_FILE, SERVER_LOGS_DIR, repeat_dirs
from experiments.results.records import SERIES_PREFIX, Status, TrialRecord, read_record

log = logging.getLogger(__name__)

DEFAULT_STORE_DIR = Path("mlflow")
PARENT_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
# MLflow prints each ended run's URL on an HTTP store, built from the tracking URI with its password, and reads the
# run once more to do so: neither is wanted (a secret in the sweep's output, a request per trial).
QUIET_URLS = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
# MLflow's client retries a failed request 7 times with backoff by default: about 4 minutes in which a sweep whose
# tracking server went away measures nothing. 3 (about 15 s) is enough for a blip; a longer outage is the publisher's
# to bridge (it catches up once the server answers again, experiments/results/publish.py). The user's setting wins.
RETRIES, SWEEP_RETRIES = "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3"


def tracking_uri(configured: str | None) -> str:
    """`mlflow.tracking_uri` when set, else $MLFLOW_TRACKING_URI, else SQLite under ./mlflow/."""
    if configured:
        return configured
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(DEFAULT_STORE_DIR / 'mlflow.db').resolve()}"


def import_client(uri: str) -> None:
    """Import MLflow's client and the store `uri` needs, creating nothing: seconds of imports a sweep does while its
    node describes itself instead of after (a server's URI needs no SQL store)."""
    import mlflow.tracking  # noqa: F401

    if not uri.startswith(("http://", "https://")):
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


def default_artifact_location(uri: str) -> str | None:
    """Artifacts next to a SQLite store (else MLflow would write ./mlruns wherever the sweep runs); tracking
    servers decide their own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri()
    return None


class Tracker:
    def __init__(self, uri: str, experiment: str) -> None:
        from mlflow.tracking import MlflowClient

        if uri.startswith("sqlite:///"):
            Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault(QUIET_URLS, "true")
        os.environ.setdefault(RETRIES, SWEEP_RETRIES)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        existing = self.client.get_experiment_by_name(experiment)
        if existing is not None:
            self.experiment_id = existing.experiment_id
        else:
            self.experiment_id = self._create_experiment(experiment)

    def _create_experiment(self, name: str) -> str:
        try:
            return self.client.create_experiment(name, artifact_location=default_artifact_location(self.uri))
        except Exception:  # noqa: BLE001 - created concurrently by another tier's job
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _find_runs(self, tags: dict[str, str]) -> list[Any]:
        query = " and ".join(f"tags.{k} = '{v}'" for k, v in tags.items())
        return self.client.search_runs([self.experiment_id], filter_string=query, max_results=100,
                                       order_by=["attributes.start_time ASC"])

    def _get_or_create(self, identity: dict[str, str], name: str, parent: str | None,
                       extra_tags: dict[str, str]) -> str:
        """One run per identity. Jobs racing to create it all settle on the earliest and drop their own."""
        found = self._find_runs(identity)
        if found:
            return found[0].info.run_id
        tags = {**identity, **extra_tags, RUN_NAME_TAG: name}
        if parent:
            tags[PARENT_TAG] = parent
        mine = self.client.create_run(self.experiment_id, tags=tags, run_name=name).info.run_id
        runs = self._find_runs(identity)
        winner = min(runs, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
        if winner != mine:
            self.client.delete_run(mine)
        return winner

    def sweep_run(self, sweep_id: str, tags: dict[str, str]) -> str:
        return self._get_or_create({"sweep_id": sweep_id, "run_level": "sweep"}, f"sweep {sweep_id}", None, tags)

    def tier_run(self, sweep_id: str, tier: str, parent: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        run_id = self._get_or_create({"sweep_id": sweep_id, "run_level": "tier", "gpu_tier": tier}, tier, parent,
                                     tags)
        # A resumed sweep reuses the tier run: params are immutable in MLflow, so only add missing ones.
        present = self.client.get_run(run_id).data.params
        self._log(run_id, params={k: v for k, v in params.items() if k not in present})
        return run_id

    def trial_runs(self, sweep_id: str, tier: str) -> list[Any]:
        """Every trial run of one tier of a sweep."""
        query = f"tags.sweep_id = '{sweep_id}' and tags.gpu_tier = '{tier}' and tags.run_level = 'trial'"
        runs, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1000,
                                           page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def discard(self, run_id: str) -> None:
        """Delete a run and the runs nested under it (MLflow's soft delete: searches no longer find them)."""
        for child in self.client.search_runs([self.experiment_id], f"tags.`{PARENT_TAG}` = '{run_id}'",
                                             max_results=1000):
            self.discard(child.info.run_id)
        self.client.delete_run(run_id)

    def log_trial(self, parent: str, record: TrialRecord, trial_dir: Path, tags: dict[str, str],
                  config_yaml: str) -> str:
        """One run per trial, nested under the tier run, with the raw samples and resolved config attached; a trial
        measured several times gets one run per repeat (its folders under `repeats/`) nested under its own."""
        run_id = self._log_run(parent, record, trial_dir, tags, config_yaml)
        repeats = sorted(((read_record(d), d) for d in repeat_dirs(trial_dir)), key=lambda pair: pair[0].started_at)
        for repeat, repeat_dir in repeats:
            self._end(self._log_run(run_id, repeat, repeat_dir, tags), repeat)
        self._supersede(record, run_id, tags.get("sweep_id", ""))
        # Ended last: a trial run still RUNNING was cut off (the store went) and `runners.relog` logs it anew.
        self._end(run_id, record)
        return run_id

    def _log_run(self, parent: str, record: TrialRecord, trial_dir: Path, tags: dict[str, str],
                 config_yaml: str | None = None) -> str:
        run_tags = {**tags, "run_level": "trial", "status": record.status, "trial_key": record.key,
                    RUN_NAME_TAG: record.name, PARENT_TAG: parent, **record.tags}
        if record.reason:
            run_tags["reason"] = record.reason[:5000]
        run = self.client.create_run(self.experiment_id, start_time=int(record.started_at * 1000), tags=run_tags,
                                     run_name=record.name)
        run_id = run.info.run_id
        self._log(run_id, params=record.params, metrics=record.metrics,
                  timestamp=int((record.finished_at or time.time()) * 1000))
        self._log_series(run_id, record)
        for name in (RECORD_FILE, LATENCIES_FILE):
            if (trial_dir / name).exists():
                self.client.log_artifact(run_id, str(trial_dir / name))
        if (trial_dir / SERVER_LOGS_DIR).is_dir():
            self.client.log_artifacts(run_id, str(trial_dir / SERVER_LOGS_DIR), SERVER_LOGS_DIR)
        if config_yaml is not None:
            self.client.log_text(run_id, config_yaml, "config.yaml")
        return run_id

    def _end(self, run_id: str, record: TrialRecord) -> None:
        end = int((record.finished_at or time.time()) * 1000)
        self.client.set_terminated(run_id, "FAILED" if record.status == Status.FAILED else "FINISHED", end_time=end)

    def _supersede(self, record: TrialRecord, run_id: str, sweep_id: str) -> None:
        """A resumed sweep re-runs failed trials: mark their earlier runs so reports take the latest."""
        earlier = self._find_runs({"sweep_id": sweep_id, "run_level": "trial", "trial_key": record.key})
        for run in earlier:
            if run.info.run_id != run_id and "superseded_by" not in run.data.tags:
                self.client.set_tag(run.info.run_id, "superseded_by", run_id)

    def _log(self, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
             timestamp: int | None = None) -> None:
        from mlflow.entities import Metric, Param

        timestamp = timestamp or int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), timestamp, 0) for k, v in (metrics or {}).items()],
            params=[Param(k, str(v)[:6000]) for k, v in (params or {}).items()],
        )

    def _log_series(self, run_id: str, record: TrialRecord) -> None:
        """The trial over time as step metrics: `series_<name>` at step = the bin's index, timestamped at the trial
        record's start plus the bin's offset, so MLflow's charts draw it against steps or time (in order and evenly
        spaced; the warm-up before the first bin is not in the offsets)."""
        from mlflow.entities import Metric

        metrics = [Metric(f"{SERIES_PREFIX}{name}", float(value), int((record.started_at + point["t_s"]) * 1000), step)
                   for step, point in enumerate(record.series) for name, value in point.items()]
        for at in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(run_id, metrics=metrics[at:at + 1000])

    def log_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        self._log(run_id, metrics=metrics)

    def log_artifact_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def finish_shared(self, run_id: str, status: str) -> None:
        """Finish a run other jobs also finish (the sweep run of parallel tiers): a failure is never undone."""
        if self.client.get_run(run_id).data.tags.get("status") == Status.FAILED:
            status = Status.FAILED
        self.finish(run_id, status)

    def finish(self, run_id: str, status: str, tags: dict[str, str] | None = None) -> None:
        for key, value in (tags or {}).items():
            self.client.set_tag(run_id, key, value)
        self.client.set_tag(run_id, "status", status)
        self.client.set_terminated(run_id, "FINISHED" if status == Status.OK else "FAILED")

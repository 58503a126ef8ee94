"""A trial measured several times (`experiment.repeats`): its repeats as they come, then the one record that pools them.

Each repeat is measured as a trial is, retried as a trial is (`experiment.trial_retries`), and kept as a record of
its own (`run_level=repeat`, tag `repeat`), written under the trial's folder and logged as an MLflow run nested under
the trial's run. The trial's record holds the pooled figures and their 95 % intervals (`experiments.measure.pooled`);
it fails when a repeat failed, after its retries, and says which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from experiments.measure.pooled import pooled_metrics
from experiments.plan import Trial
from experiments.results.records import Status, TrialRecord
from experiments.run.trial import new_record, priced_usd_per_hour
from serving.backend import ServerHandle
from serving.node import NodeInfo
from serving.workloads.registry import workload as workload_named

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

# Tags a caveat of one repeat sets on the whole trial (its figures pool that repeat's).
CAVEATS = {"stable": "false", "overloaded": "true", "client_bound": "true", "client_behind": "true",
           "server_count_mismatch": "true"}


class Repeats:
    """One trial's measurements, in order: each repeat's final attempt and the attempts that were measured again."""

    def __init__(self, trial: Trial, planned: int) -> None:
        self.trial = trial
        self.planned = planned
        self.records: list[TrialRecord] = []
        self.server_logs: dict[str, str] = {}  # of failed attempts, each name prefixed with its repeat's

    def collector(self, number: int) -> Callable[[TrialRecord, dict[str, str]], None]:
        """Where repeat `number`'s attempts finish (instead of the sweep: a repeat is no trial of its own)."""

        def finish(record: TrialRecord, server_logs: dict[str, str]) -> None:
            attempt = record.tags.get("attempt", "1")
            name = f"repeat-{number}" + (f"-attempt-{attempt}" if "retried" in record.tags or attempt != "1" else "")
            record.run_name = f"{record.name}/{name}"
            record.tags.update(run_level="repeat", repeat=str(number))
            self.records.append(record)
            self.server_logs.update({f"{name}.{log}": text for log, text in server_logs.items()})

        return finish

    def pooled(self, cfg: TierbenchConfig, node: NodeInfo, handle: ServerHandle | None) -> TrialRecord:
        """The trial's record: the repeats' figures pooled when every repeat was measured, else failed with the
        failing repeat's reason. Its params are the last repeat's (what measured it); every repeat is attached."""
        verdicts = [r for r in self.records if "retried" not in r.tags]
        ok = [r for r in verdicts if r.status == Status.OK]
        record = new_record(cfg, self.trial, node, handle)
        record.repeats = self.records
        if self.records:
            record.started_at = self.records[0].started_at
            record.params.update(self.records[-1].params)
        if len(ok) < self.planned:
            failed = verdicts[-1] if verdicts else None
            record.status = Status.FAILED
            record.reason = (f"repeat {len(verdicts)} of {self.planned}: {failed.reason}" if failed is not None
                             else f"no repeat of {self.planned} was measured")
            return record
        record.metrics = pooled_metrics([(r.samples, r.metrics) for r in ok], priced_usd_per_hour(cfg, record.params),
                                        workload_named(cfg.experiment.workload))
        for repeat in ok:
            record.tags.update({k: v for k, v in repeat.tags.items() if k not in ("run_level", "repeat", "attempt",
                                                                                   "earlier_failure")})
        for tag, caveat in CAVEATS.items():
            if any(r.tags.get(tag) == caveat for r in ok):
                record.tags[tag] = caveat
        return record

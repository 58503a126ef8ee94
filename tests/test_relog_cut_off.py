"""A trial whose logging the store cut off (a run left RUNNING) is logged anew by `runners.relog`, once: nothing
lost, nothing twice. SYNTHETIC trials (tests/synthetic_trials.py) through the driver's own Publisher, no servers."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from experiments.results.layout import TierFolder
from experiments.results.publish import publish_folder
from experiments.results.tracking import Tracker
from tests import helpers
from tests.synthetic_trials import log_sweep

SWEEP, TIER = "cut-off", "a100"


def test_a_run_the_store_cut_off_is_replaced_by_relog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = helpers.premigrated_store(tmp_path)
    ended = Tracker._end
    calls = []

    def store_goes_at_the_second_end(self: Tracker, run_id: str, record: object) -> None:
        calls.append(run_id)
        if len(calls) == 2:
            raise ConnectionError("the tracking server went away")
        ended(self, run_id, record)

    monkeypatch.setattr(Tracker, "_end", store_goes_at_the_second_end)
    (logged,) = log_sweep(uri, SWEEP, [TIER], 3, tmp_path / "runs", requests_per_trial=20)
    assert logged.offline_reason, "the publisher went offline when the store failed"
    cut_off = calls[1]
    assert MlflowClient(uri).get_run(cut_off).info.status == "RUNNING", "the second trial's run was left half-logged"
    monkeypatch.setattr(Tracker, "_end", ended)

    assert publish_folder(uri, TierFolder.of(tmp_path / "runs", SWEEP, TIER)) == (2, 1)
    trials = helpers.runs(uri, "trial", SWEEP)
    assert len(trials) == 3 and len({r.data.tags["trial_key"] for r in trials}) == 3, "each trial once"
    assert all(r.info.status == "FINISHED" and r.data.metrics for r in trials)
    assert cut_off not in {r.info.run_id for r in trials}
    client = MlflowClient(uri)
    deleted = client.search_runs([client.get_experiment_by_name("tierbench").experiment_id],
                                 run_view_type=ViewType.DELETED_ONLY)
    assert [r.info.run_id for r in deleted] == [cut_off]
    assert publish_folder(uri, TierFolder.of(tmp_path / "runs", SWEEP, TIER)) == (0, 3), "a second relog adds nothing"

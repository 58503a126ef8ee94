"""A trial whose logging the store cut off (a run left RUNNING) is logged anew, once: by `runners.relog` when the store
stayed away, by the sweep's own publisher when the store answers again before the sweep ends. Nothing lost, nothing
twice. SYNTHETIC trials (tests/synthetic_trials.py) through the driver's own Publisher, no servers."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from experiments.results import publish
from experiments.results.layout import TierFolder
from experiments.results.publish import Publisher, publish_folder
from experiments.results.tracking import Tracker
from tests import helpers
from tests.synthetic_trials import log_sweep

SWEEP, TIER = "cut-off", "a100"


def store_goes_at_the_second_end(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store fails once, while the second trial's run is ended; the ids of the runs ended (or tried)."""
    ended = Tracker._end
    calls = []

    def end(self: Tracker, run_id: str, record: object) -> None:
        calls.append(run_id)
        if len(calls) == 2:
            raise ConnectionError("the tracking server went away")
        ended(self, run_id, record)

    monkeypatch.setattr(Tracker, "_end", end)
    return calls


def deleted_runs(uri: str) -> list[str]:
    client = MlflowClient(uri)
    return [r.info.run_id for r in client.search_runs([client.get_experiment_by_name("tierbench").experiment_id],
                                                      run_view_type=ViewType.DELETED_ONLY)]


def test_a_run_the_store_cut_off_is_replaced_by_relog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = helpers.premigrated_store(tmp_path)
    calls = store_goes_at_the_second_end(monkeypatch)
    # The store stays away for the rest of the sweep: its publisher never finds it answering again.
    monkeypatch.setattr(Publisher, "reconnect", lambda self, now=False: self.online)
    (logged,) = log_sweep(uri, SWEEP, [TIER], 3, tmp_path / "runs", requests_per_trial=20)
    assert logged.offline_reason, "the publisher went offline when the store failed"
    cut_off = calls[1]
    assert MlflowClient(uri).get_run(cut_off).info.status == "RUNNING", "the second trial's run was left half-logged"

    assert publish_folder(uri, TierFolder.of(tmp_path / "runs", SWEEP, TIER)) == (2, 1)
    trials = helpers.runs(uri, "trial", SWEEP)
    assert len(trials) == 3 and len({r.data.tags["trial_key"] for r in trials}) == 3, "each trial once"
    assert all(r.info.status == "FINISHED" and r.data.metrics for r in trials)
    assert cut_off not in {r.info.run_id for r in trials}
    assert deleted_runs(uri) == [cut_off]
    assert publish_folder(uri, TierFolder.of(tmp_path / "runs", SWEEP, TIER)) == (0, 3), "a second relog adds nothing"


def test_the_sweep_logs_what_it_missed_once_the_store_answers_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    uri = helpers.premigrated_store(tmp_path)
    calls = store_goes_at_the_second_end(monkeypatch)
    monkeypatch.setattr(publish, "RECONNECT_EVERY_S", 0.0)  # ask again at the very next trial's end
    with caplog.at_level("INFO", logger=publish.__name__):
        (logged,) = log_sweep(uri, SWEEP, [TIER], 3, tmp_path / "runs", requests_per_trial=20)
    assert logged.offline_reason is None, "online again by the sweep's end"
    said = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in said) == 1
    assert any("answers again: 2 trial run(s) measured meanwhile logged" in m for m in said), said
    trials = helpers.runs(uri, "trial", SWEEP)
    assert len(trials) == 3 and len({r.data.tags["trial_key"] for r in trials}) == 3, "each trial once"
    assert all(r.info.status == "FINISHED" and r.data.metrics for r in trials)
    assert deleted_runs(uri) == [calls[1]], "the run the store cut off was replaced"
    (tier,) = helpers.runs(uri, "tier", SWEEP)
    assert tier.info.status == "FINISHED"
    assert publish_folder(uri, TierFolder.of(tmp_path / "runs", SWEEP, TIER)) == (0, 3), "relog finds nothing missing"


def test_an_offline_publisher_asks_the_store_again_at_most_every_interval(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def still_away(uri: str) -> None:
        asked.append(uri)
        raise ConnectionError("still away")

    monkeypatch.setattr(publish, "probe_store", still_away)
    publisher = Publisher("http://127.0.0.1:9/", publish.TierInfo("s", TIER, "tierbench"),
                          TierFolder.of(tmp_path, "s", TIER))
    assert not publisher.open() and asked == ["http://127.0.0.1:9/"]
    for _ in range(5):
        assert not publisher.reconnect()
    assert len(asked) == 1, "within RECONNECT_EVERY_S of going offline nothing is asked"
    assert not publisher.reconnect(now=True) and len(asked) == 2, "the sweep's end asks at once"

"""A trial measured several times (`experiment.repeats`): the server group measures each repeat, retried as a trial
is, and finishes the trial once with its repeats pooled (fast: the measurement and the server are stand-ins); the
run folder and MLflow keep every repeat, nested under its trial's run; and a real sweep on the local CPU tier (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from experiments.config.compose import load_config
from experiments.results.layout import LATENCIES_FILE, REPEATS_DIR
from experiments.results.records import Status, write_record
from experiments.results.tracking import Tracker
from experiments.run.sweep import run_sweep
from tests.helpers import TINY_SWEEP, premigrated_store, runs, store_overrides
from tests.stand_in_group import UNHEALTHY
from tests.stand_in_group import run_stand_in_group as _group


def test_one_measurement_is_todays_trial(monkeypatch) -> None:
    sweep, calls = _group(monkeypatch, [])
    (record,) = sweep.records
    assert record.repeats == [] and "repeats" not in record.metrics and "repeats" not in record.params
    assert calls == {"start": 1, "measure": 1}


def test_repeats_finish_the_trial_once_with_its_repeats_pooled(monkeypatch) -> None:
    sweep, calls = _group(monkeypatch, ["experiment.repeats=3"])
    (record,) = sweep.records  # the sweep counts the trial once
    assert record.status == Status.OK and calls == {"start": 1, "measure": 3}, "the same server, three measurements"
    assert [r.tags["repeat"] for r in record.repeats] == ["1", "2", "3"]
    assert {r.tags["run_level"] for r in record.repeats} == {"repeat"}
    assert record.repeats[1].name == f"{record.name}/repeat-2" and {r.key for r in record.repeats} == {record.key}
    m = record.metrics
    assert m["repeats"] == 3 and m["throughput_img_s"] == pytest.approx(102.0, rel=1e-3)  # 101, 102, 103 img/s
    assert m["throughput_img_s_ci_low"] < m["throughput_img_s"] < m["throughput_img_s_ci_high"]
    assert m["latency_p99_ms_ci_low"] <= m["latency_p99_ms"] <= m["latency_p99_ms_ci_high"]
    assert record.params["repeats"] == 3 and record.params["repeat_fresh_server"] is False
    fresh, calls = _group(monkeypatch, ["experiment.repeats=3", "experiment.repeat_fresh_server=true"])
    assert calls["start"] == 3 and fresh.records[0].status == Status.OK, "a fresh server for each repeat"
    assert fresh.records[0].key != record.key, "how often a trial is measured is part of its identity"


def test_a_failed_repeat_is_retried_as_a_trial_is_and_the_attempt_kept(monkeypatch) -> None:
    sweep, calls = _group(monkeypatch, ["experiment.repeats=3"], failing={2})
    (record,) = sweep.records
    assert record.status == Status.OK and record.metrics["repeats"] == 3 and calls["start"] == 2
    names = [r.name.rsplit("/", 1)[-1] for r in record.repeats]
    assert names == ["repeat-1", "repeat-2-attempt-1", "repeat-2-attempt-2", "repeat-3"]
    failed = record.repeats[1]
    assert failed.status == Status.FAILED and failed.tags["retried"] == "true"
    assert record.repeats[2].tags["earlier_failure"] == UNHEALTHY
    assert sweep.logs[0] == {"repeat-2-attempt-1.server.log": "stub died"}, "the failed attempt's server log is kept"


def test_a_repeat_that_fails_after_its_retries_fails_the_trial_and_keeps_what_was_measured(monkeypatch) -> None:
    sweep, calls = _group(monkeypatch, ["experiment.repeats=3", "experiment.trial_retries=1"], failing={2, 3})
    (record,) = sweep.records
    assert record.status == Status.FAILED and record.reason == f"repeat 2 of 3: {UNHEALTHY}"
    assert calls["measure"] == 3 and [r.status for r in record.repeats] == [Status.OK, Status.FAILED, Status.FAILED]
    assert not record.metrics


def test_every_repeat_is_kept_in_the_run_folder_and_nested_under_its_trial_run(monkeypatch, tmp_path: Path) -> None:
    sweep, _ = _group(monkeypatch, ["experiment.repeats=2"], failing={1})
    (record,) = sweep.records
    trial_dir = write_record(record, tmp_path / "trials" / record.slug)
    repeat_dirs = sorted(p.name for p in (trial_dir / REPEATS_DIR).iterdir())
    assert repeat_dirs == ["repeat-1-attempt-1", "repeat-1-attempt-2", "repeat-2"]
    assert (trial_dir / REPEATS_DIR / "repeat-2" / LATENCIES_FILE).exists()
    assert not (trial_dir / LATENCIES_FILE).exists(), "the trial's own samples are its repeats'"
    store = premigrated_store(tmp_path / "store")
    tracker = Tracker(store, "tierbench")
    tier_run = tracker.tier_run("s", "local", tracker.sweep_run("s", {}), {}, {})
    trial_run = tracker.log_trial(tier_run, record, trial_dir, {"sweep_id": "s", "gpu_tier": "local"}, "cfg: 1\n")
    nested = runs(store, "repeat", "s", retried=True)
    assert len(nested) == 3 and {r.data.tags["mlflow.parentRunId"] for r in nested} == {trial_run}
    assert {r.data.tags["trial_key"] for r in nested} == {record.key}
    (trial,) = runs(store, "trial", "s")
    assert trial.info.run_id == trial_run and trial.data.metrics["repeats"] == 2
    write_record(sweep.records[0].repeats[-1], trial_dir)  # a later record of the trial, measured once
    assert not (trial_dir / REPEATS_DIR).exists(), "an earlier record's repeats never pass for a later one's"


@pytest.mark.slow
def test_a_sweep_with_repeats_nests_them_under_the_trial_run_with_its_intervals(tmp_path: Path) -> None:
    cfg = load_config([*store_overrides(tmp_path, "repeats", premigrated=True), *TINY_SWEEP, "experiment.repeats=2",
                       "experiment.repeat_fresh_server=true"])
    assert run_sweep(cfg) == 0
    store = cfg.mlflow.tracking_uri
    (trial,) = runs(store, "trial", "repeats")
    repeats = runs(store, "repeat", "repeats")
    assert sorted(r.info.run_name for r in repeats) == [f"{trial.info.run_name}/repeat-{n}" for n in (1, 2)]
    assert {r.data.tags["mlflow.parentRunId"] for r in repeats} == {trial.info.run_id}
    m = trial.data.metrics
    assert m["repeats"] == 2 and trial.data.params["repeats"] == "2"
    for figure in ("latency_p99_ms", "latency_p50_ms", "throughput_img_s", "cost_per_1k_images_usd"):
        assert m[f"{figure}_ci_low"] <= m[figure] <= m[f"{figure}_ci_high"], figure
    client = MlflowClient(store)
    for repeat in repeats:
        assert "latencies.csv" in {a.path for a in client.list_artifacts(repeat.info.run_id)}
    assert m["request_count"] == sum(r.data.metrics["request_count"] for r in repeats)

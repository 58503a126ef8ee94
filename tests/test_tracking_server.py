"""A team's tracking server (PostgreSQL + `mlflow server --app-name basic-auth`, tests/tracking_server.py): two
teammates' sweeps writing at once, each run once; a sweep's publisher that logs what it missed while the server was
down once it is back. The two-tier sweep and its report, and the server killed mid-sweep then relog, run against the
same server in tests/test_tiers_emulated.py and tests/test_resume_relog.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from experiments.results import publish
from experiments.results.layout import TierFolder
from experiments.results.records import Status, write_record
from serving.paths import REPO_ROOT
from tests import helpers
from tests.synthetic_trials import records, synthetic_config, synthetic_tier, write_latencies
from tests.tracking_server import USERS

TIERS = ["a100", "rtx4090"]
TRIALS_PER_TIER = 6
# A writer process: imports, then waits for the other (a file each) so that both log at once, then logs its sweep.
WRITER = f"""
import sys, time
from pathlib import Path
from tests.synthetic_trials import log_sweep
uri, sweep_id, folder, other = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
folder.mkdir(parents=True)
(folder / "ready").touch()
while not (other / "ready").exists():
    time.sleep(0.05)
logged = log_sweep(uri, sweep_id, {TIERS}, {TRIALS_PER_TIER}, folder / "runs")
sys.exit(1 if any(tier.offline_reason for tier in logged) else 0)
"""


@pytest.mark.slow
def test_two_sweeps_writing_at_once_lose_nothing_and_log_nothing_twice(tracking_server, tmp_path: Path) -> None:
    folders = {user: tmp_path / user for user in USERS}
    writers = {user: subprocess.Popen([sys.executable, "-c", WRITER, tracking_server.uri(user), f"team-{user}",
                                       str(folders[user]), str(folders[other])], cwd=REPO_ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for user, other in zip(USERS, reversed(USERS), strict=True)}
    for user, writer in writers.items():
        output = writer.communicate(timeout=240)[0]
        assert writer.returncode == 0, f"{user}'s sweep: {output[-3000:]}"

    spans = []
    for user in USERS:
        uri, sweep_id = tracking_server.uri(user), f"team-{user}"
        assert len(helpers.runs(uri, "sweep", sweep_id)) == 1
        assert sorted(r.data.tags["gpu_tier"] for r in helpers.runs(uri, "tier", sweep_id)) == TIERS
        trials = helpers.runs(uri, "trial", sweep_id)
        records = {}
        for tier in TIERS:
            for trial_dir in TierFolder.of(folders[user] / "runs", sweep_id, tier).trials():
                record = json.loads((trial_dir / "record.json").read_text())
                records[record["key"]] = record
        assert len(records) == len(TIERS) * TRIALS_PER_TIER
        keys = [r.data.tags["trial_key"] for r in trials]
        assert sorted(keys) == sorted(records), "each trial logged exactly once"
        for run in trials:
            assert run.data.metrics == pytest.approx(records[run.data.tags["trial_key"]]["metrics"])
            assert run.info.status == "FINISHED" and run.data.tags["status"] == "ok"
        spans.append((min(r.info.start_time for r in trials), max(r.info.start_time for r in trials)))
        artifacts = {a.path for a in MlflowClient(uri).list_artifacts(trials[0].info.run_id)}
        assert {"record.json", "latencies.csv", "config.yaml"} <= artifacts
    (first, last), (other_first, other_last) = spans
    assert max(first, other_first) < min(last, other_last), f"the two sweeps did not log at the same time: {spans}"


@pytest.mark.slow
def test_a_sweep_logs_what_it_measured_while_the_server_was_down_once_it_is_back(
        tracking_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the 3 retries of a sweep: not needed here
    monkeypatch.setattr(publish, "RECONNECT_EVERY_S", 0.0)  # ask again at every trial's end
    uri, sweep_id = tracking_server.uri("bob"), "team-outage"
    cfg = synthetic_config(sweep_id)
    folder, info = synthetic_tier(cfg, "a100", tmp_path / "runs")
    publisher = publish.Publisher(uri, info, folder)
    assert publisher.open()
    rng = np.random.default_rng(0)

    def measured(record) -> None:  # as the driver does: the folder first, then the store
        trial_dir = write_record(record, folder.trial(record.slug))
        write_latencies(trial_dir, 20, rng)
        publisher.trial(record, trial_dir)

    first, during, also_during, after = records(cfg, "a100", 4)
    measured(first)
    tracking_server.kill_mlflow()
    measured(during)
    assert not publisher.online and "Connection" in publisher.offline_reason
    measured(also_during)
    assert not publisher.online, "the server is still down"
    tracking_server.start_mlflow()
    measured(after)
    assert publisher.online, publisher.offline_reason
    publisher.finish(Status.OK)

    measured_records = {r.key: r for r in (first, during, also_during, after)}
    trials = helpers.runs(uri, "trial", sweep_id)
    assert sorted(r.data.tags["trial_key"] for r in trials) == sorted(measured_records), "each trial once"
    for run in trials:
        assert run.data.metrics == pytest.approx(measured_records[run.data.tags["trial_key"]].metrics)
        assert run.info.status == "FINISHED"
    (tier,) = helpers.runs(uri, "tier", sweep_id)
    assert tier.info.status == "FINISHED"

"""A team's tracking server (PostgreSQL + `mlflow server --app-name basic-auth`, tests/tracking_server.py): two
teammates' sweeps writing at once, each run once. The two-tier sweep and its report, and the server killed mid-sweep,
run against the same server in tests/test_tiers_emulated.py and tests/test_resume_relog.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from experiments.results.layout import TierFolder
from serving.paths import REPO_ROOT
from tests import helpers
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

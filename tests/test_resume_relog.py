"""Nothing lost, nothing twice: a team's tracking server (tests/tracking_server.py) killed mid-sweep doesn't stop the
sweep, relog brings the trials measured meanwhile once it is back, a resumed sweep only runs what is missing or failed
(the failed run marked superseded), and no secret from the tracking URI lands anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from experiments.results.records import SERIES_PREFIX
from serving.paths import REPO_ROOT
from tests import helpers
from tests.processes import server_processes, wait_for_no_new_processes
from tests.sweep_process import SweepProcess

pytestmark = pytest.mark.slow

TINY = ["model=tiny",
        "experiment.backends=[triton_onnx]", "experiment.protocols=[grpc]", "experiment.input_formats=[tensor]",
        "experiment.batch_sizes=[1]", "experiment.window_s=1", "experiment.warmup_s=0.3",
        "experiment.stability.windows=1",
        "experiment.warmup_requests=2"]


# A dead server costs MLflow's client ~4 minutes of retries before the sweep goes on offline (docs/cloud.md): none here.
NO_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


def test_server_killed_mid_sweep_then_relog_then_resume_reruns_what_failed(tmp_path: Path, tracking_server) -> None:
    before = server_processes()
    store, secret = tracking_server.uri("alice"), tracking_server.passwords["alice"]
    sweep = SweepProcess(tmp_path, "sweep_id=offline", "experiment.concurrency=[1,2]", *TINY, store=store,
                         env=NO_RETRIES)
    sweep.wait_for(r"\[1/2\] local/", timeout_s=420)  # c1 measured and logged; c2 is measured with the server gone
    tracking_server.kill_mlflow()
    sweep.wait_for("unreachable")  # c2's logging failed: the sweep goes on offline
    # The server stays down until the sweep has ended (a server back before then is caught up with by the sweep
    # itself: tests/test_tracking_server.py); then it comes back on the same port and database.
    assert sweep.wait() == 0, sweep.output[-3000:]
    folder = tmp_path / "runs" / "offline" / "local"
    assert "python -m runners.relog" in sweep.output and str(folder) in sweep.output
    tracking_server.start_mlflow()
    (live,) = helpers.runs(store, sweep_id="offline")
    assert live.info.run_name == "local/triton_onnx/grpc/tensor/b1/c1"

    # No secret in the output, the run folder (records, tier.json, config, Hydra's saved overrides) or logs.
    assert secret not in sweep.output
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path

    relog = subprocess.run([sys.executable, "-m", "runners.relog", str(tmp_path / "runs" / "offline"),
                            "--tracking-uri", store], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert relog.returncode == 0, relog.stderr
    assert "1 trial runs logged, 1 already" in relog.stdout and secret not in relog.stdout + relog.stderr
    runs = helpers.runs(store, sweep_id="offline")
    assert {r.info.run_name for r in runs} == {"local/triton_onnx/grpc/tensor/b1/c1",
                                               "local/triton_onnx/grpc/tensor/b1/c2"}
    for run in runs:
        record = json.loads((folder / "trials" / run.info.run_name.replace("/", "_") / "record.json").read_text())
        # the trial's metrics, and its series over time as step metrics: every bin of each, at its step
        logged = {k: v for k, v in run.data.metrics.items() if not k.startswith(SERIES_PREFIX)}
        assert logged == pytest.approx(record["metrics"]) and record["series"]
        client = MlflowClient(store)
        for name in {name for point in record["series"] for name in point}:
            history = dict(sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                                          SERIES_PREFIX + name)))
            assert history == pytest.approx({step: point[name] for step, point in enumerate(record["series"])
                                             if name in point}), name
        assert run.data.tags["trial_key"] == record["key"] and run.data.tags["status"] == "ok"

    # Relogging again adds nothing.
    again = subprocess.run([sys.executable, "-m", "runners.relog", str(folder), "--tracking-uri", store], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "0 trial runs logged, 2 already" in again.stdout
    assert len(helpers.runs(store, sweep_id="offline")) == 2

    # A trial that failed (in the folder and in the store, as after a crash) is measured again on resume.
    record_file = folder / "trials" / "local_triton_onnx_grpc_tensor_b1_c1" / "record.json"
    record = json.loads(record_file.read_text())
    record["status"], record["reason"] = "failed", "simulated failure for the resume test"
    record_file.write_text(json.dumps(record))
    (old,) = [r for r in runs if r.info.run_name.endswith("/c1")]
    MlflowClient(store).set_tag(old.info.run_id, "status", "failed")

    # Resume: the same sweep_id with one more load point runs that trial and the failed one, and nothing else.
    resumed = SweepProcess(tmp_path, "sweep_id=offline", "experiment.concurrency=[1,2,3]", *TINY, store=store)
    assert resumed.wait() == 0, resumed.output[-3000:]
    assert resumed.output.count("already ok in sweep offline") == 1
    runs = {r.info.run_id: r for r in helpers.runs(store, sweep_id="offline")}
    assert sorted(r.info.run_name[-2:] for r in runs.values()) == ["c1", "c1", "c2", "c3"]
    (new_c1,) = [i for i, r in runs.items() if r.info.run_name.endswith("/c1") and i != old.info.run_id]
    assert runs[new_c1].data.tags["status"] == "ok"
    assert runs[old.info.run_id].data.tags["superseded_by"] == new_c1
    assert not wait_for_no_new_processes(before)

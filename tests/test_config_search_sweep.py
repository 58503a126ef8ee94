"""A real settings search on this machine (tiny model, grid; Triton over two settings, Ray Serve over one): every
candidate measured by the SLO search as real trials (Triton's four by one process, reloading the model), the
winner's exported `config.pbtxt` loads in Triton and its `serve_config.yaml` deploys on Ray Serve, the report says
what to deploy, and a resumed search measures nothing again."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from serving.paths import REPO_ROOT
from tests.helpers import runs, store_overrides, store_uri
from tests.sweep_process import run_sweep_command

pytestmark = pytest.mark.slow

SWEEP_ID = "search-e2e"
# A p99 target every candidate meets at one request in flight even on a starved 2-core VM (Ray Serve's tiny-model p99
# passed 100 ms there beside the other test worker, and 300 ms beside a busy core as well, leaving it no winner): the
# test is of the search, not the figure.
SEARCH = ["experiment=cheapest", "model=tiny", "experiment.protocols=[http]", "experiment.search.strategy=grid",
          "experiment.slo.p99_ms=1000", "experiment.slo.max_concurrency=4", "experiment.window_s=0.5",
          "experiment.stability.windows=1", "experiment.stability.max_windows=1", "experiment.warmup_s=0.3",
          "experiment.warmup_requests=2", "experiment.backends=[triton_onnx_dynbatch,pytorch_batched]",
          "experiment.search.space.triton.instance_count=[1,2]",
          "experiment.search.space.triton.max_queue_delay_us=[0,2000]",
          "experiment.search.space.ray_serve.num_replicas=[1,2]",
          "experiment.search.space.ray_serve.batch_wait_timeout_s=[0.005]",
          "experiment.search.space.ray_serve.batcher=[serve]", "quiet=true"]
GRID_SIZE = {"triton_onnx_dynbatch": 4, "pytorch_batched": 2}  # Serve's candidates start slowest: one setting


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("search")
    proc, _ = run_sweep_command([*store_overrides(tmp, SWEEP_ID, premigrated=True), *SEARCH], timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    return tmp


def deploy_folder(tmp: Path, backend: str) -> Path:
    return tmp / "runs" / SWEEP_ID / "local" / "deploy" / backend


def test_every_candidate_is_measured_and_the_best_wins(searched: Path) -> None:
    summaries = runs(store_uri(searched), "slo")
    by_backend: dict[str, dict[str, float]] = {}
    for run in summaries:
        params, metrics = run.data.params, run.data.metrics
        assert run.data.tags["status"] == "ok", run.data.tags.get("reason")
        by_backend.setdefault(params["search_of"], {})[params["search_values"]] = \
            metrics.get("slo_max_throughput_img_s", 0.0)
    assert sorted(by_backend) == ["pytorch_batched", "triton_onnx_dynbatch"]
    for backend, measured in by_backend.items():
        assert len(measured) == GRID_SIZE[backend], measured  # the grid: each candidate measured once
        summary = json.loads((deploy_folder(searched, backend) / "search.json").read_text())
        assert summary["candidates_measured"] == summary["points"] == GRID_SIZE[backend]
        assert summary["best"]["slo_max_throughput_img_s"] == max(measured.values()) > 0
        assert json.dumps(summary["best"]["values"], sort_keys=True) in measured
    trials = runs(store_uri(searched))
    assert trials and all(t.data.params.get("search_of") for t in trials)  # every probe a real, logged trial
    starts: dict[str, set[str]] = {}
    for trial in trials:
        if trial.data.params["search_of"] == "triton_onnx_dynbatch":
            starts.setdefault(trial.data.params["search_values"], set()).add(trial.data.params["server_start"])
    assert sorted(map(sorted, starts.values())) == [["process"], ["reload"], ["reload"], ["reload"]], \
        "one Triton process for the four candidates: each after the first reloaded the classifier with its config"


def test_the_winners_config_pbtxt_loads_in_triton(searched: Path, tmp_path: Path) -> None:
    from serving.triton.installation import BundledTriton
    from serving.triton.server import TritonServer

    exported, repository = deploy_folder(searched, "triton_onnx_dynbatch"), tmp_path / "repository"
    shutil.copytree(exported, repository, ignore=shutil.ignore_patterns("*.json"))
    summary = json.loads((exported / "search.json").read_text())
    config = (repository / "tiny" / "config.pbtxt").read_text()
    assert f"count: {summary['best']['values']['instance_count']}" in config
    delay = summary["best"]["values"]["max_queue_delay_us"]
    assert f"max_queue_delay_microseconds: {delay}" in config if delay else "dynamic_batching" in config
    server = TritonServer(BundledTriton.discover(), repository, "tiny", tmp_path / "tritonserver.log")
    try:
        server.start(timeout_s=120)  # returns once /v2/models/tiny/ready answers 200
    finally:
        server.stop(timeout_s=10)


DEPLOY_SCRIPT = textwrap.dedent("""
    import sys, yaml, ray
    from ray import serve
    from ray.serve._private import api
    from ray.serve.schema import ServeDeploySchema

    config = ServeDeploySchema.model_validate(yaml.safe_load(open(sys.argv[1])))
    # Its own Ray, not one the machine advertises; its workers inherit PYTHONPATH: tierbench installed.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        client = api.serve_start(http_options={"host": "127.0.0.1", "port": int(sys.argv[2])})
        client.deploy_apps(config, _blocking=True)  # what `serve deploy` / `serve run config.yaml` do
        app = config.applications[0]
        info = serve.get_app_handle(app.name).info.remote().result(timeout_s=60)
        replicas = serve.status().applications[app.name].deployments["TorchImageClassifier"].replica_states
        print("DEPLOYED", info["device"], replicas.get("RUNNING", 0))
    finally:
        serve.shutdown()
        ray.shutdown()
""")


def test_the_winners_serve_config_deploys(searched: Path, tmp_path: Path) -> None:
    from serving.process import free_ports

    path = deploy_folder(searched, "pytorch_batched") / "serve_config.yaml"
    config = yaml.safe_load(path.read_text())
    summary = json.loads((deploy_folder(searched, "pytorch_batched") / "search.json").read_text())
    (deployment,) = config["applications"][0]["deployments"]
    assert deployment["num_replicas"] == summary["best"]["values"]["num_replicas"]
    batching = config["applications"][0]["args"]["batching"]
    assert batching["batch_wait_timeout_s"] == summary["best"]["values"]["batch_wait_timeout_s"]
    (port,) = free_ports(1, "127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", DEPLOY_SCRIPT, str(path), str(port)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={"PATH": str(Path(sys.executable).parent),
                                                                             "PYTHONPATH": str(REPO_ROOT)})
    assert f"DEPLOYED cpu {deployment['num_replicas']}" in proc.stdout, proc.stderr[-4000:]


def test_the_report_says_what_to_deploy(searched: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runners.report", SWEEP_ID, "--tracking-uri", store_uri(searched),
                           "--results-dir", str(searched / "runs"), "--no-log"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = next((searched / "runs" / SWEEP_ID / "report").glob("*.md")).read_text()
    assert "# Deploy this" in report and "**Deploy " in report


def test_a_resumed_search_measures_nothing_again(searched: Path) -> None:
    before = len(runs(store_uri(searched)))
    proc, _ = run_sweep_command([*store_overrides(searched, SWEEP_ID), *SEARCH], timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    output = proc.stdout + proc.stderr
    resumed = set(re.findall(r"settings search: (\S+) already measured \(resumed\)", output))
    assert len(resumed) == sum(GRID_SIZE.values()), output[-4000:]
    assert "starting triton_onnx_dynbatch" not in output and "starting pytorch_batched" not in output
    assert len(runs(store_uri(searched))) == before

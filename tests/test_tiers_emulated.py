"""Multi-tier sweeps on an emulated Ray cluster (several Ray nodes on this machine, each declaring a tier), run
through the real command line: tiers in parallel on their own nodes, clients where configured, missing tiers
refused, nothing left running. Every process the tests start carries a marker in its environment, so the leak
checks see those and nobody else's."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from tests.helpers import TRITON_ABORT_RETRIES, runs, store_overrides, store_uri
from tests.processes import TOKEN_VARIABLE as MARK_VAR
from tests.processes import wait_until_gone as wait_for_no_marked_processes
from tests.sweep_process import run_sweep_command

pytestmark = pytest.mark.slow

TINY = ["model=tiny", "experiment.protocols=[http]", "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]",
        "experiment.warmup_s=0.3", "experiment.warmup_requests=2"]


def _sweep(args: list[str], tmp: Path, marker: str, timeout: float = 540,
           store: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """A sweep of this machine's emulated or joined cluster, every process it starts marked with `marker`; its
    MLflow store is `store` when given (its overrides win: Hydra takes the last), else SQLite under `tmp`."""
    stored = [f"mlflow.tracking_uri={store}"] if store else []
    return run_sweep_command([*store_overrides(tmp), *stored, *args], env={MARK_VAR: marker}, timeout=timeout)


def _runs(tmp: Path, level: str) -> list:
    return runs(store_uri(tmp), level)


def _tier_nodes(runs_dir: Path, tier: str) -> set[str]:
    """Node ids declaring `tier`, from the cluster's node table the tier job saved (Ray's GCS, not the actors)."""
    (path,) = runs_dir.glob(f"*/{tier}/cluster.json")
    return {row["node_id"] for row in json.loads(path.read_text()) if tier in row["tiers"]}


TWO_TIERS_SWEEP = "two-tiers"


@pytest.fixture(scope="module")
def two_tiers(tmp_path_factory: pytest.TempPathFactory, tracking_server) -> tuple:
    """The two-tier sweep and its report, logged to a team's tracking server (PostgreSQL, basic auth) as a teammate:
    (the sweep's process, processes left, its folder, the store)."""
    tmp = tmp_path_factory.mktemp("tiers")
    marker = uuid.uuid4().hex
    proc, _ = _sweep(["cluster=emulated", "gpu=a100,rtx4090", "experiment.backends=[triton_onnx,pytorch]",
                      "experiment.concurrency=[1,2]", "experiment.window_s=2",
                      "experiment.stability.windows=2", "experiment.stability.max_windows=2", *TINY, "report=true",
                      TRITON_ABORT_RETRIES,
                      f"sweep_id={TWO_TIERS_SWEEP}", "-m"],
                     tmp, marker, store=tracking_server.uri())
    left = wait_for_no_marked_processes(marker)
    return proc, left, tmp, tracking_server.uri()


def _two_tier_runs(two_tiers: tuple, level: str) -> list:
    *_, store = two_tiers
    return runs(store, level, TWO_TIERS_SWEEP)


def test_two_tier_sweep_succeeds_and_leaves_nothing_running(two_tiers) -> None:
    proc, left, *_ = two_tiers
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    assert "starting an emulated Ray cluster" in proc.stderr + proc.stdout
    assert not left, f"processes of the sweep still running: {left}"


def test_one_sweep_id_across_tiers_and_every_run_tagged_emulated(two_tiers) -> None:
    sweeps, tiers, trials = (_two_tier_runs(two_tiers, level) for level in ("sweep", "tier", "trial"))
    assert len(sweeps) == 1 and len(tiers) == 2 and len(trials) == 2 * 2 * 2  # tiers x backends x concurrency
    assert len({r.data.tags["sweep_id"] for r in sweeps + tiers + trials}) == 1
    assert all(r.data.tags["emulated"] == "true" for r in sweeps + tiers + trials)
    assert {r.data.tags["gpu_tier"] for r in tiers} == {"a100", "rtx4090"}
    assert all(r.data.tags["status"] == "ok" for r in trials), [r.data.tags.get("reason") for r in trials]


def test_a_multirun_ends_with_one_report_across_its_tiers(two_tiers) -> None:
    proc, _, tmp, _ = two_tiers
    (sweep,) = _two_tier_runs(two_tiers, "sweep")
    sweep_id = sweep.data.tags["sweep_id"]
    assert proc.stdout.count("tierbench report, sweep") == 1
    assert f"tierbench report, sweep {sweep_id}: 8 trials (8 ok, 0 failed, 0 skipped) on " in proc.stdout
    assert (tmp / "runs" / sweep_id / "report" / "report.html").exists()


def test_each_tiers_servers_and_clients_ran_on_that_tiers_node(two_tiers) -> None:
    _, _, tmp, _ = two_tiers
    nodes = {tier: _tier_nodes(tmp / "runs", tier) for tier in ("a100", "rtx4090")}
    assert nodes["a100"] and nodes["rtx4090"] and not nodes["a100"] & nodes["rtx4090"]
    tier_runs, trials = _two_tier_runs(two_tiers, "tier"), _two_tier_runs(two_tiers, "trial")
    assert len(tier_runs) == 2 and len(trials) == 8, "the sweep ran its tiers and trials"
    for run in tier_runs:
        assert run.data.params["node_id"] in nodes[run.data.tags["gpu_tier"]]
    backends = set()
    for run in trials:
        params, tier = run.data.params, run.data.params["gpu_tier"]
        backends.add(params["backend"])
        assert params["server_node_id"] in nodes[tier], (run.info.run_name, params["server_node_id"])
        assert params["client_placement"] == "colocated"
        assert set(params["client_node_ids"].split(",")) <= nodes[tier], run.info.run_name
    assert backends == {"triton_onnx", "pytorch"}, "Triton host actors and Serve replicas both checked"


def _measuring_overlap(windows: dict[str, list[tuple[float, float]]]) -> float:
    """Seconds for which two tiers were both measuring: the overlap of their measuring spans (each tier's first
    window's start to its last window's end), negative when one tier's span ended before the other's began."""
    (first, second) = ((min(s for s, _ in w), max(e for _, e in w)) for w in windows.values())
    return min(first[1], second[1]) - max(first[0], second[0])


def test_the_tiers_measured_at_the_same_time(two_tiers) -> None:
    """The tiers' jobs run in parallel: their measuring spans overlap. Not window against window: a tier measures a
    few seconds per trial between servers' starts of tens of seconds, so on a busy machine the two tiers' windows
    can fall between each other's though both tiers run at once; tiers run one after the other never overlap."""
    _, _, tmp, _ = two_tiers
    windows = {}
    for path in (tmp / "runs").glob("*/*/trials/*/record.json"):
        record = json.loads(path.read_text())
        windows.setdefault(record["trial"]["tier"], []).append((record["window"]["start"], record["window"]["end"]))
    assert {tier: len(spans) for tier, spans in windows.items()} == {"a100": 4, "rtx4090": 4}  # backends x loads
    assert _measuring_overlap(windows) > 0, f"the tiers measured one after the other: {windows}"


@pytest.fixture(scope="module")
def joined_cluster(tmp_path_factory: pytest.TempPathFactory):
    """An emulated cluster started apart from the sweep (head + a100 node + client pool), joined by address."""
    from experiments.cluster.emulated import start_emulated_cluster

    marker = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as env:
        for key, value in {MARK_VAR: marker, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                           "RAY_SERVE_LOG_TO_STDERR": "0"}.items():
            env.setenv(key, value)
        cfg = load_config(["cluster=emulated", "cluster.nodes=[{tier: a100}, {client_pool: true}]"]).cluster
        cluster = start_emulated_cluster(cfg)
    try:
        yield cluster.address, marker, tmp_path_factory.mktemp("joined")
    finally:
        cluster.shutdown()
    left = wait_for_no_marked_processes(marker)
    assert not left, f"processes of the joined cluster still running: {left}"


def test_a_missing_tier_fails_fast_naming_it_and_the_tiers_there_are(joined_cluster) -> None:
    address, marker, tmp = joined_cluster
    proc, _ = _sweep(["cluster=address", f"cluster.address={address}", "gpu=a100,h100", *TINY, "-m"], tmp,
                     marker, timeout=120)
    output = proc.stderr + proc.stdout
    assert proc.returncode == 2, output[-3000:]
    assert "waiting for a node of tier" not in output, "refused on the cluster as it was, without waiting"
    assert "no live node of tier 'h100'" in output and "tiers it has: a100" in output
    assert not (tmp / "mlflow.db").exists(), "nothing may start before the tiers are checked"


def test_separate_clients_run_on_the_client_pool(joined_cluster) -> None:
    address, marker, tmp = joined_cluster
    proc, _ = _sweep(["cluster=address", f"cluster.address={address}", "gpu=a100", "clients.placement=separate",
                      "experiment.backends=[triton_onnx]", "experiment.concurrency=[1]", "experiment.window_s=1",
                      *TINY], tmp, marker, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    (path,) = (tmp / "runs").glob("*/a100/cluster.json")
    table = json.loads(path.read_text())
    pool = {row["node_id"] for row in table if row["client_pool"]}
    a100 = {row["node_id"] for row in table if "a100" in row["tiers"]}
    (trial,) = _runs(tmp, "trial")
    params = trial.data.params
    assert trial.data.tags["status"] == "ok", trial.data.tags.get("reason")
    assert params["client_placement"] == "separate" and set(params["client_node_ids"].split(",")) <= pool
    assert params["server_node_id"] in a100
    # cluster=address says nothing of emulation: the nodes' own marker does.
    assert trial.data.tags["emulated"] == "true"


def test_a_tier_node_held_by_another_sweep_times_out_with_a_clear_error(joined_cluster) -> None:
    import ray

    from experiments.cluster.placement import LEASE_SHARE, NodeLease

    address, marker, tmp = joined_cluster
    ray.init(address=address, log_to_driver=False)
    try:  # another sweep holds the only a100 node
        holder = ray.remote(NodeLease).options(num_cpus=0, resources={"tier_a100": LEASE_SHARE}).remote()
        ray.get(holder.where.remote(), timeout=60)
        proc, _ = _sweep(["cluster=address", f"cluster.address={address}", "gpu=a100",
                                "cluster.lease_timeout_s=3", "experiment.backends=[triton_onnx]", *TINY], tmp,
                               marker, timeout=120)
    finally:
        ray.shutdown()
    output = proc.stderr + proc.stdout
    assert proc.returncode == 2, output[-3000:]
    assert "all 1 node(s) of the tier were held by other tier jobs" in output and "cluster.lease_timeout_s=3" in output
    # one lease, given up at its bound, said once: no second attempt, no wait past it
    assert len(re.findall(r"held by other tier jobs .* for \d+ s \(cluster.lease_timeout_s=3\)", output)) == 1

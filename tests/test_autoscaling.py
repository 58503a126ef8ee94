"""Tiers on demand, on a real autoscaling Ray cluster on this machine: a head started with Ray's fake multi-node
provider (`RAY_FAKE_CLUSTER=1`, its worker "nodes" are local processes the autoscaler starts and stops) whose node
types declare tiers with `min_workers: 0`. The node types are read where `ray up` leaves them, the bootstrap config
in the head's home. A multirun over three tiers starts with no tier node alive: the autoscaler starts a node for two
of them (the cluster's `max_workers: 2`), each tier runs there and is charged its node time, the third waits out
`cluster.scale_up_timeout_s` and fails alone, and the nodes are removed once idle, also after a Ctrl-C mid-trial.
A card and the card shared by two servers, offered by one node type, take turns on the one node the autoscaler
starts for them. A tier no node type offers is refused in seconds. The head is started and ended here by pid (with
every node it started), never `ray stop`."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from experiments.cluster.tiers import EMULATED_RESOURCE, NODE_LOCK_RESOURCE, tier_resource
from experiments.config.compose import load_config
from serving.paths import cache_root
from tests.helpers import runs, store_overrides
from tests.ray_nodes import RayNodes, live_nodes
from tests.sweep_process import SweepProcess, run_sweep_command

pytestmark = pytest.mark.slow

TIERS = ("a100", "rtx4090", "h100")
# One card's tiers: a node of this type is the card and the card shared by two servers, as the deploy configs declare.
CARD_TIERS = ("h100_sxm", "h100_sxm_shared2")
IDLE_TIMEOUT_MIN = 0.2
# The type the fake provider gives its head node: under another name the autoscaler keeps launching (and removing)
# a head of the configured type, a busy loop of node starts.
HEAD_TYPE = "ray.head.default"
SWEEP = ["model=tiny",
         "experiment.backends=[pytorch]", "experiment.protocols=[http]", "experiment.input_formats=[tensor]",
         "experiment.batch_sizes=[1]", "experiment.concurrency=[1]", "experiment.window_s=1",
         "experiment.stability.windows=1",
         "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "crosscheck.images=2", "quiet=true"]


def cluster_config(gcs_address: str) -> dict:
    """A Ray cluster YAML for the fake provider: a head with no CPU for trials, one node type per tier."""
    def node_type(tiers: tuple[str, ...], cpus: int) -> dict:
        return {"resources": {"CPU": cpus, **{tier_resource(t): 1 for t in tiers}, NODE_LOCK_RESOURCE: 1,
                              EMULATED_RESOURCE: 1, "object_store_memory": 83886080},
                "labels": {"gpu-tier": tiers[0]}, "node_config": {}, "min_workers": 0, "max_workers": 1}

    tier_types = {f"{tier}-node": node_type((tier,), 1) for tier in TIERS}
    tier_types["card-node"] = node_type(CARD_TIERS, 2)  # two servers at once on the shared card's trials
    return {"cluster_name": "tierbench-autoscaling-test", "max_workers": 2, "upscaling_speed": 1.0,
            "idle_timeout_minutes": IDLE_TIMEOUT_MIN,
            "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                         "disable_launch_config_check": True, "gcs_address": gcs_address},
            "auth": {}, "docker": {}, "head_node_type": HEAD_TYPE,
            "available_node_types": {HEAD_TYPE: {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
                                     **tier_types},
            "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
            "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
            "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
            "worker_start_ray_commands": []}


def tier_nodes(address: str) -> list[dict]:
    return [n for n in live_nodes(address) if any(r.startswith("tier_") for r in n["Resources"])]


@pytest.fixture(scope="module")
def autoscaling_cluster(tmp_path_factory: pytest.TempPathFactory) -> RayNodes:
    home = tmp_path_factory.mktemp("head-home")  # the head's home: where `ray up` leaves the bootstrap config
    # The nodes' caches stay this machine's (the corpus, the ceiling's timings, the compiled engine, staged models):
    # under the head's new home every tier job built them anew, a minute of two cores per sweep.
    nodes = RayNodes(extra_env={"RAY_FAKE_CLUSTER": "1", "HOME": str(home), "TIERBENCH_CACHE": str(cache_root())})
    config = home / "ray_bootstrap_config.yaml"
    config.write_text(yaml.safe_dump(cluster_config(nodes.address)))
    try:
        nodes.start("head", "--emulated", "--num-cpus", "0", extra=(f"--autoscaling-config={config}",))
        yield nodes
    finally:
        left = nodes.stop()  # the head's processes, and the nodes its autoscaler started (they carry its marker)
        nodes.cleanup_dir()
    assert not left, f"processes of the test cluster still running: {left}"


def test_a_tier_no_node_type_offers_is_refused_before_anything_starts(autoscaling_cluster: RayNodes,
                                                                      tmp_path: Path) -> None:
    proc, _ = run_sweep_command(["cluster=address", f"cluster.address={autoscaling_cluster.address}",
                                 *store_overrides(tmp_path), "gpu=a100,local", *SWEEP, "-m"])
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    message = next(line for line in output.splitlines() if "gpu=local:" in line)
    assert "no autoscaler node type offers it" in message
    assert "a100-node (tier a100, up to 1)" in message and "~/ray_bootstrap_config.yaml on the head node" in message
    assert "gpu=a100:" not in output  # a100 is offered: not refused
    assert tier_nodes(autoscaling_cluster.address) == []  # nothing was asked of the autoscaler


def test_tiers_come_up_on_demand_run_there_and_go_when_idle(autoscaling_cluster: RayNodes, tmp_path: Path) -> None:
    address = autoscaling_cluster.address
    assert tier_nodes(address) == []
    sweep, code = multirun(tmp_path, address, TIERS, scale_up_timeout_s=25, timeout_s=420)
    output = sweep.output
    assert code != 0, output[-4000:]  # one tier could not get a node
    # (Each line shows several times here: every fake node runs a log monitor over the one machine's Ray logs.)
    assert set(re.findall(r"no live node of tier (\w+): asking the autoscaler for one", output)) == set(TIERS)
    timed_out = set(re.findall(r"gpu=(\w+): the autoscaler started no node of tier \1 within 25 s "
                               r"\(cluster\.scale_up_timeout_s=25\)", output))
    assert len(timed_out) == 1, output[-4000:]
    ran = [t for t in TIERS if t not in timed_out]
    price = {t: load_config([f"gpu={t}"]).gpu.price_per_hour_usd for t in ran}
    tier_runs = {r.data.tags["gpu_tier"]: r for r in runs(sweep.store, "tier")}
    assert sorted(tier_runs) == sorted(ran)
    node_ids = set()
    for tier in ran:
        tier_run = tier_runs[tier]
        node_id = tier_run.data.params["node_id"]
        assert node_id.startswith("ffff") and node_id not in node_ids  # a node the fake provider started
        node_ids.add(node_id)
        trials = [r for r in runs(sweep.store) if r.data.tags["gpu_tier"] == tier]
        assert trials and all(r.data.tags["status"] == "ok" for r in trials)
        held = tier_run_node_time(tmp_path, tier)
        assert [row["node_id"] for row in held] == [node_id] and held[0]["scaled_up"]
        metrics = tier_run.data.metrics
        assert 0 < metrics["node_scale_up_s"] < metrics["node_uptime_s"]
        assert metrics["sweep_cost_usd"] == pytest.approx(metrics["node_uptime_s"] * price[tier] / 3600, rel=1e-3)
    # Released: nothing of the sweep holds the nodes, so the autoscaler removes them after its idle timeout.
    wait_for_no_tier_nodes(address)


def test_a_card_and_its_shared_tier_take_turns_on_the_node_the_autoscaler_starts(autoscaling_cluster: RayNodes,
                                                                                 tmp_path: Path) -> None:
    """Both tier jobs ask for a node at once and none is alive: each lease asks for the node's lock as well as its
    tier, so the one node the autoscaler starts (its type runs one) serves the two jobs one after the other, never
    both at once."""
    address = autoscaling_cluster.address
    wait_for_no_tier_nodes(address)
    sweep, code = multirun(tmp_path, address, CARD_TIERS, scale_up_timeout_s=300, timeout_s=540)
    assert code == 0, sweep.output[-4000:]
    held = sorted((row["placed_at"], row["released_at"], row["node_id"], tier)
                  for tier in CARD_TIERS for row in tier_run_node_time(tmp_path, tier))
    assert len(held) == 2 and held[0][2] == held[1][2], held  # one node of card-node's type: both ran on it
    assert held[0][1] <= held[1][0], f"the two tier jobs held the node at once: {held}"
    assert all(r.data.tags["status"] == "ok" for r in runs(sweep.store))
    wait_for_no_tier_nodes(address)


def multirun(tmp: Path, address: str, tiers: tuple[str, ...], scale_up_timeout_s: float,
             timeout_s: float) -> tuple[SweepProcess, int]:
    """The small sweep over `tiers` on the cluster, to its end (killed past `timeout_s`): the process and its exit."""
    sweep = SweepProcess(tmp, "cluster=address", f"cluster.address={address}", f"gpu={','.join(tiers)}",
                         f"cluster.scale_up_timeout_s={scale_up_timeout_s:g}", *SWEEP, "-m")
    try:
        return sweep, sweep.wait(timeout_s=timeout_s)
    finally:
        sweep.kill()


def tier_run_node_time(tmp: Path, tier: str) -> list[dict]:
    (path,) = tmp.glob(f"runs/*/{tier}/node_time.json")
    return json.loads(path.read_text())


def test_an_interrupted_sweep_lets_its_node_go(autoscaling_cluster: RayNodes, tmp_path: Path) -> None:
    """Ctrl-C while a trial loads its tier's node: the sweep stops, and nothing of it (lease, Serve replica,
    client actors) keeps the node from going idle, so the autoscaler removes it."""
    address = autoscaling_cluster.address
    wait_for_no_tier_nodes(address)
    # Enough trials that the SIGINT lands mid-sweep: on a loaded machine a trial's log line reaches this process
    # (through Ray's log streaming) over ten seconds late. The interrupt ends the sweep, so they cost nothing.
    longer = [o for o in SWEEP if not o.startswith("experiment.window_s")] + ["experiment.window_s=5"]
    sweep = SweepProcess(tmp_path, "cluster=address", f"cluster.address={address}", "gpu=a100", *longer,
                         "experiment.concurrency=[1,2,3,4,5,6,7,8]", "-m")
    try:
        sweep.wait_for(r"\[1/8\] a100/pytorch", timeout_s=300)  # the replica and clients load the node now
        sweep.proc.send_signal(signal.SIGINT)
        code = sweep.wait(timeout_s=120)
    finally:
        sweep.kill()
    assert code == 130, sweep.output[-4000:]
    assert "interrupted: stopping 1 tier job(s); each stops its servers and releases its node" in sweep.output
    assert "did not stop within" not in sweep.output
    wait_for_no_tier_nodes(address)


def wait_for_no_tier_nodes(address: str) -> None:
    """Until the autoscaler has removed every tier node (its idle timeout, plus time to notice and stop them)."""
    limit_s = IDLE_TIMEOUT_MIN * 60 + 90
    deadline = time.monotonic() + limit_s
    while (left := tier_nodes(address)) and time.monotonic() < deadline:
        time.sleep(2)
    assert not left, f"tier nodes still up {limit_s:.0f} s after the sweep let them go: {left}"

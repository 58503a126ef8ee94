"""Tier placement without starting Ray: which tiers a multirun asks for, the checks on the live nodes, where
clients go, and how `runners.node` declares a node."""

from __future__ import annotations

import pytest

from experiments.cluster.connection import ClusterView, TierUnavailableError, declared_tiers, require_tiers
from experiments.cluster.placement import PlacementError, TierPlacement, client_options
from experiments.cluster.tiers import NODE_ID_LABEL, node_declaration, placement_options
from experiments.config.compose import compose, load_config
from experiments.run.multirun import requested_tiers
from runners import node as node_cli


def _node(node_id: str, resources: dict[str, float], cpus: float = 1.0, address: str = "10.0.0.1") -> dict:
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": address,
            "Resources": {"CPU": cpus, **resources}}


CLUSTER = ClusterView([
    _node("head", {}, cpus=0),
    _node("n-a100", node_declaration(["a100"])),
    _node("n-4090", node_declaration(["rtx4090"], emulated=True)),
    _node("n-pool", node_declaration([], client_pool=True), cpus=2, address="10.0.0.9"),
])


def test_live_tiers_and_the_missing_tier_message() -> None:
    assert CLUSTER.tiers == {"a100": ["n-a100"], "rtx4090": ["n-4090"]}
    with pytest.raises(TierUnavailableError) as err:
        require_tiers(["a100", "h100"], list(CLUSTER.tiers))
    message = str(err.value)
    assert "no live node of tier 'h100'" in message and "tiers it has: a100, rtx4090" in message
    assert "a100'" not in message.replace("tier 'h100'", ""), "only the missing tier is named as missing"
    assert "runners.node --address HEAD:6379 --tier h100" in message


def test_emulated_comes_from_the_config_or_the_node() -> None:
    assert not CLUSTER.is_emulated("n-a100") and CLUSTER.is_emulated("n-4090")
    assert ClusterView(CLUSTER.nodes, emulated_config=True).is_emulated("n-a100")
    assert [row["tiers"] for row in CLUSTER.summary()] == [[], ["a100"], ["rtx4090"], []]


def test_a_tier_jobs_actors_are_pinned_to_the_node_it_holds() -> None:
    assert placement_options("a100") == {"resources": {"tier_a100": 0.001}}
    assert placement_options("a100", "n-a100")["label_selector"] == {NODE_ID_LABEL: "n-a100"}


def test_clients_colocated_by_default_and_on_the_pool_when_separate() -> None:
    cfg = load_config(["gpu=a100"])
    assert cfg.clients.placement == "colocated"
    assert client_options(cfg, CLUSTER, "a100", "n-a100") == placement_options("a100", "n-a100")
    cfg = load_config(["gpu=a100", "clients.placement=separate", "serving.host=0.0.0.0"])
    assert client_options(cfg, CLUSTER, "a100", "n-a100") == {"resources": {"client_pool": 0.001}}


def test_separate_clients_need_a_pool_and_reachable_servers() -> None:
    cfg = load_config(["gpu=a100", "clients.placement=separate"])
    with pytest.raises(PlacementError, match="serving.host='127.0.0.1'"):
        client_options(cfg, CLUSTER, "a100", "n-a100")  # the pool is another machine: loopback is out of reach
    one_machine = ClusterView([_node("n-a100", node_declaration(["a100"])),
                               _node("n-pool", node_declaration([], client_pool=True))])
    assert client_options(cfg, one_machine, "a100", "n-a100")["resources"] == {"client_pool": 0.001}
    with pytest.raises(TierUnavailableError, match="no live client-pool node"):
        client_options(cfg, ClusterView(CLUSTER.nodes[:3]), "a100", "n-a100")


def test_clients_that_cannot_fit_fail_before_they_are_placed() -> None:
    cfg = load_config(["gpu=a100", "experiment.client_actors=4", "experiment.client_num_cpus=0.5"])
    with pytest.raises(PlacementError, match=r"4 client actors .* = 2 CPU"):
        client_options(cfg, CLUSTER, "a100", "n-a100")
    automatic = load_config(["gpu=a100", "experiment.client_actors=0", "experiment.max_client_actors=8",
                                "experiment.client_num_cpus=0.25"])  # automatic: room for the most it may start
    with pytest.raises(PlacementError, match=r"8 client actors .* = 2 CPU"):
        client_options(automatic, CLUSTER, "a100", "n-a100")


def test_declared_tiers_are_known_before_anything_starts() -> None:
    assert declared_tiers(load_config(["cluster=emulated"]).cluster) == ["a100", "rtx4090"]
    assert declared_tiers(load_config(["cluster=address"]).cluster) is None
    assert "local" in declared_tiers(load_config().cluster)


def _multirun_config(overrides: list[str]):
    return compose(overrides, return_hydra_config=True)


@pytest.mark.parametrize("override,expected", [
    ("gpu=a100,rtx4090", ["a100", "rtx4090"]),
    ("gpu=choice(h100,a100)", ["h100", "a100"]),
    ("gpu=rtx4090", ["rtx4090"]),
])
def test_requested_tiers_of_a_multirun(override: str, expected: list[str]) -> None:
    cfg = _multirun_config([])
    cfg.hydra.overrides.task = [override, "experiment.batch_sizes=[1]"]
    assert requested_tiers(cfg) == expected


def test_requested_tiers_default_to_the_configured_one() -> None:
    assert requested_tiers(_multirun_config([])) == ["local"]


def test_parallel_launcher_jobs_take_no_cpu_never_retry_and_run_on_the_head() -> None:
    remote = _multirun_config([]).hydra.launcher.ray.remote
    assert remote.num_cpus == 0 and remote.max_retries == 0
    assert "node:__internal_head__" in remote.resources


def test_node_declares_the_tier_it_is_given() -> None:
    cmd = node_cli.ray_start_command(node_cli.parse_args(["--address", "10.0.0.5:6379", "--tier", "a100"]), "a100")
    assert cmd[:2] == ["ray", "start"] and "--address=10.0.0.5:6379" in cmd
    assert '--resources={"tier_a100":1.0,"tierbench_node":1.0}' in cmd and "--labels=gpu-tier=a100" in cmd
    assert "--disable-usage-stats" in cmd
    assert "--node-manager-port=6380" in cmd and "--max-worker-port=10999" in cmd, "fixed ports to open"
    pool = node_cli.ray_start_command(node_cli.parse_args(["--address", "h:1", "--client-pool"]), None)
    assert '--resources={"client_pool":1.0}' in pool
    head = node_cli.ray_start_command(node_cli.parse_args(["--head"]), None)
    assert "--head" in head and "--dashboard-host=127.0.0.1" in head


def test_node_detects_its_tier_from_the_gpu_name() -> None:
    assert node_cli.detect_tier(["NVIDIA GeForce RTX 4090"]) == "rtx4090"
    assert node_cli.detect_tier(["NVIDIA A100-SXM4-80GB"]) == "a100"
    assert node_cli.detect_tier(["NVIDIA H100 80GB HBM3"], (81559,)) == "h100_sxm", "not the PCIe card's tier"
    with pytest.raises(node_cli.NodeSetupError, match="is no tier's GPU"):
        node_cli.detect_tier(["NVIDIA RTX 6000 Ada Generation"])
    with pytest.raises(node_cli.NodeSetupError, match="no NVIDIA GPU"):
        node_cli.detect_tier([])


def test_node_refuses_an_unknown_tier(capsys: pytest.CaptureFixture) -> None:
    assert node_cli.main(["--address", "h:1", "--tier", "v100", "--dry-run"]) == 2
    assert "unknown tier" in capsys.readouterr().err


def test_an_address_with_nothing_listening_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused on one connection attempt, before Ray is asked (whose own connection retries for minutes)."""
    import ray

    from experiments.cluster.connection import RayConnection
    from serving.process import free_ports

    def never(*args, **kwargs):
        raise AssertionError("ray.init was called: the address was not checked first")

    monkeypatch.setattr(ray, "init", never)
    (port,) = free_ports(1)
    cfg = load_config(["cluster=address", f"cluster.address=127.0.0.1:{port}"]).cluster
    with pytest.raises(TierUnavailableError, match=f"cluster.address=127.0.0.1:{port}: no Ray head answers"):
        RayConnection(cfg).open(["a100"])


class _SlowRay:
    """Ray as `TierPlacement.describe` calls it, with a task that answers after `answer_after` waits (None: never)."""

    def __init__(self, answer_after: int | None) -> None:
        self.answer_after, self.waits, self.cancelled, self.options = answer_after, 0, False, {}

    def remote(self, function):
        ray = self

        class Task:
            def options(self, **options):
                ray.options = options
                return self

            def remote(self):
                return "ref"
        return Task()

    def wait(self, refs, timeout):
        self.waits += 1
        return (refs, []) if self.answer_after is not None and self.waits > self.answer_after else ([], refs)

    def get(self, ref):
        return "node info"

    def cancel(self, ref, force):
        self.cancelled = force


def _held(tier: str = "a100") -> TierPlacement:
    return TierPlacement(tier=tier, node_id="n-a100-0123456789", hostname="gpu-7", emulated=False,
                         client_placement="colocated", server_options=placement_options(tier, "n-a100"),
                         client_options={})


def test_a_node_slow_to_describe_itself_is_waited_for_with_progress_then_named_with_the_fix(monkeypatch, caplog):
    import logging
    import sys

    from experiments.cluster import placement, waiting

    monkeypatch.setattr(waiting, "PROGRESS_EVERY_S", 0.01)
    slow = _SlowRay(answer_after=3)
    monkeypatch.setitem(sys.modules, "ray", slow)
    with caplog.at_level(logging.INFO, logger=placement.__name__):
        assert _held().describe(timeout_s=60) == "node info"
    assert slow.options == {"num_cpus": 0, **placement_options("a100", "n-a100")}  # on the held node
    assert sum("still describing itself" in r.message for r in caplog.records) == 3
    never = _SlowRay(answer_after=None)
    monkeypatch.setitem(sys.modules, "ray", never)
    with pytest.raises(PlacementError) as err:
        _held().describe(timeout_s=0.05)
    message = str(err.value)
    assert "gpu=a100: node n-a100-01234 (gpu-7) did not describe itself" in message
    assert "cluster.schedule_timeout_s=0.05 s" in message and "raise cluster.schedule_timeout_s" in message
    assert never.cancelled

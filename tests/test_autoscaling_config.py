"""Without Ray: which tiers a cluster's autoscaler offers (Ray cluster YAML, KubeRay manifest, the files in
deploy/), how a tier nobody offers is refused, bad `cluster.autoscaling_config` values, and what the benchmark's
node time costs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.cluster.autoscaling import load_autoscaling, parse_autoscaling
from experiments.cluster.connection import TierUnavailableError, require_tiers
from experiments.cluster.placement import NodeTime
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from experiments.results.layout import TierFolder
from experiments.results.node_time import node_time_metrics, record_node_time
from serving.paths import REPO_ROOT

RAY_YAML = {"max_workers": 3, "head_node_type": "head", "idle_timeout_minutes": 5,
            "available_node_types": {"head": {"resources": {"CPU": 0, "tier_local": 1}},
                                     "a100-node": {"resources": {"CPU": 8, "GPU": 1, "tier_a100": 1},
                                                   "min_workers": 0, "max_workers": 2},
                                     "h100-node": {"resources": {"tier_h100": 1}},  # the cluster's max_workers
                                     "off": {"resources": {"tier_rtx4090": 1}, "max_workers": 0},
                                     "clients": {"resources": {"CPU": 4, "client_pool": 1}, "max_workers": 1}}}


def test_node_types_that_may_run_a_worker_offer_their_tiers() -> None:
    offer = parse_autoscaling(RAY_YAML, "cluster.yaml")
    assert offer.tiers() == {"a100", "h100"}  # not the head's, not a type with max_workers 0
    assert offer.types_for("a100") == ["a100-node"] and offer.idle_timeout_s == 300
    assert "a100-node (tier a100, up to 2)" in offer.describe() and "clients (no tier, up to 1)" in offer.describe()
    assert "h100-node (tier h100, up to 3)" in offer.describe()


def test_kuberay_worker_groups_offer_the_tiers_of_their_start_params() -> None:
    manifest = {"kind": "RayCluster", "spec": {
        "autoscalerOptions": {"idleTimeoutSeconds": 60},
        "workerGroupSpecs": [
            {"groupName": "a100", "maxReplicas": 4, "rayStartParams": {"resources": '"{\\"tier_a100\\": 1}"'}},
            {"groupName": "cpu", "maxReplicas": 2, "rayStartParams": {}},
            {"groupName": "h100", "maxReplicas": 0, "rayStartParams": {"resources": '{"tier_h100": 1}'}}]}}
    offer = parse_autoscaling(manifest, "raycluster.yaml")
    assert offer.tiers() == {"a100"} and offer.idle_timeout_s == 60


@pytest.mark.parametrize("name", ["ray-cluster-gcp.yaml", "ray-cluster-aws.yaml", "kuberay-raycluster.yaml"])
def test_the_deploy_files_offer_tiers_the_sweep_knows(name: str) -> None:
    offer = load_autoscaling(str(REPO_ROOT / "deploy" / name))
    assert offer.tiers() and offer.tiers() <= set(p.stem for p in (REPO_ROOT / "conf" / "gpu").glob("*.yaml"))
    # each node type that offers a tier runs one tier job at a time: a lease asking the autoscaler takes it whole
    assert all(t.locks_node for tier in offer.tiers() for t in offer.offering(tier)), offer.describe()


def test_a_lease_asks_for_the_whole_node_only_where_every_node_that_could_answer_it_locks() -> None:
    from experiments.cluster.connection import ClusterView
    from experiments.cluster.placement import takes_node_whole

    locked = {**RAY_YAML, "available_node_types": {
        **RAY_YAML["available_node_types"],
        "card": {"resources": {"tier_h100_sxm": 1, "tier_h100_sxm_shared2": 1, "tierbench_node": 1}}}}
    cluster = load_config(["cluster=address", "cluster.address=127.0.0.1:6379"]).cluster
    view = ClusterView([{"NodeID": "n1", "Alive": True, "Resources": {"tier_a100": 1.0, "tierbench_node": 1.0}},
                        {"NodeID": "n2", "Alive": True, "Resources": {"tier_l4": 1.0}}])
    assert takes_node_whole("a100", view, cluster)  # its live node declares the lock
    assert not takes_node_whole("l4", view, cluster)  # one that does not: asking for it would never be answered
    for tier, expected in (("h100_sxm_shared2", True), ("h100", False)):  # no live node: the node types decide
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("experiments.cluster.placement.read_autoscaling",
                          lambda cfg: parse_autoscaling(locked, "cluster.yaml"))
            assert takes_node_whole(tier, view, cluster) is expected, tier
    with pytest.MonkeyPatch.context() as patch:  # no autoscaler config to read: as before, the tier alone
        patch.setattr("experiments.cluster.placement.read_autoscaling", lambda cfg: None)
        assert not takes_node_whole("h100", view, cluster)


def test_a_tier_neither_live_nor_offered_is_refused_naming_the_node_types() -> None:
    offer = parse_autoscaling(RAY_YAML, "cluster.yaml")
    require_tiers(["a100", "h100"], [], offer)  # offered: the tier jobs ask the autoscaler
    with pytest.raises(TierUnavailableError) as caught:
        require_tiers(["a100", "rtx4090"], ["local"], offer)
    message = str(caught.value)
    assert message.startswith("gpu=rtx4090: no live node of tier 'rtx4090' and no autoscaler node type offers it")
    assert "node types in cluster.yaml: head (tier local, up to 0)" in message
    assert "off (tier rtx4090, up to 0)" in message
    assert "{tier_rtx4090: 1}" in message and message.endswith(
        "pick one of: a100, h100, local (docs/troubleshooting.md#no-node-of-the-tier)")
    assert "gpu=a100" not in message


def test_bad_autoscaling_config_values_are_refused_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster.autoscaling_config='/nowhere.yaml' is not allowed: cannot read"):
        validate(load_config(["cluster=address", "cluster.autoscaling_config=/nowhere.yaml"]))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"cluster_name": "x"}))
    with pytest.raises(ConfigError, match="neither `available_node_types`"):
        validate(load_config(["cluster=address", f"cluster.autoscaling_config={other}"]))
    with pytest.raises(ConfigError, match=r"cluster.scale_up_timeout_s=0.0 is not allowed: a time in seconds > 0"):
        validate(load_config(["cluster.scale_up_timeout_s=0"]))
    good = tmp_path / "cluster.yaml"
    good.write_text(yaml.safe_dump(RAY_YAML))
    validate(load_config(["cluster=address", f"cluster.autoscaling_config={good}"]))


def test_node_time_counts_the_boot_of_a_node_started_for_the_sweep() -> None:
    scaled = NodeTime(asked_at=100.0, scaled_up=True, placed_at=160.0, released_at=400.0)
    already_up = NodeTime(asked_at=100.0, scaled_up=False, placed_at=160.0, released_at=400.0)
    assert (scaled.uptime_s, already_up.uptime_s) == (300.0, 240.0)


def test_node_time_of_every_held_node_adds_up_at_its_price(tmp_path: Path) -> None:
    folder = TierFolder(tmp_path / "a100")
    assert node_time_metrics(folder) == {}
    record_node_time(folder, {"node_id": "n1", "asked_at": 0.0, "placed_at": 60.0, "released_at": 1800.0,
                              "scaled_up": True, "uptime_s": 1800.0, "price_per_hour_usd": 2.0})
    record_node_time(folder, {"node_id": "n2", "asked_at": 2000.0, "placed_at": 2000.0, "released_at": 3800.0,
                              "scaled_up": False, "uptime_s": 1800.0, "price_per_hour_usd": 2.0})
    assert node_time_metrics(folder) == {"node_uptime_s": 3600.0, "sweep_cost_usd": 2.0, "node_scale_up_s": 60.0}


def test_a_lease_ray_cancelled_before_it_ran_is_asked_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a starved machine Ray's control store can destroy a lease the job still holds, before it ran ("all
    references removed"): the job asks again instead of failing; a lease that died having run is raised."""
    import ray
    from ray.exceptions import ActorDiedError

    from experiments.cluster import placement
    from experiments.cluster.connection import ClusterView

    died_unstarted = ActorDiedError()
    died_unstarted.error_msg = "The actor died unexpectedly.\nThe actor never ran - it was cancelled before it started."
    died_running = ActorDiedError()  # Ray's base message: an actor that ran, its node lost
    answers: list[object] = []
    asked: list[int] = []

    class Ref:
        def __init__(self, answer: object) -> None:
            self.answer = answer

    class Lease:
        def __init__(self) -> None:
            asked.append(1)
            self.where = type("Method", (), {"remote": staticmethod(lambda: Ref(answers[len(asked) - 1]))})

    class Remote:
        def options(self, **_: object) -> Remote:
            return self

        def remote(self) -> Lease:
            return Lease()

    def get(ref: Ref, timeout: float | None = None) -> object:
        if isinstance(ref.answer, Exception):
            raise ref.answer
        return ref.answer

    monkeypatch.setattr(ray, "remote", lambda cls: Remote())
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "kill", lambda actor: None)
    monkeypatch.setattr(placement, "wait_for_ref", lambda ref, timeout_s, progress: None)  # ready at once
    cluster = load_config(["cluster=address", "cluster.address=127.0.0.1:6379"]).cluster
    view = ClusterView([{"NodeID": "n1", "Alive": True, "Resources": {"tier_a100": 1.0}}])
    where = {"node_id": "n1", "hostname": "h"}

    answers[:] = [died_unstarted, where]
    assert placement.lease_tier_node("a100", view, cluster)[1] == where
    assert len(asked) == 2, "asked again once"

    asked.clear()
    answers[:] = [died_running, where]
    with pytest.raises(ActorDiedError):
        placement.lease_tier_node("a100", view, cluster)
    assert len(asked) == 1, "a lease that ran and died is not asked for again"

    asked.clear()
    answers[:] = [died_unstarted] * placement.LEASE_TRIES
    with pytest.raises(ActorDiedError):
        placement.lease_tier_node("a100", view, cluster)
    assert len(asked) == placement.LEASE_TRIES, "bounded"


def test_the_driver_works_meanwhile_while_the_node_describes_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep imports MLflow while its node describes itself: the task is submitted first, the wait comes after,
    so the two overlap instead of adding up."""
    import ray

    from experiments.cluster import placement

    events: list[str] = []
    info = object()

    class Remote:
        def options(self, **_: object) -> Remote:
            return self

        def remote(self) -> str:
            events.append("submitted")
            return "ref"

    def wait(ref: str, timeout_s: float, progress: object) -> None:
        events.append("waited")

    monkeypatch.setattr(ray, "remote", lambda fn: Remote())
    monkeypatch.setattr(ray, "get", lambda ref: info)
    monkeypatch.setattr(placement, "wait_for_ref", wait)
    place = placement.TierPlacement("local", "n1", "h", False, "colocated", {}, {})
    assert place.describe(60, meanwhile=lambda: events.append("meanwhile")) is info
    assert events == ["submitted", "meanwhile", "waited"]
    events.clear()
    assert place.describe(60) is info and events == ["submitted", "waited"]

"""Without Ray: how a lost node is named, the resume command, the bounded wait for a node of a tier (the one
mechanism behind a lost node's replacement and an autoscaled node), and the log monitor of co-located nodes."""

from __future__ import annotations

import logging
import types

import pytest

from experiments.cluster.node_loss import NodeLoss, death_cause
from experiments.cluster.waiting import NodeWaitTimeout, wait_for_tier_node
from experiments.config.compose import load_config
from experiments.run.resume import resume_command
from runners import node as node_cli


def test_a_lost_node_is_named_in_the_users_terms() -> None:
    dead = {"NodeID": "ab" * 28, "Alive": False, "DeathReason": 2,
            "DeathReasonMessage": "health check failed due to missing too many heartbeats"}
    assert death_cause(dead) == "raylet died: health check failed due to missing too many heartbeats"
    assert death_cause({**dead, "DeathReason": 3, "DeathReasonMessage": ""}) == "preempted"
    assert death_cause(None) == "node removed from the cluster"
    assert death_cause({**dead, "Alive": True}).startswith("node unreachable")
    loss = NodeLoss("rtx4090", "ab" * 28, "10.0.0.7", 0.0, "raylet died")
    assert loss.describe().startswith("node 10.0.0.7 (abababababab) of tier rtx4090 was lost at ")
    assert loss.describe().endswith(" (raylet died)")


def test_the_resume_command_runs_the_lost_tier_alone_in_the_same_sweep() -> None:
    cfg = load_config(["gpu=rtx4090", "sweep_id=s1"])
    command = resume_command(cfg, ["cluster=address", "gpu=rtx4090", "experiment.batch_sizes=[1,2]",
                                   "sweep_id=old"])
    assert command == ("python -m runners.sweep cluster=address 'experiment.batch_sizes=[1,2]' gpu=rtx4090 "
                       "sweep_id=s1")


def test_waiting_for_a_node_of_a_tier_reports_progress_and_returns_the_new_node(
        caplog: pytest.LogCaptureFixture) -> None:
    reads = iter([{}, {"a100": ["lost-node"]}, {"a100": ["lost-node", "new-node"]}])
    with caplog.at_level(logging.INFO, logger="experiments.cluster.waiting"):
        node = wait_for_tier_node("a100", 60, "to replace the lost node", "cluster.lease_timeout_s",
                                  exclude=["lost-node"], progress_every_s=0, live_tiers=lambda: next(reads))
    assert node == "new-node"
    text = caplog.text
    assert "waiting for a node of tier a100 (to replace the lost node); limit 60 s (cluster.lease_timeout_s)" in text
    assert "waiting for a node of tier a100: " in text and "node new-node of tier a100 is up after" in text


def test_waiting_is_bounded_and_says_which_key_bounds_it() -> None:
    bound = r"no node of tier h100 joined within 0 s \(cluster.scale_up_timeout_s=0\)"
    with pytest.raises(NodeWaitTimeout, match=bound):
        wait_for_tier_node("h100", 0, "for the autoscaler", "cluster.scale_up_timeout_s", live_tiers=dict)


def test_a_node_joining_a_head_on_its_own_machine_runs_no_second_log_monitor() -> None:
    same_host = node_cli.ray_start_command(node_cli.parse_args(["--address", "127.0.0.1:6379", "--tier", "a100"]),
                                           "a100")
    assert "--include-log-monitor=false" in same_host
    remote = node_cli.ray_start_command(node_cli.parse_args(["--address", "192.0.2.123:6379", "--tier", "a100"]),
                                        "a100")
    assert "--include-log-monitor=false" not in remote
    assert "--include-log-monitor=false" not in node_cli.ray_start_command(node_cli.parse_args(["--head"]), None)


def test_a_trial_whose_retry_the_lost_node_prevented_is_recorded_not_run(tmp_path) -> None:
    """Its failed attempt (tagged `retried`, out of the answers) is not the trial's record: the loss gives it one."""
    from experiments.results.records import Status, read_record
    from experiments.run.sweep import TierSweep
    from experiments.run.trial import new_record
    from tests.helpers import CPU_NODE

    cfg = load_config(["gpu=rtx4090", "sweep_id=s1", f"results_dir={tmp_path}", "experiment.backends=[fastapi]",
                       "experiment.protocols=[http]", "experiment.input_formats=[tensor]",
                       "experiment.batch_sizes=[1]", "experiment.concurrency=[1,2]"])
    sweep = TierSweep(cfg)
    logged = []
    sweep.publisher = types.SimpleNamespace(trial=lambda record, trial_dir: logged.append(record))
    sweep.place = types.SimpleNamespace(lost=lambda: None, client_params=lambda locations: {})
    sweep.clients = types.SimpleNamespace(locations=lambda actors, protocol: [])
    sweep.node = CPU_NODE
    first, second = sweep._planned()
    attempt = new_record(cfg, first, CPU_NODE, status=Status.FAILED, reason="fastapi is not healthy")
    attempt.tags["retried"] = "true"  # measured again next, on a fresh server: then the node went
    sweep._finish(attempt, {})
    sweep._record_not_run(NodeLoss("rtx4090", "ab" * 28, "10.0.0.7", 0.0, "raylet died"))
    final = [r for r in logged if "retried" not in r.tags]
    assert sorted(r.trial.concurrency for r in final) == [1, 2], "each planned trial has a record of its own"
    assert all(r.reason.startswith("not run: node 10.0.0.7") for r in final)
    assert read_record(sweep.folder.trial(attempt.slug)).reason.startswith("not run: "), "the folder agrees"

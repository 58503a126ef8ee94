"""A server group whose server and measurement are stand-ins: one triton_onnx trial on the CPU node, measurement
number i (from 1) failing as an unhealthy Python-backend stub fails it when i is in `failing`. For the tests of what
the group does around measurements (retries, repeats), fast and without servers."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.config.compose import load_config
from experiments.measure.samples import WindowSamples
from experiments.plan import plan_trials
from experiments.results.records import Status, TrialRecord
from experiments.run.server_group import ServerGroup
from serving.backend import ServerHandle
from tests.helpers import CPU_NODE

UNHEALTHY = "measurement failed: Stub process 'resnet18_0_0' is not healthy."


class StandInSweep:
    """What the sweep sees of a server group: the records it finishes, with their logs."""

    def __init__(self) -> None:
        self.records: list[TrialRecord] = []
        self.logs: list[dict[str, str]] = []

    def __call__(self, record: TrialRecord, logs: dict[str, str]) -> None:
        self.records.append(record)
        self.logs.append(logs)


class StandInClients:
    def __init__(self) -> None:
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1


def _samples(rng: np.random.Generator, n: int = 200) -> WindowSamples:
    intended = np.linspace(0.0, 2.0, n, endpoint=False)
    done = intended + rng.lognormal(-4.0, 0.3, n)
    return WindowSamples(0.0, 2.0, 1, intended, intended.copy(), done, np.full(n, np.nan), np.zeros(n), completed=n,
                         sent=n)


def run_stand_in_group(monkeypatch, overrides: list[str], failing: set[int] = frozenset(),
                       clients: StandInClients | None = None, handle_params: dict[str, Any] | None = None,
                       answered_errors: str | None = None,
                       server_logs: dict[str, str] | None = None) -> tuple[StandInSweep, dict]:
    """A triton_onnx group on the CPU, one trial; measurement number i (from 1) fails when i is in `failing`: the
    measurement fails, or with `answered_errors` the server answered it with those errors (the trial's
    `first_errors`), over its error budget. The server's handle contributes `handle_params` to its records (e.g. an
    endpoint's `endpoint_nodes`); stopping it returns `server_logs` (default: a one-line log)."""
    import experiments.run.server_group as server_group

    cfg = load_config(["experiment.backends=[triton_onnx]", "experiment.protocols=[grpc]",
                       "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1]",
                       *overrides])
    (group,) = plan_trials(cfg)
    sweep, calls, rng = StandInSweep(), {"start": 0, "measure": 0}, np.random.default_rng(0)
    server = ServerGroup(cfg, group, CPU_NODE, {}, clients=clients or StandInClients(), finish=sweep,
                         save_server_file=lambda name, text: None)

    def start() -> ServerHandle:
        calls["start"] += 1
        return ServerHandle("triton_python_backend", {}, params=dict(handle_params or {}))

    def measure(cfg: Any, trial: Any, *args: Any) -> TrialRecord:
        calls["measure"] += 1
        if calls["measure"] in failing and answered_errors is None:
            return server_group.new_record(cfg, trial, CPU_NODE, status=Status.FAILED, reason=UNHEALTHY)
        if calls["measure"] in failing:
            record = server_group.new_record(cfg, trial, CPU_NODE, status=Status.FAILED,
                                             reason="50.0% of the requests failed, above experiment.max_error_rate")
            record.params["first_errors"] = answered_errors
            record.tags["over_error_budget"] = "true"
            return record
        record = server_group.new_record(cfg, trial, CPU_NODE)
        record.samples = _samples(rng)
        record.metrics = {"throughput_img_s": 100.0 + calls["measure"], "latency_p99_ms": 30.0, "stable": 1.0}
        record.tags["stable"] = "true"
        return record

    server.backend.start, server.backend.stop = start, lambda: dict(server_logs or {"server.log": "stub died"})
    monkeypatch.setattr(server_group, "crosscheck_group", lambda *args: None)
    monkeypatch.setattr(server_group, "run_trial", measure)
    server.run(group.trials)
    return sweep, calls

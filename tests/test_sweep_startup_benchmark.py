"""The sweep start-up benchmark's split of a sweep's wall time at its log's milestones (Hydra's and Ray's log
formats), and its refusal of a log that lacks one."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchmarks.sweep_startup import MILESTONES, phases

LOG = """2026-12-07 20:40:52,000\tINFO worker.py:2038 -- Started a local Ray instance.
[2026-12-07 20:40:54,500][experiments.run.sweep][INFO] - sweep s, tier local: 2 trials; raw results in /r
[2026-12-07 20:41:04,000][experiments.run.sweep][INFO] - inputs: corpus synthetic ready on the clients' node
[2026-12-07 20:41:06,000][experiments.run.server_group][INFO] - starting triton_onnx on vm for 1 trials
[2026-12-07 20:41:15,000][experiments.run.sweep][INFO] - [1/2] local/triton_onnx/http/tensor/b1/c2  p50 3.9 ms
[2026-12-07 20:41:17,250][experiments.run.server_group][INFO] - starting pytorch on vm for 1 trials
[2026-12-07 20:41:33,000][experiments.run.sweep][INFO] - [2/2] local/pytorch/http/tensor/b1/c2  p50 39.7 ms
[2026-12-07 20:41:35,000][experiments.cluster.connection][INFO] - stopped the local Ray this sweep started
"""


def _at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def test_each_phase_runs_from_the_previous_milestone_to_its_own() -> None:
    split = phases(LOG, started=_at("2026-12-07 20:40:45"), ended=_at("2026-12-07 20:41:36"))
    assert list(split) == [phase for phase, _ in MILESTONES] + ["exit", "total"]
    assert list(split.values()) == [7.0, 2.5, 9.5, 2.0, 9.0, 2.25, 15.75, 2.0, 1.0, 51.0]
    assert sum(split.values()) - split["total"] == pytest.approx(split["total"])


def test_a_log_without_a_milestone_is_refused_with_its_pattern() -> None:
    with pytest.raises(SystemExit, match="starting pytorch"):
        phases(LOG.replace("starting pytorch", "launching pytorch"), 0.0, 1.0)

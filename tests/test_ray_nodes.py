"""The test clusters' own hygiene (tests/ray_nodes.py): a node whose `ray start` hangs past its timeout, after it
started Ray's processes, is still ended by the fixture's `stop()`; nothing of it is left running."""

from __future__ import annotations

import subprocess

import pytest

from tests import ray_nodes
from tests.processes import TOKEN_VARIABLE, marked_processes

pytestmark = pytest.mark.slow


def test_a_ray_start_that_times_out_is_ended_by_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = subprocess.run

    def hangs_after_starting(cmd, **kwargs):  # `ray start` that started its processes, then hung past its timeout
        real_run(cmd, **kwargs)
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    nodes = ray_nodes.RayNodes()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(ray_nodes.subprocess, "run", hangs_after_starting)
            with pytest.raises(subprocess.TimeoutExpired):
                nodes.start("head", "--emulated", "--num-cpus", "0")
        marker = nodes.markers["head"]
        started = marked_processes(TOKEN_VARIABLE, marker)
    finally:
        left = nodes.stop()
        nodes.cleanup_dir()
    assert started, "the head's processes were running when its start timed out"
    assert not left and not marked_processes(TOKEN_VARIABLE, marker)

"""A local Ray whose first start misses Ray's fixed waits (30 s for its raylet, about 20 s for its control store) is
stopped and started once more."""

from __future__ import annotations

import subprocess

import pytest
import ray

from experiments.cluster.connection import start_local_ray

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")
GCS_LATE = RuntimeError("Failed to start GCS.  Last 0 lines of error files:\n\n.Please check "
                        "/tmp/ray/session_latest/logs/gcs_server.out for details. Last connection error: None")


@pytest.mark.slow
@pytest.mark.parametrize("late", [TIMEOUT, GCS_LATE], ids=["raylet", "gcs"])
def test_a_start_that_times_out_is_cleaned_up_and_retried(monkeypatch: pytest.MonkeyPatch, late: Exception) -> None:
    calls: list[dict] = []
    left: list[subprocess.Popen] = []

    def init(**kwargs: object) -> None:
        calls.append(kwargs)
        if len(calls) == 1:  # as Ray does: its processes are started, then the wait for the raylet or GCS fails
            left.append(subprocess.Popen(["sleep", "60"]))
            raise late

    monkeypatch.setattr(ray, "init", init)
    start_local_ray(num_cpus=1)
    assert calls == [{"address": "local", "num_cpus": 1}] * 2
    assert left[0].wait(timeout=5) is not None, "the failed start's process was stopped before the retry"


@pytest.mark.slow
def test_other_errors_and_a_second_timeout_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []

    def refuse(**kwargs: object) -> None:
        calls.append(kwargs)
        raise ValueError("object_store_memory is too small")

    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ValueError, match="too small"):
        start_local_ray()
    assert len(calls) == 1, "only Ray's start-up timeout is retried"

    def always_late(**kwargs: object) -> None:
        calls.append(kwargs)
        raise TIMEOUT

    calls.clear()
    monkeypatch.setattr(ray, "init", always_late)
    with pytest.raises(Exception, match="timed out during startup"):
        start_local_ray()
    assert len(calls) == 2, "one retry, not a loop"

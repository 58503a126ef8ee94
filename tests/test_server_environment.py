"""A server a Ray worker starts gets the environment it would have deployed outside Ray: Ray's worker-only
OMP_NUM_THREADS is dropped, a value the node itself was started with is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from serving.paths import REPO_ROOT
from serving.process import outside_ray


@contextmanager
def stand_in_raylet(env: dict[str, str]) -> Iterator[int]:
    """A process started with `env`, standing in for the raylet whose environment a worker's is compared with; it
    says when it runs (just after exec, /proc/<pid>/environ can still read empty)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                               env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "up\n"
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_rays_own_thread_count_is_dropped_and_the_nodes_is_kept() -> None:
    worker = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "OTHER": "x"}
    with stand_in_raylet({"PATH": os.environ["PATH"]}) as raylet:  # the node was started without one: Ray's
        assert outside_ray({**worker, "RAY_RAYLET_PID": str(raylet)}) == {
            "PATH": os.environ["PATH"], "OTHER": "x", "RAY_RAYLET_PID": str(raylet)}
    with stand_in_raylet({"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1"}) as raylet:  # the user's
        assert outside_ray({**worker, "RAY_RAYLET_PID": str(raylet)})["OMP_NUM_THREADS"] == "1"
    assert outside_ray(worker) == worker  # not a Ray worker: nothing to undo


WORKER = """
import sys, tempfile
from pathlib import Path
import ray
from serving.process import start_process

@ray.remote(num_cpus=0)
def child_sees():
    import os
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "child.log"
        start_process([sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'))"], log).wait(30)
        return os.environ.get("OMP_NUM_THREADS"), log.read_text().strip()

ray.init(address="local", num_cpus=2, include_dashboard=False)
try:
    print("WORKER", *ray.get(child_sees.remote(), timeout=120))
finally:
    ray.shutdown()
"""


@pytest.mark.slow
def test_a_server_started_by_a_ray_worker_does_not_inherit_rays_thread_count() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    env.update(PYTHONPATH=str(REPO_ROOT), RAY_AUTH_MODE="disabled")
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("WORKER")]
    assert line == "WORKER 1 None"  # the worker has Ray's 1; the server it starts has none, as outside Ray

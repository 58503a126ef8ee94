"""The suite and the product beside a Ray that is not theirs (most of this tool's users have one): another
session's `ray start --head`, advertised to every driver through RAY_ADDRESS. Every way the tests and a sweep
start Ray starts its own instead of joining it: a test node's `ray start --head` (the autoscaling and node-loss
fixtures), `ray.init(address="local", num_cpus=...)` (the doctor's and the settings search's tests), and a real
`cluster=local` sweep. The other Ray is left as it was: its one node, none of ours, still running."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import runs, store_overrides, store_uri
from tests.ray_nodes import RayNodes, live_nodes
from tests.sweep_process import run_sweep_command

pytestmark = pytest.mark.slow

TINY = ["model=tiny", "experiment.backends=[fastapi]", "experiment.protocols=[http]",
        "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1]",
        "experiment.window_s=1", "experiment.warmup_s=0.3", "experiment.stability.windows=1",
        "experiment.warmup_requests=2"]


REPO_ROOT = Path(__file__).resolve().parent.parent


def test_every_ray_init_says_which_ray_it_means() -> None:
    """`ray.init()` without an address joins whatever the machine advertises (RAY_ADDRESS, /tmp/ray/
    ray_current_cluster): each call in the tests, benchmarks and product names one ("local" to start its own)."""
    unnamed = []
    for path in [*REPO_ROOT.glob("tests/*.py"), *REPO_ROOT.glob("benchmarks/*.py"),
                 *REPO_ROOT.glob("experiments/**/*.py"), *REPO_ROOT.glob("serving/**/*.py"),
                 *REPO_ROOT.glob("runners/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"
                    and not node.args and "address" not in {k.arg for k in node.keywords}):
                unnamed.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not unnamed, f"ray.init() without address= (joins any Ray the machine advertises): {unnamed}"


@pytest.fixture
def foreign_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[RayNodes]:
    other = RayNodes()
    try:
        other.start("head", "--emulated", "--num-cpus", "1")
        monkeypatch.setenv("RAY_ADDRESS", other.address)
        yield other
    finally:
        left = other.stop()
        other.cleanup_dir()
        assert not left, f"the other Ray's processes outlived it: {left}"


def test_the_tests_and_a_sweep_start_their_own_ray_beside_another(foreign_ray: RayNodes, tmp_path) -> None:
    before = {node["NodeID"] for node in live_nodes(foreign_ray.address)}

    ours = RayNodes()   # a fixture's head
    try:
        ours.start("head", "--emulated", "--num-cpus", "0")
        assert ours.address != foreign_ray.address and len(live_nodes(ours.address)) == 1
    finally:
        assert not ours.stop()
        ours.cleanup_dir()

    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.get_runtime_context().gcs_address != foreign_ray.address
    finally:
        ray.shutdown()

    proc, _ = run_sweep_command([*store_overrides(tmp_path, "beside", premigrated=True), *TINY], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tierbench report" not in proc.stdout, "report=false (store_overrides) still printed the report"
    (trial,) = runs(store_uri(tmp_path), sweep_id="beside")
    assert trial.data.tags["status"] == "ok"

    assert {node["NodeID"] for node in live_nodes(foreign_ray.address)} == before, "something joined the other Ray"
    assert foreign_ray.pids("head"), "the other Ray stopped"

"""The longest test files first, GPU gating (tests marked `gpu` skip, saying why, without one), the leak-check
fixture, the one that keeps the compiled engine's files under tmp_path, and the synthetic sweep the report's tests
read; the helpers tests share are in tests/helpers.py, tests/processes.py and tests/sweep_process.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.processes import TOKEN_VARIABLE, server_processes, wait_for_no_new_processes, wait_until_gone

if TYPE_CHECKING:
    from tests.tracking_server import TrackingServer


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


# The longest test files first, roughly by their time in ci-local runs (2026-12-07; each is mostly real sweeps).
# With `--dist loadfile --no-loadscope-reorder` (pyproject's addopts) the two workers take files in collection order:
# the long ones start early and the short ones fill in at the end. xdist's default order (most tests first) left the
# one-test, three-minute sweep files for last, one worker running them while the other had nothing left. A file
# not listed keeps its place after these; a renamed one only loses its head start (benchmarks/suite_time.py prints
# each file's time).
LONGEST_FIRST = (
    "test_autoscaling.py", "test_fair_sweep_e2e.py", "test_tiers_emulated.py", "test_failure_isolation.py",
    "test_node_loss.py", "test_accuracy.py", "test_user_model_sweeps.py", "test_sweep_e2e.py", "test_resume_relog.py",
    "test_clean_stop.py", "test_config_search_sweep.py", "test_generative_sweep.py", "test_caching_audit.py",
    "test_foreign_ray.py", "test_serve_batching.py", "test_shared_cards.py", "test_serve_direct_ingress.py",
    "test_measurement_e2e.py", "test_serve_oip.py", "test_torchserve_server.py", "test_fastapi.py",
    "test_sweep_answer.py",
)


# Ray reads its authentication mode once per process (its C++ config), while `ray.init` of a new cluster with the
# variable unset turns token mode on and writes RAY_AUTH_MODE=token into os.environ. A pytest worker starts Ray in
# its own process many times: once the variable changed between two starts, the second failed ("Failed to start
# GCS", InvalidAuthToken) and a node lease was cancelled before it ran. The tests' clusters are on loopback: one
# mode, disabled, for the worker's whole life, set before any test runs; no test changes it
# (tests/test_ray_auth_mode.py).
RAY_AUTH_MODE = "disabled"


def pytest_configure(config: pytest.Config) -> None:
    os.environ["RAY_AUTH_MODE"] = RAY_AUTH_MODE
    _compose_less()


def _conf_state() -> tuple[tuple[str, int], ...]:
    """Every file of conf/ with its modification time: a file a test writes or changes composes anew."""
    from experiments.config.compose import CONF_DIR

    return tuple((str(path), path.stat().st_mtime_ns) for path in sorted(CONF_DIR.rglob("*.yaml")))


def _compose_less() -> None:
    """The tests compose over a thousand command lines (about 0.5 s each with Hydra), a sweep one per swept point:
    in the tests, a command line composed before is copied (25 ms), and Hydra merges the files of each defaults list
    (a tier, a model, an experiment) once, applying only a new command line's key=value overrides itself. Both are
    keyed by conf/'s files, so a file a test writes composes anew."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    import experiments.config.compose as compose_module

    compose, merge = compose_module.compose, ConfigLoaderImpl._compose_config_from_defaults_list
    composed: dict[tuple, object] = {}
    merged: dict[tuple, object] = {}

    def compose_once(overrides=(), return_hydra_config=False):  # noqa: ANN001, ANN202 - compose's own signature
        if return_hydra_config:  # Hydra's own node holds the run's paths and time: composed anew each time
            return compose(overrides, return_hydra_config)
        key = (tuple(overrides), _conf_state())
        if key not in composed:
            composed[key] = compose(overrides)
        return copy.deepcopy(composed[key])

    def merge_once(self, defaults, repo):  # noqa: ANN001, ANN202 - Hydra's private signature
        key = (tuple((d.config_path, d.parent, d.package, d.is_self, d.primary, d.override_key) for d in defaults),
               _conf_state())
        if key not in merged:
            merged[key] = merge(self, defaults, repo)
        return copy.deepcopy(merged[key])

    compose_module.compose = compose_once  # load_config and every later `from ... import compose` get it
    ConfigLoaderImpl._compose_config_from_defaults_list = merge_once


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi finds none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    before = server_processes()
    yield
    left = wait_for_no_new_processes(before)
    assert not left, f"processes left running: {left}"


@pytest.fixture
def engine_folders_in_tmp_path(tmp_path, monkeypatch) -> None:
    """The compiled engine's request and response files go under pytest's tmp_path (pruned by pytest), not /tmp. The
    engine's test files use it for every test: `pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")`."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


# The synthetic sweep the report's tests read (tests/test_report_tables.py, tests/test_report_published.py), one per
# test file that asks for it (module scope): its MLflow store, the sweep loaded, and its report published.
@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """The synthetic sweep (tests/synthetic_sweep.py) in an MLflow store of its own: the store's URI and the ids of
    its runs."""
    from tests import synthetic_sweep as syn
    from tests.helpers import premigrated_store

    uri = premigrated_store(tmp_path_factory.mktemp("report") / "mlflow")
    return uri, syn.build(uri)


@pytest.fixture(scope="module")
def data(store):
    """The synthetic sweep as the report loads it."""
    from experiments.report.data import load_sweep
    from tests import synthetic_sweep as syn

    return load_sweep(store[0], "tierbench", syn.SWEEP_ID)


@pytest.fixture(scope="module")
def published(store, tmp_path_factory: pytest.TempPathFactory):
    """The synthetic sweep's report, published (its files, and attached to the sweep's run) at an SLO of 35 ms."""
    from experiments.report.build import ReportOptions
    from experiments.report.publish import make_report
    from tests import synthetic_sweep as syn

    out = tmp_path_factory.mktemp("out")
    return make_report(store[0], "tierbench", syn.SWEEP_ID, out, ReportOptions(slo_p99_ms=35.0))


@pytest.fixture(scope="session")
def tracking_server() -> Iterator[TrackingServer]:
    """A team's MLflow server on PostgreSQL (tests/tracking_server.py), one per test session (per xdist worker):
    its start and database migration take 15-30 s here. Skipped, saying why, where PostgreSQL is missing."""
    from tests import tracking_server as team

    reason = team.unavailable()
    if reason:
        pytest.skip(reason)
    token = uuid.uuid4().hex
    with team.tracking_server(env={TOKEN_VARIABLE: token}) as server:
        yield server
    left = wait_until_gone(token)
    assert not left, f"tracking server processes still running: {sorted(left)}"

"""Shared fixtures: a temporary MLflow store, leak checks, GPU gating."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_PROCESS_NAMES = ("tritonserver", "triton_python_backend_stub", "raylet", "gcs_server", "ray::",
                        "default_worker.py", "ServeReplica", "ServeController")


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi finds none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Every process this test session starts (sweeps, Ray, Triton, their children) inherits this variable, so leak
# checks see only this session's processes even when other sessions run on the same machine.
SESSION_VARIABLE = "TIERBENCH_TEST_SESSION"
os.environ.setdefault(SESSION_VARIABLE, uuid.uuid4().hex)
_SESSION_MARK = f"{SESSION_VARIABLE}={os.environ[SESSION_VARIABLE]}".encode()


def _started_by_this_session(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return _SESSION_MARK in f.read().split(b"\0")
    except OSError:
        return False


def server_processes() -> set[int]:
    """PIDs of Triton / Ray server processes started by this test session."""
    out = subprocess.run(["pgrep", "-f", "|".join(SERVER_PROCESS_NAMES)], capture_output=True, text=True).stdout
    pids = {int(pid) for pid in out.split()} - {os.getpid()}
    return {pid for pid in pids if _started_by_this_session(pid)}


def wait_for_no_new_processes(before: set[int], timeout_s: float = 30) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = server_processes() - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def tracking_store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    before = server_processes()
    yield
    left = wait_for_no_new_processes(before)
    assert not left, f"processes left running: {left}"

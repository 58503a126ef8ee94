"""GPU gating (tests marked `gpu` skip, saying why, without one) and the leak-check fixture; the helpers tests
share are in tests/helpers.py, tests/processes.py and tests/sweep_process.py."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.processes import server_processes, wait_for_no_new_processes


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


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    before = server_processes()
    yield
    left = wait_for_no_new_processes(before)
    assert not left, f"processes left running: {left}"

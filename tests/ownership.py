"""Leak checks that only look at the processes a test started, on a machine other people's tests share.

`tests.conftest.server_processes` counts every tritonserver / raylet on the machine, so a colleague's run
that starts meanwhile looks like a leak. Here the test marks its environment with a token; every process it
starts (Ray's gcs_server, raylets and workers, tritonserver, the Python-backend stubs) inherits it, and is
found through /proc/<pid>/environ even after it has been reparented.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TOKEN_VARIABLE = "TIERBENCH_TEST_OWNER"


def owned_processes(token: str) -> set[int]:
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.add(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def wait_until_gone(token: str, timeout_s: float = 30) -> set[int]:
    """Wait up to `timeout_s` for the processes carrying `token` to end; those still running."""
    deadline = time.monotonic() + timeout_s
    while (left := owned_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@contextmanager
def owned_environment(timeout_s: float = 30) -> Iterator[str]:
    """Mark the environment; on exit, wait up to `timeout_s` for every marked process to end, else fail."""
    token = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TOKEN_VARIABLE, token)
        yield token
    left = wait_until_gone(token, timeout_s)
    assert not left, f"processes this test started are still running: {sorted(left)}"

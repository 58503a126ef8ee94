"""Leak checks that only look at the processes this test session (or one test) started, on a machine other
people's tests share.

Every process inherits its parent's environment: the session marks its own (`SESSION_VARIABLE`, set when this
module is imported), and a test can mark what it starts with a token of its own (`owned_environment`). Marked
processes are found through /proc/<pid>/environ, even after they have been reparented (Ray's gcs_server,
raylets and workers, tritonserver, the Python-backend stubs)."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from experiments.cluster.connection import RAY_PROCESS_NAMES
from serving.process import unmapped_shm
from serving.registry import backend_packages

SESSION_VARIABLE = "TIERBENCH_TEST_SESSION"
TOKEN_VARIABLE = "TIERBENCH_TEST_OWNER"
os.environ.setdefault(SESSION_VARIABLE, uuid.uuid4().hex)
# Under pytest-xdist each worker is a session of its own: a worker's leak check must not see what another worker's
# tests are running at the same time. (A worker's children inherit the suffixed value and keep it.)
if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) and not os.environ[SESSION_VARIABLE].endswith(f"-{_worker}"):
    os.environ[SESSION_VARIABLE] += f"-{_worker}"
# Servers a workload's tests run that belong to no backend package: the generative stand-in and `transformers serve`
# (tests/generative_servers.py).
WORKLOAD_PROCESS_NAMES = ("serving.workloads.generative.standin", "transformers serve")
# Ray's own processes, every registered backend's (`BackendPackage.process_names`: a new server is seen as soon as its
# package is registered) and the workloads' test servers.
SERVER_PROCESS_NAMES = (*RAY_PROCESS_NAMES, *(name for package in backend_packages().values()
                                              for name in package.process_names), *WORKLOAD_PROCESS_NAMES)


def marked_processes(variable: str, value: str) -> set[int]:
    """PIDs of the processes whose environment has `variable=value` (this process aside)."""
    marker = f"{variable}={value}".encode()
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


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def server_processes() -> set[int]:
    """PIDs of the server processes (Ray's, every backend's) started by this test session."""
    names = re.compile("|".join(re.escape(name) for name in SERVER_PROCESS_NAMES))
    return {pid for pid in marked_processes(SESSION_VARIABLE, os.environ[SESSION_VARIABLE])
            if names.search(command_line(pid))}


def wait_for_no_new_processes(before: set[int], timeout_s: float = 30) -> set[int]:
    """Wait up to `timeout_s` for the session's server processes started after `before` to end; those left."""
    deadline = time.monotonic() + timeout_s
    while (left := server_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def wait_for_process(pattern: str, before: set[int], timeout_s: float = 60) -> list[int]:
    """Wait until a server process of the session, started after `before`, has a command line matching `pattern`;
    its PIDs (AssertionError when none appeared)."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while not (found := [pid for pid in server_processes() - before if regex.search(command_line(pid))]):
        assert time.monotonic() < deadline, f"no process matching {pattern!r} appeared within {timeout_s} s"
        time.sleep(0.1)
    return found


def wait_until_gone(token: str, timeout_s: float = 30) -> set[int]:
    """Wait up to `timeout_s` for the processes carrying `token` to end; those still running."""
    deadline = time.monotonic() + timeout_s
    while (left := marked_processes(TOKEN_VARIABLE, token)) and time.monotonic() < deadline:
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


def orphan_regions(before: set[str], timeout_s: float = 30) -> set[str]:
    """tierbench's shared-memory regions that appeared since `before` and that no live process maps (a server or
    client left them behind), waited for up to `timeout_s`. Another test worker's live servers map theirs: they are
    not this test's leftovers, though they appeared meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        orphans = unmapped_shm({p.name for p in Path("/dev/shm").glob("tierbench_*")} - before)
        if not orphans or time.monotonic() > deadline:
            return orphans
        time.sleep(1)

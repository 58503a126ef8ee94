"""One `vllm serve` in a work dir of its own: started in its own process group (the API server, its engine core and
workers), ready when /v1/models lists the model, stopped with its whole group: SIGTERM (vLLM shuts its engine down),
then SIGKILL for what is left, waiting until no process of the group holds the GPU any more."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from serving.generation.server import wait_listed
from serving.process import start_process, tail

MAX_LOG_BYTES = 2_000_000
# What a node without internet access needs: vLLM reads the local folder only, and reports no usage stats.
OFFLINE_ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies aside)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # after the name: state, ppid, pgrp
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class VllmServer:
    def __init__(self, work_dir: Path, command: Sequence[str], model: str, base_url: str) -> None:
        self.work_dir = work_dir
        self.command = list(command)
        self.model = model
        self.base_url = base_url  # where it answers, from its own node
        self.log_path = work_dir / "vllm.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> float:
        """Start and wait until it lists the model; the seconds that took. Raises with the log's tail (the group
        stopped) when it exits or `timeout_s` passes."""
        env = {**OFFLINE_ENVIRONMENT, **os.environ}  # a user's own setting wins
        self.process = start_process(self.command, self.log_path, env)
        try:
            return wait_listed(self.base_url, self.model, timeout_s, self.exit_reason, "vLLM")
        except (RuntimeError, TimeoutError) as exc:
            self.stop(10)
            raise RuntimeError(f"{exc}\nvLLM's log ({self.log_path}): ...\n{tail(self.log_path, 4000)}") from None

    def exit_reason(self) -> str | None:
        """Why the server is gone (its exit code); None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        return f"vllm serve exited with code {self.process.returncode}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM the group, wait for all of it, SIGKILL what is left after `timeout_s`; the exit code. Idempotent."""
        if self.process is None:
            return None
        pgid = self.process.pid
        if self.process.poll() is None:
            signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while (self.process.poll() is None or group_alive(pgid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.process.poll() is None or group_alive(pgid):
            signal_group(pgid, signal.SIGKILL)
            self.process.wait(timeout=10)
            kill_deadline = time.monotonic() + 10
            while group_alive(pgid) and time.monotonic() < kill_deadline:
                time.sleep(0.1)
        return self.process.returncode

    def logs(self) -> dict[str, str]:
        return {"vllm.log": tail(self.log_path, MAX_LOG_BYTES)} if self.log_path.exists() else {}

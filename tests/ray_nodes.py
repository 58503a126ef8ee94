"""A real multi-process Ray cluster on this machine, as a user builds one: a head and workers started with the
`ray start` command `runners.node` runs, in a temp folder of their own, on free ports. Each node's processes carry
a marker of their own in their environment, so a test can kill one node (its raylet, as a spot node is taken back)
and end everything it started by pid at the end. Never `ray stop`: it kills every Ray on the machine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from runners import node as node_cli
from tests.processes import TOKEN_VARIABLE, command_line, marked_processes, wait_until_gone

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_SERVE_LOG_TO_STDERR": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_ip() -> str:
    from ray._private.services import get_node_ip_address

    return get_node_ip_address()


class RayNodes:
    """Nodes started with `ray start`; `stop()` ends each one's processes by pid."""

    def __init__(self, extra_env: dict[str, str] | None = None) -> None:
        # Short: Ray's socket paths live under it (a Unix socket path has ~107 characters at most).
        self.temp_dir = tempfile.mkdtemp(prefix="tbray-", dir="/tmp")
        self.port = free_port()
        self.address = f"{node_ip()}:{self.port}"
        self.extra_env = extra_env or {}
        self.markers: dict[str, str] = {}  # node name -> the marker its processes carry

    def start(self, name: str, *node_args: str, extra: tuple[str, ...] = ()) -> str:
        """Start a node (`runners.node` arguments, e.g. `--head`, `--tier a100 --emulated`); its marker."""
        where = ["--head", "--port", str(self.port)] if name == "head" else ["--address", self.address]
        args = node_cli.parse_args([*where, "--random-ports", "--skip-doctor", *node_args])
        cmd = node_cli.ray_start_command(args, args.tier)
        # Ports Ray would otherwise take at fixed defaults, shared with any other Ray on the machine.
        cmd += [f"--temp-dir={self.temp_dir}", "--object-store-memory=83886080",
                f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}", *extra]
        if name == "head":
            cmd += ["--include-dashboard=false"]
        marker = uuid.uuid4().hex
        env = {**os.environ, **RAY_ENV, **self.extra_env, TOKEN_VARIABLE: marker}
        self.markers[name] = marker  # before it starts: a `ray start` that fails or times out is ended by stop()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        return marker

    def pids(self, name: str) -> set[int]:
        return marked_processes(TOKEN_VARIABLE, self.markers[name])

    def raylet_pid(self, name: str) -> int:
        (pid,) = [p for p in self.pids(name) if "/raylet/raylet " in command_line(p) + " "]
        return pid

    def kill_raylet(self, name: str) -> int:
        """SIGKILL the node's raylet, as when its machine is taken away; its pid."""
        pid = self.raylet_pid(name)
        os.kill(pid, signal.SIGKILL)
        return pid

    def end(self, name: str, grace_s: float = 5) -> set[int]:
        """End every process of node `name` by pid: SIGTERM, SIGKILL what is left after `grace_s`; those still
        running. As `ray stop` does, the GCS goes last: a head's raylet told to stop while its GCS is going too
        waits ~15 s for it first (and a lost node's workers may not heed SIGTERM at all)."""
        marker = self.markers.pop(name)
        for last in (False, True):
            targets = {pid for pid in marked_processes(TOKEN_VARIABLE, marker) if _is_gcs(pid) == last}
            _send(signal.SIGTERM, targets)
            deadline = time.monotonic() + grace_s
            while targets & marked_processes(TOKEN_VARIABLE, marker) and time.monotonic() < deadline:
                time.sleep(0.2)
        _send(signal.SIGKILL, marked_processes(TOKEN_VARIABLE, marker))
        return wait_until_gone(marker, 10)

    def stop(self) -> set[int]:
        """End every node, workers first; the pids left (none expected)."""
        left: set[int] = set()
        for name in sorted(self.markers, key=lambda n: n == "head"):
            left |= self.end(name)
        return left

    def wait_for_nodes(self, count: int, timeout_s: float = 60) -> None:
        """Until the head lists `count` live nodes (a joined node registers a moment after `ray start` returns)."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = _live_nodes(self.address)
            if alive >= count:
                return
            assert time.monotonic() < deadline, f"{alive} live nodes, expected {count}"
            time.sleep(0.5)

    def cleanup_dir(self) -> None:
        import shutil

        shutil.rmtree(Path(self.temp_dir), ignore_errors=True)


def _is_gcs(pid: int) -> bool:
    return "/gcs_server " in command_line(pid) + " "


def _send(sig: int, pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # gone meanwhile
            pass


def live_nodes(address: str) -> list[dict]:
    """The live nodes as the head lists them (`ray.nodes()`), read by a short-lived driver of their own."""
    script = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
              "print(json.dumps([n for n in ray.nodes() if n['Alive']]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **RAY_ENV}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _live_nodes(address: str) -> int:
    try:
        return len(live_nodes(address))
    except subprocess.CalledProcessError:  # the head not answering yet
        return 0

"""Child processes that are always stopped: free ports, signal mask, process groups, readiness waits."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the OS hands out now; held open together so the `count` ports are distinct."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def unreachable(host: str, port: int, timeout_s: float) -> OSError | None:
    """Why nothing accepts a TCP connection at host:port (None when something does): a client that would retry an
    absent server for minutes (Ray, MLflow) is asked first."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return exc
    return None


def unmapped_shm(names: Iterable[str]) -> set[str]:
    """The /dev/shm files among `names` that no live process maps (whose processes we may read: all, as root):
    what a killed server left behind, as opposed to a running one's."""
    names = set(names)
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        mapped.update(name for name in names if f"/dev/shm/{name}" in text)
    return names - mapped


def _child_setup() -> None:
    # Ray workers block SIGINT and children inherit the mask: clear it so the server obeys Ctrl-C / SIGINT.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # Die with the process that started us, even if it is SIGKILLed (e.g. a Ray actor being killed).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def outside_ray(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less what Ray put into its worker's environment alone: `OMP_NUM_THREADS` (1 with fractional CPUs),
    which Ray sets in a worker when its node was started without one. A server a host actor starts would inherit
    it, and the same server deployed outside Ray would not: measured on two cores, the FastAPI service served b8
    requests one at a time about 10 % slower with it. A value the node itself was started with (the raylet's) is
    the user's, and stays; so does the worker's when the raylet's environment cannot be read."""
    out = dict(env)
    raylet = out.get("RAY_RAYLET_PID")
    if "OMP_NUM_THREADS" not in out or not raylet:
        return out
    try:
        node_env = Path(f"/proc/{raylet}/environ").read_bytes()
    except OSError:  # the raylet is another user's, or gone: keep what we have
        return out
    if node_env and not any(item.startswith(b"OMP_NUM_THREADS=") for item in node_env.split(b"\0")):
        del out["OMP_NUM_THREADS"]
    return out


def start_process(cmd: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own process group (so its children can be stopped with it), output to `log_path`, with
    the environment a server deployed outside Ray would have (`outside_ray`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            list(cmd),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=outside_ray(os.environ if env is None else env),
            preexec_fn=_child_setup,
            start_new_session=True,
        )


def stop_process_group(process: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM the process group, SIGKILL it after `timeout_s`; returns the exit code."""
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(timeout=10)
    # Children (e.g. Triton's Python backend stubs) may outlive the leader briefly.
    _signal_group(process, signal.SIGKILL)
    return process.returncode


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until(
    ready: Callable[[], bool], timeout_s: float, alive: Callable[[], bool], what: str, interval_s: float = 0.2
) -> float:
    """Poll `ready` until true; fail early if `alive` turns false. Returns the seconds it took."""
    start = time.monotonic()
    while True:
        if not alive():
            raise RuntimeError(f"{what} exited before it was ready")
        try:
            if ready():
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{what} not ready after {timeout_s:.0f} s")
        time.sleep(interval_s)


def tail(path: Path, max_bytes: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""

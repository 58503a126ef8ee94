"""One TorchServe in a work dir of its own: started in its own process group, ready when every model worker is
READY, stopped with its group (the launcher, the Java frontend, the Python workers).

Everything TorchServe writes stays in the work dir, so two servers on one node never meet: logs and metric logs
(LOG_LOCATION, METRICS_LOCATION), the unpacked model and the workers' sockets (TEMP: the frontend's
java.io.tmpdir), the launcher's pid file (TMPDIR). Readiness is the management API's worker status: TorchServe
answers /ping healthy before its workers have loaded the model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from serving.process import start_process, stop_process_group, tail, wait_until
from serving.torchserve.config import Ports, launcher_command, torchserve_args

READY = "READY"
LOG_FILES = ("ts_log.log", "model_log.log", "access_log.log")
MAX_LOG_BYTES = 2_000_000
MODEL_LOG_PREFIX = "MODEL_LOG - "  # what the frontend puts before each line a worker printed
# What TorchServe logs when a worker could not load the model (it retries, with back-off, forever).
LOAD_FAILURES = ("Load model failed", "Backend worker error", "Worker disconnected")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(process: subprocess.Popen) -> bool:
    """Whether a process of the group started as `process` still runs (zombies aside: an orphan's reaper may be
    slow); the leader is reaped as it exits."""
    process.poll()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == process.pid and fields[0] != "Z":  # after the name: state, ppid, pgrp
            return True
    return False


def connect_host(host: str) -> str:
    """Where to reach a server bound to `host` from its own node."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class TorchServeServer:
    def __init__(self, work_dir: Path, model_name: str, host: str, ports: Ports, workers: int) -> None:
        self.work_dir = work_dir
        self.model_name = model_name
        self.host = host
        self.ports = ports
        self.workers = workers
        self.logs_dir = work_dir / "logs"
        self.stdout_path = work_dir / "torchserve.stdout.log"
        self.process: subprocess.Popen | None = None
        self.stopped = False

    @property
    def management_url(self) -> str:
        return f"http://{connect_host(self.host)}:{self.ports.management}"

    @property
    def metrics_url(self) -> str:
        return f"http://{connect_host(self.host)}:{self.ports.metrics}/metrics"

    def environment(self) -> dict[str, str]:
        """This process's environment, everything TorchServe writes pointed into the work dir, and this tierbench
        first on the workers' path (the handler imports `serving.*`)."""
        tmp = self.work_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        source_root = str(Path(__file__).resolve().parents[2])
        python_path = os.pathsep.join(p for p in (source_root, os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "LOG_LOCATION": str(self.logs_dir), "METRICS_LOCATION": str(self.logs_dir),
                "TEMP": str(tmp), "TMPDIR": str(tmp), "PYTHONPATH": python_path}

    def start(self, store: Path, config: Path, log_config: Path, timeout_s: float) -> float:
        """Start and wait until every worker is READY; the seconds that took. Raises with the logs' tails (the
        process group stopped) when it exits, a worker fails to load the model, or `timeout_s` passes."""
        args = torchserve_args(self.model_name, str(store), str(config), str(log_config))
        self.process = start_process(launcher_command(str(self.work_dir), args), self.stdout_path,
                                     self.environment())
        try:
            return wait_until(self.ready, timeout_s, self._starting, "TorchServe", interval_s=0.25)
        except (RuntimeError, TimeoutError) as exc:
            failure = self.load_failure()
            self.stop(10)  # first: the frontend writes out what the workers printed
            what = f"a worker could not load the model: {failure}" if failure else str(exc)
            raise RuntimeError(f"TorchServe serving {self.model_name}: {what}\n{self.failure_detail()}") from None

    def ready(self) -> bool:
        """Every worker of the model READY (the management API's description of the model)."""
        try:
            with urllib.request.urlopen(f"{self.management_url}/models/{self.model_name}", timeout=2) as response:
                described = json.loads(response.read())
        except urllib.error.HTTPError:  # 404 while the model registers
            return False
        statuses = [worker.get("status") for model in described for worker in model.get("workers", [])]
        return len(statuses) >= self.workers and all(status == READY for status in statuses)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _starting(self) -> bool:
        """Still worth waiting for: the process runs and no worker has failed to load the model."""
        return self.alive() and self.load_failure() is None

    def load_failure(self) -> str | None:
        """The first line of TorchServe's log saying a worker could not load the model; None when none does."""
        text = tail(self.logs_dir / "ts_log.log", 200_000)
        return next((line for line in text.splitlines() if any(f in line for f in LOAD_FAILURES)), None)

    def failure_detail(self) -> str:
        """Why a start failed, in TorchServe's words: what the workers printed last (a traceback), the frontend's
        log and the launcher's output."""
        worker = "\n".join(line.partition(MODEL_LOG_PREFIX)[2] or line
                           for line in tail(self.logs_dir / "model_log.log", 6000).splitlines()[1:])
        parts = [(f"workers ({self.logs_dir / 'model_log.log'})", worker),
                 (f"frontend ({self.logs_dir / 'ts_log.log'})", tail(self.logs_dir / "ts_log.log", 2000)),
                 (f"launcher ({self.stdout_path})", tail(self.stdout_path, 1000))]
        return "\n".join(f"{name}: ...\n{text}" for name, text in parts if text.strip()) or "no log written"

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM the group and wait for all of it (the launcher waits for the frontend, which stops its workers),
        SIGKILL what is left after `timeout_s`; the launcher's exit code. Idempotent."""
        if self.process is None:
            return None
        if self.stopped:
            return self.process.returncode
        deadline = time.monotonic() + timeout_s
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
        while _group_alive(self.process) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.stopped = True
        if _group_alive(self.process):
            return stop_process_group(self.process, 1.0)  # SIGKILLs what is left and reaps the launcher
        return self.process.wait()

    def logs(self) -> dict[str, str]:
        """The server's logs by file name, each at most its last MAX_LOG_BYTES."""
        files = {name: self.logs_dir / name for name in LOG_FILES}
        files["torchserve.stdout.log"] = self.stdout_path
        return {name: tail(path, MAX_LOG_BYTES) for name, path in files.items() if path.exists()}

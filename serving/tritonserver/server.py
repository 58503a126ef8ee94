"""One `tritonserver` process: start it on free ports, wait until its models are ready, stop it (always), keep
its log. Every backend that runs a Triton runs it through this (the image classifier's, the streaming generator's)."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from serving.process import free_ports, start_process, stop_process_group, tail, unmapped_shm, wait_until
from serving.tritonserver.installation import TritonBinary

log = logging.getLogger(__name__)
SHM_PREFIX = "tierbench_pb_"  # the Python backend's regions of the servers tierbench starts


@dataclass(frozen=True)
class TritonEndpoints:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


def remove_orphan_regions(min_age_s: float = 600.0) -> None:
    """Remove the Python backend's regions of Triton processes that were killed before `stop` ran (a node's Ray
    workers killed with it, say): 6 MiB each in /dev/shm for as long as the machine runs, unless someone does. Only
    regions older than `min_age_s`: one another server created a moment ago may not be mapped yet."""
    shm = Path("/dev/shm")
    now = time.time()
    old = []
    for path in shm.glob(f"{SHM_PREFIX}*"):
        try:
            if now - path.stat().st_mtime > min_age_s:
                old.append(path.name)
        except OSError:  # removed meanwhile
            continue
    for name in unmapped_shm(old):
        (shm / name).unlink(missing_ok=True)
        log.info("removed %s: a Python-backend region no process maps (its Triton was killed)", name)


# What `tritonserver` prints as it dies: its signal handler's line, then (for an uncaught C++ exception) the C++
# runtime's. The Python backend's known abort under load throws boost::interprocess::lock_exception.
_SIGNAL_LINE = re.compile(r"^Signal \((\d+)\) received\.", re.MULTILINE)
_TERMINATE_LINE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
LOCK_EXCEPTION_DOCS = "docs/troubleshooting.md#triton-aborted-boostinterprocesslock_exception"


def abort_cause(log_text: str) -> str | None:
    """Why a `tritonserver` aborted, from the end of its log ("tritonserver aborted (SIGSEGV, uncaught
    boost::interprocess::lock_exception; see its log) ..."): its last signal and uncaught exception; None when the log
    shows no abort. A trial's reason otherwise says only that the server stopped answering, which reads like a
    network fault."""
    text = log_text[-20_000:]
    signals = [int(n) for n in _SIGNAL_LINE.findall(text)][-1:]
    thrown = _TERMINATE_LINE.findall(text)[-1:]
    if not signals and not thrown:
        return None
    parts = [_signal_name(n) for n in signals] + [f"uncaught {name}" for name in thrown]
    cause = f"tritonserver aborted ({', '.join(parts)}; see its log)"
    if any("boost::interprocess" in name for name in thrown):
        cause += f": the Python backend's known abort under load ({LOCK_EXCEPTION_DOCS})"
    return cause


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class TritonServer:
    """A Triton process serving models from a rendered repository (the classifier first, then e.g. its JPEG
    ensemble)."""

    def __init__(self, installation: TritonBinary, repository: Path, model_names: str | Sequence[str],
                 log_path: Path, host: str = "127.0.0.1", python_shm_mib: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.installation = installation
        self.repository = repository
        self.model_names = [model_names] if isinstance(model_names, str) else list(model_names)
        self.model_name = self.model_names[0]
        self.log_path = log_path
        self.host = host
        self.process: subprocess.Popen | None = None
        self.endpoints: TritonEndpoints | None = None
        # The Python backend's stubs talk to the server through /dev/shm regions it removes only on a clean
        # exit; a known prefix lets `stop` remove them when the exit timeout cut the unload short.
        self.shm_prefix = f"{SHM_PREFIX}{uuid.uuid4().hex[:12]}_"
        self.python_shm_mib = python_shm_mib
        self.env = {**installation.env, **(env or {})}  # the server's, which its Python stubs inherit

    def python_backend_flags(self) -> list[str]:
        """The Python backend's settings, one flag each: its regions' prefix (so `stop` can find them) and, when
        set, the size of the first region and of each growth step."""
        settings = {"shm-region-prefix-name": self.shm_prefix}
        if self.python_shm_mib:
            settings["shm-default-byte-size"] = settings["shm-growth-byte-size"] = str(self.python_shm_mib << 20)
        return [f"--backend-config=python,{key}={value}" for key, value in settings.items()]

    def command(self, endpoints: TritonEndpoints) -> list[str]:
        return [
            str(self.installation.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.installation.backend_directory}",
            *self.python_backend_flags(),
            "--model-control-mode=explicit",
            *(f"--load-model={name}" for name in self.model_names),
            f"--http-address={endpoints.host}",
            f"--http-port={endpoints.http_port}",
            f"--grpc-address={endpoints.host}",
            f"--grpc-port={endpoints.grpc_port}",
            f"--metrics-address={endpoints.host}",
            f"--metrics-port={endpoints.metrics_port}",
            "--allow-metrics=true",
            "--metrics-config=summary_latencies=true",
            "--exit-on-error=true",
            # Shutdown otherwise waits up to 30 s for clients to close their connections.
            "--exit-timeout-secs=3",
            "--strict-readiness=true",
            "--log-verbose=0",
        ]

    def start(self, timeout_s: float) -> TritonEndpoints:
        remove_orphan_regions()
        endpoints = TritonEndpoints(self.host, *free_ports(3, self.host))
        cmd = self.command(endpoints)
        log.info("starting %s", " ".join(cmd))
        self.process = start_process(cmd, self.log_path, env=self.env)
        self.endpoints = endpoints
        try:
            seconds = wait_until(self._model_ready, timeout_s, self.alive, f"tritonserver ({self.model_name})")
        except (RuntimeError, TimeoutError) as exc:
            self.stop(timeout_s=5)
            raise RuntimeError(f"{exc}; last lines of {self.log_path}:\n{tail(self.log_path)}") from exc
        log.info("tritonserver ready in %.1f s at http %s grpc %s", seconds, endpoints.http_url, endpoints.grpc_url)
        return endpoints

    def reload(self, model_name: str, timeout_s: float) -> float:
        """Load `model_name` again from the repository (its config.pbtxt changed): Triton's explicit model control
        swaps in the new instances once they are ready (warm-up included) and keeps serving the others. Seconds it
        took; raises with Triton's reason and the log's tail when the new config does not load."""
        assert self.endpoints is not None and self.alive(), "reload needs a running server"
        url = f"http://{self.endpoints.http_url}/v2/repository/models/{model_name}/load"
        started = time.monotonic()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=timeout_s):
                pass
        except urllib.error.HTTPError as exc:  # Triton answers 400 with its reason
            reason = exc.read().decode(errors="replace")
            raise RuntimeError(f"tritonserver did not reload {model_name}: {reason}; last lines of "
                               f"{self.log_path}:\n{tail(self.log_path)}") from exc
        wait_until(self._model_ready, timeout_s, self.alive, f"tritonserver ({model_name} reloaded)")
        seconds = time.monotonic() - started
        log.info("tritonserver reloaded %s in %.1f s", model_name, seconds)
        return seconds

    def _model_ready(self) -> bool:
        assert self.endpoints is not None
        for name in self.model_names:
            url = f"http://{self.endpoints.http_url}/v2/models/{name}/ready"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status != 200:
                        return False
            except OSError:
                return False
        return True

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 20) -> int | None:
        if self.process is None:
            return None
        code = stop_process_group(self.process, timeout_s)
        for region in Path("/dev/shm").glob(f"{self.shm_prefix}*"):
            region.unlink(missing_ok=True)
        log.info("tritonserver stopped (exit %s)", code)
        return code

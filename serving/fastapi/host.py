"""The Ray actor that owns the FastAPI service's uvicorn process on a tier node (or, outside Ray, whoever calls it):
its config file, the process (own process group, dies with the actor), readiness (every worker warmed up) and log."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

from serving.fastapi.app import CONFIG_VARIABLE, READY_DIR_VARIABLE
from serving.node import current_location
from serving.node import gpu_ids as node_gpu_ids
from serving.paths import REPO_ROOT, scratch_dir
from serving.process import free_ports, start_process, stop_process_group, tail, wait_until

LOG_FILE = "uvicorn.log"


def uvicorn_command(host: str, port: int, workers: int) -> list[str]:
    """How the service is started, here and in the exported deploy files."""
    return [sys.executable, "-m", "uvicorn", "serving.fastapi.app:create_app", "--factory", "--host", host,
            "--port", str(port), "--workers", str(workers), "--no-access-log", "--log-level", "warning"]


class FastApiHost:
    def __init__(self, config: dict[str, Any], host: str, workers: int) -> None:
        self.config = config
        self.host = host
        self.workers = workers
        self.work_dir = scratch_dir(f"fastapi-{config['model']['name']}")
        self.process = None
        self.port: int | None = None

    def where(self) -> dict[str, str]:
        return current_location()

    def start(self, timeout_s: float) -> dict[str, Any]:
        """Start uvicorn and wait until every worker built and warmed up the model; what runs, and how long it took."""
        started = time.monotonic()
        config_path = self.work_dir / "serving_config.json"
        config_path.write_text(json.dumps(self.config))
        ready_dir = self.work_dir / "ready"
        ready_dir.mkdir()
        (self.port,) = free_ports(1, self.host)
        env = {**os.environ, CONFIG_VARIABLE: str(config_path), READY_DIR_VARIABLE: str(ready_dir),
               # The service imports tierbench's modules: the checkout this host runs from.
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self.process = start_process(uvicorn_command(self.host, self.port, self.workers), self.work_dir / LOG_FILE,
                                     env)
        try:
            wait_until(lambda: len(list(ready_dir.iterdir())) >= self.workers, timeout_s,
                       lambda: self.process.poll() is None, "the FastAPI service (uvicorn)", interval_s=0.1)
            wait_until(self._answers, 30, lambda: self.process.poll() is None, "the FastAPI service's port")
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}; uvicorn's log:\n{tail(self.work_dir / LOG_FILE)}") from None
        runner = json.loads(next(ready_dir.iterdir()).read_text())
        import ray

        gpu_ids = (node_gpu_ids(ray.get_runtime_context().get_accelerator_ids().get("GPU", []))
                   if ray.is_initialized() else [])
        return {"port": self.port, "startup_s": time.monotonic() - started, "runner": runner, "gpu_ids": gpu_ids,
                "pid": self.process.pid, **current_location()}

    def _answers(self) -> bool:
        import urllib.request

        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        with urllib.request.urlopen(f"http://{host}:{self.port}/v2/health/ready", timeout=5) as response:
            return response.status == 200

    def stop(self, timeout_s: float) -> dict[str, str]:
        logs = {}
        if self.process is not None:
            stop_process_group(self.process, timeout_s)
            self.process = None
            logs[LOG_FILE] = tail(self.work_dir / LOG_FILE, 5_000_000)
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

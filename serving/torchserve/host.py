"""The Ray actor that owns a TorchServe on a tier node (`TorchServeBackend` wraps this plain class with `ray.remote`,
as the Triton backend does its host; tests host it directly, outside Ray).

Everything node-local happens here, in a fresh work dir: the handler and its JSON archived into a .mar with
torch-model-archiver, config.properties on free ports, the server process, its logs, its metrics endpoint (which
listens on the node's loopback, so counters are scraped here). The model's file (if any) is the copy staged on this
node. The actor is a plain (threaded-off) actor so the process is started from the worker's main thread, which the
launcher's parent-death signal is tied to.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from dataclasses import asdict
from importlib.metadata import version
from typing import Any

from serving.node import current_location
from serving.node import gpu_ids as node_gpu_ids
from serving.paths import scratch_dir
from serving.torchserve import config as ts_config
from serving.torchserve.config import Ports, TorchServeVariant
from serving.torchserve.server import TorchServeServer
from serving.torchserve_metrics import HANDLER_COUNTERS, scrape

ARCHIVE_TIMEOUT_S = 120.0


class TorchServeHost:
    def __init__(self, model: dict[str, Any], variant: TorchServeVariant, host: str) -> None:
        self.model = model  # the model config, resolved to plain values
        self.name = str(model["name"])
        self.variant = variant
        self.host = host
        self.work_dir = scratch_dir(f"torchserve-{self.name}")
        self.server: TorchServeServer | None = None

    def where(self) -> dict[str, str]:
        """The Ray node and host this actor (and so its TorchServe) runs on."""
        return current_location()

    def render(self, ports: Ports) -> dict[str, str]:
        """Write what the server starts from into the work dir; the files by name (the handler's JSON,
        config.properties, the metrics config, the log config)."""
        reports = self.work_dir / "reports"
        reports.mkdir(exist_ok=True)
        handler_json = json.dumps(ts_config.handler_config(self.model, self.variant, str(reports)), indent=2)
        files = {
            ts_config.HANDLER_CONFIG: handler_json,
            "config.properties": ts_config.properties(self.name, self.model, self.variant, self.host, ports,
                                                      str(self.work_dir / "store"),
                                                      str(self.work_dir / "metrics.yaml")),
            "metrics.yaml": ts_config.metrics_yaml(HANDLER_COUNTERS),
            "log4j2.xml": ts_config.LOG4J2,
        }
        for name, text in files.items():
            (self.work_dir / name).write_text(text)
        shutil.copy(ts_config.HANDLER_SOURCE, self.work_dir / ts_config.HANDLER_FILE)
        return files

    def archive(self) -> float:
        """Build `<model>.mar` into the work dir's store with torch-model-archiver; the seconds it took."""
        started = time.monotonic()
        store = self.work_dir / "store"
        store.mkdir(exist_ok=True)
        args = ts_config.archiver_args(self.name, str(self.work_dir / ts_config.HANDLER_FILE),
                                       [str(self.work_dir / ts_config.HANDLER_CONFIG)], str(store))
        done = subprocess.run(ts_config.archiver_command(args), capture_output=True, text=True,
                              timeout=ARCHIVE_TIMEOUT_S, cwd=self.work_dir)
        if done.returncode != 0 or not (store / f"{self.name}.mar").is_file():
            raise RuntimeError(f"torch-model-archiver failed (exit {done.returncode}): "
                               f"{(done.stdout + done.stderr)[-3000:]}")
        return time.monotonic() - started

    def start(self, timeout_s: float) -> dict[str, Any]:
        """Archive, configure, start and wait until every worker is READY (warm-up included); what the backend
        learns of it. Raises with TorchServe's own words, nothing left running, when it does not get there."""
        import ray

        started = time.monotonic()
        gpu_ids: list[int | str] = []
        node_id = None
        if ray.is_initialized():  # outside Ray (a test hosting the server) there is no placement to ask about
            context = ray.get_runtime_context()
            gpu_ids = node_gpu_ids(context.get_accelerator_ids().get("GPU", []))
            node_id = context.get_node_id()
        ports = Ports.free(self.host)
        files = self.render(ports)
        archive_s = self.archive()
        self.server = TorchServeServer(self.work_dir, self.name, self.host, ports, self.variant.workers)
        ready_s = self.server.start(self.work_dir / "store", self.work_dir / "config.properties",
                                    self.work_dir / "log4j2.xml", max(1.0, timeout_s - (time.monotonic() - started)))
        workers = self.worker_reports()
        return {
            "ports": asdict(ports),
            "server_version": version("torchserve"),
            "archiver_version": version("torch-model-archiver"),
            "startup_s": time.monotonic() - started,
            "ready_s": ready_s,
            "archive_s": archive_s,
            "workers": workers,
            "device": workers[0]["device"] if workers else "",
            "configs": files,
            "launcher_pid": self.server.process.pid if self.server.process else None,
            "node_id": node_id,
            "gpu_ids": gpu_ids,
            "hostname": socket.gethostname(),
        }

    def worker_reports(self) -> list[dict[str, Any]]:
        """What each worker's handler reported after its warm-up (device, dtype, warm-up seconds, threads)."""
        return [json.loads(path.read_text()) for path in sorted((self.work_dir / "reports").glob("worker-*.json"))]

    def stop(self, timeout_s: float) -> dict[str, str]:
        """Stop the server (idempotent); its logs by file name. The work dir goes with it."""
        logs: dict[str, str] = {}
        if self.server is not None:
            server, self.server = self.server, None
            server.stop(timeout_s)
            logs = server.logs()
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def counters(self) -> dict[str, float]:
        assert self.server is not None, "counters need a started server"
        return scrape(self.server.metrics_url, self.name)

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

"""The Ray actor that owns a `vllm serve` on a tier node (`VllmBackend` wraps this plain class with `ray.remote`;
tests host it directly, outside Ray). It writes the model's folder on its node where the model is an architecture
(`serving.workloads.generative.model_folder`), starts the server from its main thread (the parent-death signal of
`serving.process` is tied to it: a killed actor takes its server along), and scrapes the server's metrics, which
listen where the server does."""

from __future__ import annotations

import socket
import time
from typing import Any

from serving.node import current_location
from serving.node import gpu_ids as node_gpu_ids
from serving.paths import scratch_dir
from serving.process import free_ports
from serving.prometheus import read
from serving.vllm import command as vllm_command
from serving.vllm.server import VllmServer
from serving.vllm_facts import VllmFacts
from serving.vllm_metrics import counters
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.model_folder import model_folder


def connect_host(host: str) -> str:
    """Where to reach a server bound to `host` from its own node."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class VllmHost:
    def __init__(self, model: dict[str, Any], engine_args: dict[str, Any], host: str) -> None:
        self.model = LanguageModelConfig(**model)
        self.engine_args = engine_args
        self.host = host
        self.work_dir = scratch_dir(f"vllm-{self.model.name.replace('/', '-')}")
        self.server: VllmServer | None = None

    def where(self) -> dict[str, str]:
        return current_location()

    def start(self, timeout_s: float) -> dict[str, Any]:
        """Write the model's folder (an architecture), start the server and wait until it lists the model; what the
        backend learns of it. Raises with vLLM's log, nothing left running, when it does not get there."""
        import ray

        started = time.monotonic()
        facts = VllmFacts.probe()
        if facts.problem:
            raise RuntimeError(facts.problem)
        gpu_ids: list[int | str] = []
        node_id = None
        if ray.is_initialized():
            context = ray.get_runtime_context()
            gpu_ids = node_gpu_ids(context.get_accelerator_ids().get("GPU", []))
            node_id = context.get_node_id()
        folder = str(model_folder(self.model))
        port = free_ports(1, self.host)[0]
        command = vllm_command.serve_command(facts.command, folder, self.model.name, self.host, port,
                                             self.engine_args)
        base_url = f"http://{connect_host(self.host)}:{port}"
        self.server = VllmServer(self.work_dir, command, self.model.name, base_url)
        ready_s = self.server.start(max(1.0, timeout_s - (time.monotonic() - started)))
        return {"port": port, "command": command, "folder": folder, "version": facts.version,
                "startup_s": time.monotonic() - started, "ready_s": ready_s, "node_id": node_id, "gpu_ids": gpu_ids,
                "hostname": socket.gethostname(),
                "launcher_pid": self.server.process.pid if self.server.process else None}

    def stop(self, timeout_s: float) -> dict[str, str]:
        """Stop the server and every process of its group (idempotent); its log. The work dir goes with it."""
        import shutil

        logs: dict[str, str] = {}
        if self.server is not None:
            server, self.server = self.server, None
            server.stop(timeout_s)
            logs = server.logs()
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def counters(self) -> dict[str, float]:
        assert self.server is not None, "counters need a started server"
        return counters(read(f"{self.server.base_url}/metrics"), self.model.name)

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

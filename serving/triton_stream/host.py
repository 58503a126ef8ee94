"""The Ray actor that owns a streaming `tritonserver` on the tier's node, and with it the Python-backend stub
processes it starts: the model's folder resolved there (an architecture's written on first use), the repository
rendered, the process started, stopped and its log kept. The server dies with the actor (parent-death signal), so a
killed actor or an interrupted sweep leaves nothing behind; a server that fails to start is stopped before the
error is raised."""

from __future__ import annotations

import logging
import shutil
import socket
import time
from dataclasses import asdict
from typing import Any

from serving.node import current_location
from serving.node import gpu_ids as node_gpu_ids
from serving.paths import scratch_dir
from serving.triton_stream.repository import StreamVariant, render
from serving.tritonserver.installation import find_binary, native_on_path, python_first_on_path
from serving.tritonserver.server import TritonServer
from serving.workloads.generative.model import LanguageModelConfig

log = logging.getLogger(__name__)


class TritonStreamHost:
    def __init__(self, model: LanguageModelConfig, served_name: str, options: dict[str, Any], preference: str,
                 host: str) -> None:
        """`options`: StreamVariant's fields but the model's (resolved on this node)."""
        self.model = model
        self.served_name = served_name
        self.options = options
        self.preference = preference
        self.host = host
        self.work_dir = scratch_dir(f"triton-stream-{served_name}")
        self.server: TritonServer | None = None

    def where(self) -> dict[str, str]:
        """The Ray node and host this actor (and so its tritonserver) runs on."""
        return current_location()

    def start(self, timeout_s: float) -> dict[str, Any]:
        import ray

        from serving.workloads.generative.model_folder import model_folder, random_weights

        started = time.monotonic()
        gpu_ids: list[int | str] = []
        node_id = None
        if ray.is_initialized():  # outside Ray (a test hosting the server itself) there is no placement to ask about
            context = ray.get_runtime_context()
            gpu_ids = node_gpu_ids(context.get_accelerator_ids().get("GPU", []))
            node_id = context.get_node_id()
        native = native_on_path() and self.preference in ("auto", "native")
        binary = find_binary(self.preference)
        variant = StreamVariant(model_folder=str(model_folder(self.model)), random_weights=random_weights(self.model),
                                seed=int(self.model.seed), **self.options)
        repository = self.work_dir / "repository"
        rendered = render(repository, self.served_name, variant)
        # The stub runs the first python3 on PATH: this one, whose torch and transformers the model imports.
        env = {"PATH": python_first_on_path(binary.env)}
        self.server = TritonServer(binary, repository, [self.served_name], self.work_dir / "tritonserver.log",
                                   host=self.host, env=env)
        endpoints = self.server.start(timeout_s)  # stops the process itself when it does not get ready
        return {"endpoints": asdict(endpoints), "server_mode": "triton_native" if native else "triton_python_backend",
                "rendered": rendered, "model_folder": variant.model_folder, "random_weights": variant.random_weights,
                "startup_s": time.monotonic() - started, "node_id": node_id, "gpu_ids": gpu_ids,
                "hostname": socket.gethostname(),
                "pid": self.server.process.pid if self.server.process is not None else None}

    def stop(self, timeout_s: float) -> dict[str, str]:
        logs = {}
        if self.server is not None:
            self.server.stop(timeout_s)
            logs["tritonserver.log"] = self.server.log_path.read_text(errors="replace")[-5_000_000:]
            self.server = None
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def counters(self) -> dict[str, float]:
        """Triton's cumulative counters for the model (its metrics port listens on this node's loopback)."""
        from serving.oip.triton_metrics import scrape

        assert self.server is not None and self.server.endpoints is not None
        return scrape(self.server.endpoints.metrics_url, self.served_name)

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

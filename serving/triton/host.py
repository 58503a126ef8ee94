"""The Ray actor that owns a `tritonserver` process on a tier node.

Everything node-local happens here: the ONNX export (on demand), the rendered repository, the process and
its log. The actor is a plain (threaded-off) actor so the process is started from the worker's main thread,
which the child's parent-death signal is tied to.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from serving.export import ensure_onnx
from serving.triton.ensemble import render_jpeg_ensemble
from serving.triton.installation import find_installation
from serving.triton.repository import TritonVariant, read_config, render_repository
from serving.triton.server import TritonServer

log = logging.getLogger(__name__)
MAX_DEFAULT_PREPROCESS_INSTANCES = 8


def _node_model_repository(preferred: str) -> Path:
    """The project's `model_repository/` when this node has it (same machine), else a node-local cache."""
    path = Path(preferred)
    if path.is_dir():
        return path
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tierbench" / "model_repository"


class TritonServerHost:
    def __init__(self, model: dict[str, Any], config_text: str, variant: dict[str, Any], preference: str,
                 host: str, model_repository: str, preprocess_instances: int | None = None,
                 jpeg_ensemble: bool = True) -> None:
        self.model = OmegaConf.create(model)
        self.config_text = config_text
        self.variant_settings = variant
        # JPEG decoding runs one request per Python-backend instance: by default one per core of this node (up
        # to MAX_DEFAULT_PREPROCESS_INSTANCES processes).
        self.preprocess_instances = preprocess_instances or min(os.cpu_count() or 1, MAX_DEFAULT_PREPROCESS_INSTANCES)
        self.jpeg_ensemble = jpeg_ensemble
        self.preference = preference
        self.host = host
        self.model_repository = model_repository
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"tierbench-triton-{self.model.name}-"))
        self.server: TritonServer | None = None

    def start(self, timeout_s: float) -> dict[str, Any]:
        started = time.monotonic()
        export = ensure_onnx(self.model, _node_model_repository(self.model_repository))
        installation = find_installation(self.preference)
        variant = TritonVariant(server_kind=installation.kind, **self.variant_settings)
        repository = render_repository(self.config_text, Path(export.onnx_path), self.work_dir / "repository",
                                       variant)
        models = [self.model.name]
        if self.jpeg_ensemble:  # JPEG input: the preprocess model and the ensemble chaining it to the classifier
            classifier = read_config(repository / self.model.name / "config.pbtxt")
            models += render_jpeg_ensemble(classifier, repository, self.preprocess_instances)
        self.server = TritonServer(installation, repository, models, self.work_dir / "tritonserver.log",
                                   host=self.host)
        endpoints = self.server.start(timeout_s)
        configs = {"config.pbtxt" if name == self.model.name else f"{name}.config.pbtxt":
                   (repository / name / "config.pbtxt").read_text() for name in models}
        return {
            "endpoints": asdict(endpoints),
            "server_mode": installation.server_mode,
            "export": asdict(export),
            "startup_s": time.monotonic() - started,
            "preprocess_instances": self.preprocess_instances if self.jpeg_ensemble else 0,
            "config_pbtxt": configs["config.pbtxt"],
            "configs": configs,
        }

    def stop(self, timeout_s: float) -> dict[str, str]:
        logs = {}
        if self.server is not None:
            self.server.stop(timeout_s)
            logs["tritonserver.log"] = self.server.log_path.read_text(errors="replace")[-5_000_000:]
            self.server = None
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

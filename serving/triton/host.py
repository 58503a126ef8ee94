"""The Ray actor that owns a `tritonserver` process on a tier node.

Everything node-local happens here: the ONNX export (on demand; an ONNX model is served as is), the rendered
repository, the process and its log. The model's file (if any) is the copy staged on this node. The actor is a
plain (threaded-off) actor so the process is started from the worker's main thread, which the child's
parent-death signal is tied to.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from serving.export import ExportReport, ensure_onnx
from serving.model_config import ModelConfig
from serving.models import model_file, output_dims, preprocessing
from serving.node import current_location
from serving.node import gpu_ids as node_gpu_ids
from serving.paths import node_model_repository, scratch_dir
from serving.triton import backend_counters
from serving.triton.accelerators import cache_status, engine_cache_dir, engine_cache_key, engine_files
from serving.triton.ensemble import render_jpeg_ensemble
from serving.triton.installation import TritonInstallation, find_installation
from serving.triton.quantize import served_onnx
from serving.triton.repository import TritonVariant, classifier_config, read_config, render_repository
from serving.triton.server import TritonServer
from serving.workloads.image.corpus import InputSource

log = logging.getLogger(__name__)
MAX_DEFAULT_PREPROCESS_INSTANCES = 8


@contextmanager
def _cache_lock(cache_dir: Path | None) -> Iterator[None]:
    """Hold the engine cache folder while a server builds or loads from it; nothing to hold without a cache."""
    if cache_dir is None:
        yield
        return
    with open(cache_dir / ".tierbench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _gpu_name(gpu_ids: list[int | str]) -> str:
    """The name of the GPU this actor was given (the node's first GPU when Ray gave none; the MIG slice's where Ray
    gave a slice's UUID)."""
    from serving.node import nvml_gpus

    gpus = nvml_gpus()
    names = gpus.names
    if not names:
        return "cpu"
    first = gpu_ids[0] if gpu_ids else None
    if isinstance(first, str):
        return next((d.name for d in gpus.mig_devices if d.uuid and d.uuid.startswith(first)), gpus.device_names[0])
    if first is None:
        return gpus.device_names[0]
    return names[first] if first < len(names) else names[0]


class TritonServerHost:
    def __init__(self, model: ModelConfig, variant: TritonVariant, preference: str,
                 host: str, model_repository: str, preprocess_instances: int | None = None,
                 jpeg_ensemble: bool = True) -> None:
        self.model = model
        self.variant = variant
        # JPEG decoding runs one request per Python-backend instance: by default one per core of this node (up
        # to MAX_DEFAULT_PREPROCESS_INSTANCES processes).
        self.preprocess_instances = preprocess_instances or min(os.cpu_count() or 1, MAX_DEFAULT_PREPROCESS_INSTANCES)
        self.jpeg_ensemble = jpeg_ensemble
        self.preference = preference
        self.host = host
        self.model_repository = model_repository
        self.work_dir = scratch_dir(f"triton-{self.model.name}")
        self.counters_dir = self.work_dir / "backend_counters"  # the Python model's (serving.triton.backend_counters)
        self.server: TritonServer | None = None
        # Set by `start`, kept for `reload`: what the server serves and where.
        self.export: ExportReport | None = None
        self.onnx_path: Path | None = None  # what the classifier serves: the export, or its INT8 or FP16 file
        self.installation: TritonInstallation | None = None
        self.canonical: mc.ModelConfig | None = None
        self.gpu_ids: list[int | str] = []
        self.node_id: str | None = None

    def where(self) -> dict[str, str]:
        """The Ray node and host this actor (and so its tritonserver) runs on."""
        return current_location()

    def start(self, timeout_s: float) -> dict[str, Any]:
        import ray

        started = time.monotonic()
        self.export = ensure_onnx(self.model, node_model_repository(self.model_repository))
        self.onnx_path = Path(self.export.onnx_path)
        self.installation = find_installation(self.preference)
        # Outside Ray (e.g. a test hosting the server itself) there is no placement to ask about: asking would
        # start a Ray.
        if ray.is_initialized():
            context = ray.get_runtime_context()
            self.gpu_ids = node_gpu_ids(context.get_accelerator_ids().get("GPU", []))
            self.node_id = context.get_node_id()
        self.canonical = classifier_config(self.model.name, self.onnx_path, self.model.max_batch_size,
                                           list(self.model.input_shape), list(output_dims(self.model)))
        self.onnx_path = served_onnx(self.onnx_path, self.variant.precision, self.variant.accelerator == "tensorrt",
                                     self.canonical.input[0].name, preprocessing(self.model),
                                     self.variant.calibration or InputSource(), self.variant.calibration_images)
        cache_dir = self._render()
        repository = self.work_dir / "repository"
        models = [self.model.name]
        if self.jpeg_ensemble:  # JPEG input: the preprocess model and the ensemble chaining it to the classifier
            classifier = read_config(repository / self.model.name / "config.pbtxt")
            models += render_jpeg_ensemble(classifier, repository, self.preprocess_instances,
                                           preprocessing(self.model))
        self.counters_dir.mkdir(parents=True, exist_ok=True)
        self.server = TritonServer(self.installation, repository, models, self.work_dir / "tritonserver.log",
                                   host=self.host, python_shm_mib=self.variant.python_shm_mib,
                                   env={backend_counters.ENV: str(self.counters_dir)})
        with _cache_lock(cache_dir):  # one engine build per cache folder at a time (several tiers, one node)
            before = engine_files(cache_dir) if cache_dir else {}
            server_started = time.monotonic()
            self.server.start(timeout_s)  # ready only after the warm-up requests ran (model_warmup)
            ready_s = time.monotonic() - server_started
            after = engine_files(cache_dir) if cache_dir else {}
        return self._info(started, ready_s, cache_dir, before, after, reloaded=False)

    def reload(self, variant: TritonVariant, timeout_s: float) -> dict[str, Any]:
        """Serve the classifier with other settings (`TritonSettings.reloadable`) from the running server: its
        `config.pbtxt` rendered again and that one model reloaded (explicit model control); the process, its ports,
        the JPEG preprocessing and ensemble stay. What `start` returns, `ready_s` being the reload."""
        assert self.server is not None, "reload needs a started server"
        started = time.monotonic()
        self.variant = variant
        cache_dir = self._render()
        with _cache_lock(cache_dir):
            before = engine_files(cache_dir) if cache_dir else {}
            self.server.reload(self.model.name, timeout_s)  # ready only after the new config's warm-up ran
            ready_s = time.monotonic() - started
            after = engine_files(cache_dir) if cache_dir else {}
        return self._info(started, ready_s, cache_dir, before, after, reloaded=True)

    def _render(self) -> Path | None:
        """Render the classifier's folder of the repository for `variant`; its TensorRT engine cache folder (None
        without one), resolved here, on the server's node."""
        assert self.export is not None and self.installation is not None and self.canonical is not None
        variant, cache_dir = self.variant, None
        if variant.accelerator == "tensorrt" and variant.engine_cache:
            # An INT8 engine is built from the quantised file, whose name carries its calibration's key.
            served = self.export.fingerprint[:8] + (self.onnx_path.stem.rsplit("-", 1)[-1] if variant.int8 else "")
            key = engine_cache_key(self.installation.runtime_tag(), variant.precision,
                                   variant.trt_profile or (1, 1, int(self.model.max_batch_size)), served)
            cache_dir = engine_cache_dir(variant.engine_cache_root, self.model.name, _gpu_name(self.gpu_ids), key)
            cache_dir.mkdir(parents=True, exist_ok=True)
        render_repository(self.canonical, self.onnx_path, self.work_dir / "repository",
                          replace(variant, engine_cache_dir=str(cache_dir) if cache_dir else None), self.installation)
        return cache_dir

    def _info(self, started: float, ready_s: float, cache_dir: Path | None, before: dict[str, Any],
              after: dict[str, Any], reloaded: bool) -> dict[str, Any]:
        """What the backend learns of a start or reload: endpoints, the rendered configs, where it runs."""
        assert self.server is not None and self.server.endpoints is not None
        repository = self.server.repository
        configs = {"config.pbtxt" if name == self.model.name else f"{name}.config.pbtxt":
                   (repository / name / "config.pbtxt").read_text() for name in self.server.model_names}
        info: dict[str, Any] = {
            "endpoints": asdict(self.server.endpoints),
            "server_mode": self.installation.server_mode,
            "export": asdict(self.export),
            "model_file": model_file(self.model) or "",  # the copy staged on this node (serving.model_files)
            "startup_s": time.monotonic() - started,
            "ready_s": ready_s,
            "reloaded": reloaded,
            "preprocess_instances": self.preprocess_instances if self.jpeg_ensemble else 0,
            "config_pbtxt": configs["config.pbtxt"],
            "configs": configs,
            "node_id": self.node_id,
            "gpu_ids": self.gpu_ids,
            "gpu_name": _gpu_name(self.gpu_ids),
            "hostname": socket.gethostname(),
            "pid": self.server.process.pid if self.server.process is not None else None,
        }
        if cache_dir is not None:
            info["engine_cache"] = {"dir": str(cache_dir), "status": cache_status(before, after),
                                    "files": len(after)}
            log.info("TensorRT engine cache %s: %s (%d engine files)", cache_dir, info["engine_cache"]["status"],
                     len(after))
        return info

    def stop(self, timeout_s: float) -> dict[str, str]:
        logs = {}
        if self.server is not None:
            self.server.stop(timeout_s)
            logs["tritonserver.log"] = self.server.log_path.read_text(errors="replace")[-5_000_000:]
            self.server = None
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return logs

    def counters(self) -> dict[str, float]:
        from serving.oip.triton_metrics import scrape

        assert self.server is not None and self.server.endpoints is not None
        return {**scrape(self.server.endpoints.metrics_url, self.model.name),
                **backend_counters.read(self.counters_dir, self.model.name)}

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

"""The user's model file on the tier nodes: shipped through Ray's object store, staged in each node's cache.

A real cluster shares no filesystem: the driver reads the file once (`ship`), puts its bytes in the object store,
and a task on the tier node (`ShippedFile.staged_on`) writes them to `<cache>/models/<the sha256's first 32 hex
digits>/<file name>`, which the servers load. The copy is content-addressed, so a changed file is a new copy and an
unchanged one is written once per node.
Files over `model.max_file_mb` are refused before anything starts (experiments.config.model_check).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.model_config import ModelConfig
from serving.models import model_file
from serving.paths import cache_root

log = logging.getLogger(__name__)


def absolute_model_path(path: str) -> Path:
    """A path from the config, relative to where the command was run (Hydra's original working directory)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(path) if HydraConfig.initialized() else os.path.abspath(path))


_SHA256_BY_PATH: dict[str, str] = {}


def file_sha256(path: str) -> str:
    """The file's SHA-256, read once per process (`ship` records it): trial keys carry it, also after the file was
    moved away."""
    if path not in _SHA256_BY_PATH:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        _SHA256_BY_PATH[path] = digest.hexdigest()
    return _SHA256_BY_PATH[path]


def model_identity(model_cfg: ModelConfig) -> dict[str, str]:
    """What a trial's key needs beyond the model's name: the file's content (empty for a seeded factory model)."""
    path = model_file(model_cfg)
    return {"model_file_sha256": file_sha256(str(absolute_model_path(path)))} if path else {}


@dataclass(frozen=True)
class ShippedFile:
    """A model file in Ray's object store, and the copy of it staged for the driver's own use (the reference)."""

    ref: Any  # ray.ObjectRef of the file's bytes
    sha256: str
    filename: str
    size: int
    origin: str  # the driver's path
    driver_copy: str

    def staged_on(self, ray_options: dict[str, Any], timeout_s: float) -> str:
        """Stage the file on the node `ray_options` place tasks on; its path there."""
        import ray

        task = ray.remote(_stage_task).options(num_cpus=0, **ray_options)
        return ray.get(task.remote(self.ref, self.sha256, self.filename), timeout=timeout_s)


def ship(model_cfg: ModelConfig) -> ShippedFile | None:
    """Put the model's file in the object store (None for a seeded factory model, which has no file)."""
    import ray

    path = model_file(model_cfg)
    if not path:
        return None
    origin = absolute_model_path(path)
    data = origin.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    _SHA256_BY_PATH[str(origin)] = sha
    try:
        ref = ray.put(data)
    except ray.exceptions.ObjectStoreFullError as exc:
        raise RuntimeError(f"model {model_cfg.name}: {origin} ({len(data) / 1e6:.0f} MB) does not fit Ray's object "
                           "store on this machine: start the cluster's nodes with a larger --object-store-memory "
                           f"(cluster.object_store_memory for the clusters tierbench starts) ({exc})") from None
    driver_copy = stage(data, sha, origin.name)
    log.info("model %s: shipped %s (%.1f MB, sha256 %s) through Ray's object store; the tier nodes load their "
             "own copy of it", model_cfg.name, origin, len(data) / 1e6, sha[:12])
    return ShippedFile(ref, sha, origin.name, len(data), str(origin), driver_copy)


def stage(data: bytes, sha256: str, filename: str) -> str:
    """Write `data` to this machine's model cache (once: content-addressed); its path."""
    folder = cache_root() / "models" / sha256[:32]
    target = folder / filename
    if target.is_file() and target.stat().st_size == len(data):
        return str(target)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{filename}.", delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, target)  # atomic: a concurrent reader sees the whole file or none
    return str(target)


def _stage_task(data: bytes, sha256: str, filename: str) -> str:
    return stage(data, sha256, filename)


"""Where tierbench keeps things on disk: the checkout (config tree, model repository) and each node's cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = REPO_ROOT / "model_repository"


def cache_root() -> Path:
    """Node-local caches (TensorRT engines, the bundled Triton's runnable copy, a model repository for nodes
    without this checkout): `$XDG_CACHE_HOME/tierbench`, by default `~/.cache/tierbench`."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tierbench"


def node_model_repository(preferred: str | Path = MODEL_REPOSITORY) -> Path:
    """The project's `model_repository/` when this node has it (same machine), else a node-local cache."""
    path = Path(preferred)
    if path.is_dir():
        return path
    return cache_root() / "model_repository"

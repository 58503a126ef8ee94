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

"""Where tierbench keeps things on disk: the checkout (config tree, model repository) and each node's cache."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = REPO_ROOT / "model_repository"


def cache_root() -> Path:
    """Node-local caches (TensorRT engines, the bundled Triton's runnable copy, the compiled load engine, the input
    corpus, the ceiling's timings, staged model files, a model repository for nodes without this checkout):
    `$TIERBENCH_CACHE`, else `$XDG_CACHE_HOME/tierbench`, else `~/.cache/tierbench`."""
    if root := os.environ.get("TIERBENCH_CACHE"):
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tierbench"


def node_model_repository(preferred: str | Path = MODEL_REPOSITORY) -> Path:
    """The project's `model_repository/` when this node has it (same machine), else a node-local cache."""
    path = Path(preferred)
    if path.is_dir():
        return path
    return cache_root() / "model_repository"


SCRATCH = "tierbench-"
# `tierbench-<kind>.<host>.p<pid>.<random>`: whose folder it is, so that another process can tell it was left behind
_OWNER = re.compile(r"\.(?P<host>[^.]+)\.p(?P<pid>\d+)\.[^.]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def scratch_dir(kind: str) -> Path:
    """A new folder in the system's temp dir for one server's or load engine's files. Its owner removes it when it
    stops; a folder whose process died first (an actor killed, its node lost) is removed by the next one made on
    this host, which can tell by the host name and pid in its name."""
    remove_orphaned_scratch()
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{kind}.{_host()}.p{os.getpid()}."))


def remove_orphaned_scratch() -> list[Path]:
    """Scratch folders of this host whose process is gone (those of other hosts sharing the temp dir are theirs)."""
    removed, host = [], _host()
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH}*.p*.*"):
        owner = _OWNER.search(path.name)
        if owner is None or owner["host"] != host or not path.is_dir() or _alive(int(owner["pid"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True

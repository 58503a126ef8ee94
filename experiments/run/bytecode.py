"""Say when every process of a sweep compiles the libraries it imports, and how to stop that.

README's commands compile the bytecode at install (`uv pip install --compile-bytecode`). An environment installed
without it (`uv pip install` alone, `pip install --no-compile`) counts on Python to cache the bytecode it compiles on
first import. Where PYTHONDONTWRITEBYTECODE is set (many Docker images and CI runners) nothing is
cached: the driver, Ray's agents, the Serve replica and every client actor compile torch, Ray and MLflow again in
every sweep, a minute of CPU or more on a small machine, some of it while servers start. One `compileall` of the
environment ends it; the sweep says so once, at its start.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Large libraries every sweep imports, in the driver and in Ray's workers.
HEAVY = ("torch", "ray", "mlflow")


def _uncached(package: str) -> bool:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    return not Path(importlib.util.cache_from_source(spec.origin)).exists()


def uncached_bytecode_hint() -> str | None:
    """A one-line hint when Python writes no bytecode and a heavy library has none cached; else None."""
    if not sys.dont_write_bytecode:
        return None
    missing = [p for p in HEAVY if _uncached(p)]
    if not missing:
        return None
    site = Path(importlib.util.find_spec(missing[0]).origin).parents[1]
    return (f"PYTHONDONTWRITEBYTECODE is set and {', '.join(missing)} were installed without bytecode (uv "
            f"without --compile-bytecode, pip --no-compile): every process of every sweep compiles them again. "
            f"Compile them once: python -m compileall -q -j 0 {site}  (docs/troubleshooting.md#no-cached-bytecode)")

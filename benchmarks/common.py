"""Shared by the benchmark scripts: compose a config, reach a local Ray, print a table, write JSON."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from serving.paths import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"


@contextmanager
def local_tier(cfg: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A private local Ray (stopped afterwards), this node's description and the `local` tier's placement."""
    import ray

    from experiments.cluster.connection import ray_cluster
    from experiments.cluster.tiers import placement_options
    from serving.probe import describe_node

    with ray_cluster(cfg.cluster, "local"):
        options = placement_options("local")
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote())
        yield node, options


def machine() -> dict[str, Any]:
    from serving.node import cpu_model

    return {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(), "cores": os.cpu_count(),
            "python": platform.python_version(), "load_average_1m": os.getloadavg()[0]}


def report(name: str, columns: list[str], rows: list[dict[str, Any]], extra: dict[str, Any]) -> Path:
    """Print a Markdown table and write `benchmarks/results/<name>.json`."""
    def cell(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **extra, "rows": rows}, indent=2, default=str))
    print(f"\nwritten: {path.relative_to(REPO_ROOT)}")
    return path

"""Shared by the benchmark scripts: compose a config, reach a local Ray, print a table, write JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
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


def run_sweep(work: Path, sweep_id: str, overrides: list[str], timeout_s: float = 1800) -> tuple[int, list[dict]]:
    """One real sweep (`python -m runners.sweep`, its own local Ray, stopped after) with its results and MLflow
    under `work` and its log in `work/<sweep_id>.log`: its exit status and its trials' records, each with the
    folder it was read from (`trial_dir`: latencies.csv beside it)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "RAY_AUTH_MODE": "disabled"}
    command = [sys.executable, "-m", "runners.sweep", f"results_dir={work / 'runs'}", f"sweep_id={sweep_id}",
               "quiet=true", "report=false", *overrides]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT)
    (work / f"{sweep_id}.log").write_text(done.stdout + done.stderr)
    records = []
    for path in sorted((work / "runs" / sweep_id).glob("*/trials/*/record.json")):
        records.append({**json.loads(path.read_text()), "trial_dir": str(path.parent)})
    return done.returncode, records


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
    print(f"\nwritten: {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}")
    return path

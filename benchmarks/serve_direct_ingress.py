"""Where Ray Serve's overhead goes: the same PyTorch deployment at batch 1, concurrency 1, measured as a sweep
measures it, once through Serve's HTTP proxy (what tierbench's `pytorch` backend measures) and once straight
to the replica's own HTTP server (Ray 2.60's alpha *direct ingress*, `RAY_SERVE_ENABLE_DIRECT_INGRESS=1`,
meant for external load balancers that route to replicas), over PyTorch's in-process p50.

    python benchmarks/serve_direct_ingress.py [--model resnet18] [--repeats 200]

Direct ingress is a cluster-wide switch read when Ray's processes import Serve, so this script turns it on for
the private Ray it starts; the replica's address comes from the Serve controller's target groups (a private
API in Ray 2.60). tierbench's sweeps keep Serve's default proxy path: this is a measurement, not a backend.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "1"  # before Ray starts: its workers inherit it

from benchmarks.common import compose, local_tier, report  # noqa: E402
from benchmarks.serving_overhead import in_process  # noqa: E402


def direct_http_url(app_name: str, host: str) -> str:
    """The replica's own HTTP address for `app_name`, from the controller's target groups. The replica binds
    Serve's HTTP host (127.0.0.1 here), while the target names the node's IP: use the host."""
    import ray
    from ray.serve.context import _get_global_client

    groups = ray.get(_get_global_client()._controller.get_target_groups.remote(app_name))
    for group in groups:
        if str(group.protocol).upper().endswith("HTTP") and group.targets:
            target = group.targets[0]
            return f"http://{host}:{target.port}{group.route_prefix.rstrip('/')}"
    raise SystemExit(f"no direct-ingress HTTP target for {app_name}: {groups}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--window-s", type=float, default=3.0)
    args = parser.parse_args()

    from experiments.client_actor import ClientPool
    from experiments.plan import Trial
    from experiments.server_group import build_backend
    from experiments.trial import run_trial

    cfg = compose([f"model={args.model}", f"experiment.window_s={args.window_s}", "experiment.warmup_s=2",
                   "experiment.warmup_requests=20", "experiment.stability.max_windows=10"])
    baseline = in_process(cfg.model, args.repeats)["pytorch"]
    print(f"in-process PyTorch p50: {baseline:.2f} ms", flush=True)
    rows: list[dict[str, Any]] = []
    with local_tier(cfg) as (node, options):
        clients = ClientPool(cfg.experiment, options, 120).start()
        backend = build_backend(cfg, "pytorch", node, options)
        try:
            handle = backend.start()
            replica_url = direct_http_url(backend.app_name, urlsplit(handle.urls["http"]).hostname)
            direct = dataclasses.replace(handle, urls={**handle.urls, "http": replica_url})
            for path, served_by in (("Serve HTTP proxy", handle), ("direct to the replica", direct)):
                print(f"{path}: {served_by.urls['http']}", flush=True)
                trial = Trial("local", args.model, "pytorch", "pytorch", "http", "tensor", 1, 1)
                record = run_trial(cfg, trial, backend, served_by, node, clients)
                if record.status != "ok":
                    raise SystemExit(f"{path}: {record.reason}")
                served = record.metrics["latency_p50_ms"]
                rows.append({"path": path, "in_process_p50_ms": baseline, "served_p50_ms": served,
                             "overhead_ratio": served / baseline,
                             "replica_p50_ms": record.metrics.get("server_replica_p50_ms"),
                             "outside_replica_ms": served - record.metrics.get("server_replica_p50_ms", 0.0),
                             "stable": record.tags.get("stable")})
                print(rows[-1], flush=True)
        finally:
            backend.stop()
            clients.close()
    report("serve_direct_ingress", ["path", "in_process_p50_ms", "served_p50_ms", "overhead_ratio",
                                    "replica_p50_ms", "outside_replica_ms", "stable"], rows,
           {"model": args.model, "batch_size": 1, "concurrency": 1, "protocol": "http", "input_format": "tensor",
            "ray_serve_direct_ingress": "RAY_SERVE_ENABLE_DIRECT_INGRESS=1 (alpha in Ray 2.60)"})


if __name__ == "__main__":
    main()

"""Serving overhead: p50 at batch 1 through each server (one client, closed loop at concurrency 1, measured
exactly as a sweep measures it) over the p50 of the same runtime called in-process: ONNX Runtime for Triton,
PyTorch for Ray Serve, through Serve's proxies (`pytorch`) and straight to the replica's own ports
(`pytorch_direct`, Serve's direct ingress; the private Ray started here has `cluster.serve_direct_ingress=true`,
which leaves the proxies in place for `pytorch`). With `--haproxy` Serve runs HAProxy in place of its proxies
(`cluster.serve_haproxy=true`) and `pytorch_haproxy` is measured instead of `pytorch`. Goal on the CPU: <= 1.3.

    python benchmarks/serving_overhead.py [--model resnet18] [--repeats 200] [--haproxy]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import local_tier, report  # noqa: E402
from experiments.config.compose import load_config  # noqa: E402
from serving.paths import MODEL_REPOSITORY  # noqa: E402
from serving.ray_serve.cluster import haproxy_sizing  # noqa: E402


def p50_ms(fn: Any, repeats: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.percentile(times, 50) * 1e3)


def in_process(model_cfg: Any, repeats: int) -> dict[str, float]:
    """The runtimes alone, on the same input, with the threads the servers use (all cores)."""
    import onnxruntime as ort
    import torch

    from serving.export import ensure_onnx
    from serving.models import build_model, example_batch

    batch = example_batch(model_cfg, 1)
    onnx_path = ensure_onnx(model_cfg, MODEL_REPOSITORY).onnx_path
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    torch.set_num_threads(os.cpu_count() or 1)
    model = build_model(model_cfg)
    x = batch.numpy()
    with torch.inference_mode():
        torch_p50 = p50_ms(lambda: model(batch), repeats)
    return {"onnxruntime": p50_ms(lambda: session.run(None, {"input": x}), repeats), "pytorch": torch_p50}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--haproxy", action="store_true", help="Serve's HAProxy ingress in place of its proxies")
    parser.add_argument("--name", help="the results file's name (default: serving_overhead[_<model>][_haproxy])")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. backends.pytorch.torch_threads=1")
    args = parser.parse_args()

    from experiments.measure.client_actor import ClientPool
    from experiments.plan import planned_trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    cfg = load_config([f"model={args.model}", f"experiment.window_s={args.window_s}", "experiment.warmup_s=2",
                       "experiment.warmup_requests=20", "experiment.stability.max_windows=10",
                       "cluster.serve_direct_ingress=true", f"cluster.serve_haproxy={str(args.haproxy).lower()}",
                       *args.overrides])
    baseline = in_process(cfg.model, args.repeats)
    print(f"in-process p50: {baseline}", flush=True)
    proxied = "pytorch_haproxy" if args.haproxy else "pytorch"
    runtime_of = {"triton_onnx": "onnxruntime", proxied: "pytorch", "pytorch_direct": "pytorch"}
    rows: list[dict[str, Any]] = []
    with local_tier(cfg) as (node, options):
        clients = ClientPool(cfg.experiment, options, 120).start()
        try:
            for variant, protocols in (("triton_onnx", ("grpc", "http")), (proxied, ("http", "grpc")),
                                       ("pytorch_direct", ("http", "grpc"))):
                backend = build_backend(cfg, variant, node, options)
                handle = backend.start()
                try:
                    for protocol in protocols:
                        trial = planned_trial(cfg, variant, protocol, "tensor", 1, 1)
                        record = run_trial(cfg, trial, backend, handle, node, clients)
                        if record.status != "ok":
                            raise SystemExit(f"{trial.name}: {record.reason}")
                        runtime = runtime_of[variant]
                        served = record.metrics["latency_p50_ms"]
                        rows.append({"server": f"{variant} ({handle.server_mode})", "protocol": protocol,
                                     "runtime": runtime, "in_process_p50_ms": baseline[runtime],
                                     "served_p50_ms": served, "overhead_ratio": served / baseline[runtime],
                                     "server_side_ms": record.metrics.get("server_request_ms",
                                                                          record.metrics.get("server_replica_p50_ms")),
                                     "stable": record.tags.get("stable")})
                        print(rows[-1], flush=True)
                finally:
                    backend.stop()
        finally:
            clients.close()
    name = args.name or ("serving_overhead" + ("" if args.model == "resnet18" else f"_{args.model}")
                         + ("_haproxy" * args.haproxy))
    report(name, ["server", "protocol", "runtime", "in_process_p50_ms", "served_p50_ms", "overhead_ratio",
                  "server_side_ms", "stable"], rows,
           {"model": args.model, "batch_size": 1, "concurrency": 1, "serve_haproxy": args.haproxy,
            "haproxy_sizing": haproxy_sizing() if args.haproxy else {}, "goal": "overhead_ratio <= 1.3"})


if __name__ == "__main__":
    main()

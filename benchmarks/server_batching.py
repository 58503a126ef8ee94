"""Does server-side batching change throughput? Batching on vs off, on both servers, at concurrency >= 8.

Per server, batching off and on: Ray Serve's pytorch vs pytorch_batched (`@serve.batch`, 2 ms wait, matched
to Triton's) and pytorch_batched_20ms (a wait long enough for batches to fill while a CPU forward pass runs),
Triton's triton_onnx vs triton_onnx_dynbatch (dynamic batcher, 2 ms queue delay). A server's variants are
started side by side on this machine (`gpu=local`) and measured with the sweep's own machinery (client actors,
warm-up, common window) on one protocol, tensor input, batch size 1: many small requests, where a server-side
batcher can help. Windows alternate between the variants (forward, then reverse order) for several rounds, so
load that other processes put on the machine hits all alike; the table gives each round's on/off throughput
ratio, their median, and the images per forward pass each server reported (`server_batch_avg`). Writes JSON.

    python -m benchmarks.server_batching [--protocol grpc] [--concurrency 8 16] [--rounds 3] [--window 3]
        [--out FILE] [hydra overrides, e.g. backends.triton_onnx_dynbatch.max_queue_delay_us=500]

Numbers on a shared 2-core machine are noisy: compare ratios measured in one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.config.compose import load_config
from serving.paths import REPO_ROOT

# Per server: the variant without batching first, then the variants with it.
GROUPS = {"ray_serve": ("pytorch", "pytorch_batched", "pytorch_batched_20ms"),
          "triton": ("triton_onnx", "triton_onnx_dynbatch")}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="grpc", choices=["http", "grpc"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="alternating off/on window pairs per point")
    parser.add_argument("--window", type=float, default=3.0, help="measurement window, seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window, seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default runs/benchmarks/...)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    return parser.parse_args()


def compose_config(args: argparse.Namespace) -> Any:
    from experiments.config.validation import validate

    variants = [v for group in GROUPS.values() for v in group]
    overrides = [
        f"experiment.backends=[{','.join(variants)}]", f"experiment.protocols=[{args.protocol}]",
        "experiment.input_formats=[tensor]", f"experiment.batch_sizes=[{args.batch_size}]",
        f"experiment.concurrency=[{','.join(map(str, args.concurrency))}]", f"experiment.window_s={args.window}",
        f"experiment.warmup_s={args.warmup}", "experiment.warmup_requests=10",
        # One window per measurement: the rounds alternate the two servers instead of repeating windows.
        "experiment.stability.windows=1", "experiment.stability.max_windows=1", *args.overrides,
    ]
    cfg = load_config(overrides)
    validate(cfg)
    return cfg


def measure_group(cfg: Any, args: argparse.Namespace, group: tuple[str, ...], node: Any, options: dict[str, Any],
                  clients: Any) -> list[dict[str, Any]]:
    """Start every server of `group`, then alternate their windows; one row per window."""
    from experiments.plan import planned_trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    backends = {name: build_backend(cfg, name, node, options) for name in group}
    rows = []
    try:
        handles = {name: backend.start() for name, backend in backends.items()}
        for conc in args.concurrency:
            for round_index in range(args.rounds):
                order = group if round_index % 2 == 0 else group[::-1]
                for name in order:
                    trial = planned_trial(cfg, name, args.protocol, "tensor", args.batch_size, conc)
                    record = run_trial(cfg, trial, backends[name], handles[name], node, clients)
                    if record.status != "ok":
                        raise SystemExit(f"{trial.name}: {record.reason}")
                    m = record.metrics
                    rows.append({"variant": name, "server_batching": handles[name].params["server_batching"],
                                 "server_batch_wait_ms": handles[name].params["server_batch_wait_ms"],
                                 "concurrency": conc, "round": round_index, "throughput_img_s": m["throughput_img_s"],
                                 "latency_p50_ms": m["latency_p50_ms"], "latency_p99_ms": m["latency_p99_ms"],
                                 "server_batch_avg": m.get("server_batch_avg"), "load_average": os.getloadavg()[0]})
                    print(f"  {name:<22} c{conc:<3} round {round_index}: {m['throughput_img_s']:7.1f} img/s  "
                          f"p50 {m['latency_p50_ms']:7.1f} ms  images/pass {m.get('server_batch_avg', 0):5.2f}",
                          flush=True)
    finally:
        for backend in backends.values():
            backend.stop()
    return rows


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    ratios = []
    for server, (off, *ons) in GROUPS.items():
        for on in ons:
            for conc in args.concurrency:
                per_round, batches = [], []
                for r in range(args.rounds):
                    pick = {row["variant"]: row for row in rows
                            if row["concurrency"] == conc and row["round"] == r and row["variant"] in (off, on)}
                    if off in pick and on in pick and pick[off]["throughput_img_s"]:
                        per_round.append(pick[on]["throughput_img_s"] / pick[off]["throughput_img_s"])
                        if pick[on]["server_batch_avg"] is not None:
                            batches.append(pick[on]["server_batch_avg"])
                if per_round:
                    ratios.append({"server": server, "variant": on, "concurrency": conc,
                                   "on_over_off_per_round": per_round,
                                   "on_over_off_median": statistics.median(per_round),
                                   "images_per_pass_median": statistics.median(batches) if batches else None})
    return ratios


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from experiments.cluster.connection import ray_cluster
    from experiments.cluster.tiers import placement_options
    from experiments.measure.client_actor import ClientPool
    from serving.probe import describe_node

    cfg = compose_config(args)
    started, load_before = time.time(), os.getloadavg()
    rows: list[dict[str, Any]] = []
    with ray_cluster(cfg.cluster, cfg.gpu.name):
        options = placement_options(cfg.gpu.name)
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(), timeout=120)
        clients = ClientPool(cfg.experiment, options, cfg.serving.start_timeout_s).start()
        try:
            for server, group in GROUPS.items():
                print(f"{server}: {group[0]} (off) vs {', '.join(group[1:])} (on)", flush=True)
                rows += measure_group(cfg, args, group, node, options, clients)
        finally:
            clients.close()
    return {"protocol": args.protocol, "batch_size": args.batch_size, "window_s": args.window,
            "warmup_s": args.warmup, "rounds": args.rounds, "seconds": time.time() - started,
            "node": node.gpu_name, "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "rows": rows, "ratios": summarise(rows, args)}


def print_table(result: dict[str, Any]) -> None:
    print(f"\nserver-side batching on vs off: {result['protocol']}, tensor input, batch {result['batch_size']}, "
          f"{result['rounds']} alternating rounds of {result['window_s']} s windows on {result['node']} "
          f"(load average before/after {result['load_average_before'][0]:.1f} / "
          f"{result['load_average_after'][0]:.1f})")
    print(f"{'server':<12}{'batching variant':<24}{'conc':>6}{'images/pass':>13}{'median on/off':>15}   per round")
    for ratio in result["ratios"]:
        rounds = "  ".join(f"{r:.2f}x" for r in ratio["on_over_off_per_round"])
        per_pass = ratio["images_per_pass_median"]
        print(f"{ratio['server']:<12}{ratio['variant']:<24}{ratio['concurrency']:>6}"
              f"{'-' if per_pass is None else f'{per_pass:.2f}':>13}{ratio['on_over_off_median']:>14.2f}x   {rounds}")


def main() -> None:
    args = parse_args()
    result = run(args)
    print_table(result)
    out = args.out or REPO_ROOT / "runs" / "benchmarks" / time.strftime("server_batching-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

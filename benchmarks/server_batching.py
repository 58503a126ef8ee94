"""Does server-side batching change throughput? Batching on vs off, on both servers, at concurrency >= 8.

The matched pairs pytorch / pytorch_batched (Ray Serve, `@serve.batch`) and triton_onnx / triton_onnx_dynbatch
(Triton's dynamic batcher) are started side by side on this machine (`gpu=local`) and measured with the
sweep's own machinery (client actors, warm-up, common window) on one protocol, tensor input, batch size 1:
many small requests, where a server-side batcher can help. Windows alternate between the two servers of a
pair (off, on, on, off, ...) for several rounds, so load that other processes put on the machine hits both
alike; the table gives each round's on/off throughput ratio and their median. Writes the figures as JSON.

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

PAIRS = {"ray_serve": ("pytorch", "pytorch_batched"), "triton": ("triton_onnx", "triton_onnx_dynbatch")}
REPO = Path(__file__).resolve().parents[1]


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
    from hydra import compose, initialize_config_dir

    import experiments.config  # noqa: F401 - registers the schemas
    from experiments.validation import validate

    variants = [v for pair in PAIRS.values() for v in pair]
    overrides = [
        f"experiment.backends=[{','.join(variants)}]", f"experiment.protocols=[{args.protocol}]",
        "experiment.input_formats=[tensor]", f"experiment.batch_sizes=[{args.batch_size}]",
        f"experiment.concurrency=[{','.join(map(str, args.concurrency))}]", f"experiment.window_s={args.window}",
        f"experiment.warmup_s={args.warmup}", "experiment.warmup_requests=10",
        # One window per measurement: the rounds alternate the two servers instead of repeating windows.
        "experiment.stability.windows=1", "experiment.stability.max_windows=1", *args.overrides,
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    validate(cfg)
    return cfg


def measure_pair(cfg: Any, args: argparse.Namespace, pair: tuple[str, str], node: Any, options: dict[str, Any],
                 clients: Any) -> list[dict[str, Any]]:
    """Start both servers of `pair`, then alternate their windows; one row per window."""
    from experiments.measure import actors_needed, measure
    from experiments.metrics import window_metrics
    from experiments.plan import Trial
    from experiments.server_group import build_backend

    backends = {name: build_backend(cfg, name, node, options) for name in pair}
    rows = []
    try:
        handles = {name: backend.start() for name, backend in backends.items()}
        for conc in args.concurrency:
            for round_index in range(args.rounds):
                order = pair if round_index % 2 == 0 else pair[::-1]
                for name in order:
                    spec = backends[name].client_spec(handles[name], args.protocol, "tensor", args.batch_size)
                    trial = Trial(cfg.gpu.name, cfg.model.name, cfg.backends[name].backend, name, args.protocol,
                                  "tensor", args.batch_size, conc)
                    actors = clients.ensure(actors_needed(trial, cfg.experiment))
                    result = measure(actors, spec, trial, cfg.experiment)
                    m = window_metrics(result.samples, float(cfg.gpu.price_per_hour_usd))
                    rows.append({"variant": name, "server_batching": handles[name].params["server_batching"],
                                 "concurrency": conc, "round": round_index, "throughput_img_s": m["throughput_img_s"],
                                 "latency_p50_ms": m["latency_p50_ms"], "latency_p99_ms": m["latency_p99_ms"],
                                 "load_average": os.getloadavg()[0]})
                    print(f"  {name:<22} c{conc:<3} round {round_index}: {m['throughput_img_s']:7.1f} img/s  "
                          f"p50 {m['latency_p50_ms']:7.1f} ms", flush=True)
    finally:
        for backend in backends.values():
            backend.stop()
    return rows


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    ratios = []
    for server, (off, on) in PAIRS.items():
        for conc in args.concurrency:
            per_round = []
            for r in range(args.rounds):
                pick = {row["variant"]: row["throughput_img_s"] for row in rows
                        if row["concurrency"] == conc and row["round"] == r and row["variant"] in (off, on)}
                if pick.get(off) and on in pick:
                    per_round.append(pick[on] / pick[off])
            if per_round:
                ratios.append({"server": server, "concurrency": conc, "on_over_off_per_round": per_round,
                               "on_over_off_median": statistics.median(per_round)})
    return ratios


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from experiments.client_actor import ClientPool
    from experiments.cluster import ray_cluster
    from experiments.tiers import placement_options
    from serving.node import describe_node

    cfg = compose_config(args)
    started, load_before = time.time(), os.getloadavg()
    rows: list[dict[str, Any]] = []
    with ray_cluster(cfg.cluster, cfg.gpu.name):
        options = placement_options(cfg.gpu.name)
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(), timeout=120)
        clients = ClientPool(cfg.experiment, options, cfg.serving.start_timeout_s).start()
        try:
            for server, pair in PAIRS.items():
                print(f"{server}: {pair[0]} (off) vs {pair[1]} (on)", flush=True)
                rows += measure_pair(cfg, args, pair, node, options, clients)
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
    print(f"{'server':<12}{'conc':>6}{'median on/off':>15}   per round")
    for ratio in result["ratios"]:
        rounds = "  ".join(f"{r:.2f}x" for r in ratio["on_over_off_per_round"])
        print(f"{ratio['server']:<12}{ratio['concurrency']:>6}{ratio['on_over_off_median']:>14.2f}x   {rounds}")


def main() -> None:
    args = parse_args()
    result = run(args)
    print_table(result)
    out = args.out or REPO / "runs" / "benchmarks" / time.strftime("server_batching-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

"""Does server-side batching change throughput? Batching on vs off, on both servers, at concurrency >= 8.

Runs one real sweep on this machine (`gpu=local`) over the matched pairs pytorch / pytorch_batched (Ray Serve,
`@serve.batch`) and triton_onnx / triton_onnx_dynbatch (Triton's dynamic batcher): one protocol, tensor input,
batch size 1 (many small requests: where a server-side batcher can help), a few concurrency levels. Prints a
table with the on/off throughput ratio per server and concurrency, and writes it as JSON.

    python -m benchmarks.server_batching [--protocol grpc] [--concurrency 8 16] [--window 5] [--out FILE]
        [hydra overrides, e.g. backends.triton_onnx_dynbatch.max_queue_delay_us=500]

Numbers on a shared 2-core machine are noisy: compare the ratios measured in one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
    parser.add_argument("--window", type=float, default=5.0, help="measurement window per trial, seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up per trial, seconds")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default runs/benchmarks/...)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    return parser.parse_args()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    import experiments.config  # noqa: F401 - registers the schemas
    from experiments.records import read_record
    from experiments.sweep import run_sweep

    sweep_id = time.strftime("batching-%Y%m%d-%H%M%S")
    results = REPO / "runs" / "benchmarks"
    variants = [v for pair in PAIRS.values() for v in pair]
    overrides = [
        f"sweep_id={sweep_id}", f"results_dir={results}", f"mlflow.tracking_uri=sqlite:///{results / 'mlflow.db'}",
        f"experiment.backends=[{','.join(variants)}]", f"experiment.protocols=[{args.protocol}]",
        "experiment.input_formats=[tensor]", f"experiment.batch_sizes=[{args.batch_size}]",
        f"experiment.concurrency=[{','.join(map(str, args.concurrency))}]", f"experiment.window_s={args.window}",
        f"experiment.warmup_s={args.warmup}", "experiment.warmup_requests=20", *args.overrides,
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    load_before = os.getloadavg()
    started = time.time()
    code = run_sweep(cfg)
    trials_dir = results / sweep_id / cfg.gpu.name / "trials"
    records = [read_record(d) for d in sorted(trials_dir.iterdir())]
    rows = [{
        "variant": r.trial.variant, "concurrency": r.trial.concurrency, "status": r.status, "reason": r.reason,
        "server_batching": r.params.get("server_batching"),
        "throughput_img_s": r.metrics.get("throughput_img_s"), "latency_p50_ms": r.metrics.get("latency_p50_ms"),
        "latency_p99_ms": r.metrics.get("latency_p99_ms"),
    } for r in records]
    by_key = {(row["variant"], row["concurrency"]): row for row in rows}
    ratios = []
    for server, (off, on) in PAIRS.items():
        for conc in args.concurrency:
            a, b = by_key.get((off, conc)), by_key.get((on, conc))
            if a and b and a["throughput_img_s"] and b["throughput_img_s"]:
                ratios.append({"server": server, "concurrency": conc, "off_img_s": a["throughput_img_s"],
                               "on_img_s": b["throughput_img_s"],
                               "on_over_off": b["throughput_img_s"] / a["throughput_img_s"]})
    return {"sweep_id": sweep_id, "exit_code": code, "protocol": args.protocol, "batch_size": args.batch_size,
            "window_s": args.window, "seconds": time.time() - started,
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "overrides": overrides, "rows": rows, "ratios": ratios}


def fmt(value: float | None) -> str:
    return f"{value:10.1f}" if value is not None else f"{'-':>10}"


def print_table(result: dict[str, Any]) -> None:
    print(f"\nserver-side batching, {result['protocol']}, tensor input, batch {result['batch_size']}, "
          f"window {result['window_s']} s (load average before/after: "
          f"{result['load_average_before'][0]:.1f} / {result['load_average_after'][0]:.1f})")
    print(f"{'variant':<22}{'conc':>6}{'status':>9}{'img/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for row in result["rows"]:
        print(f"{row['variant']:<22}{row['concurrency']:>6}{row['status']:>9}{fmt(row['throughput_img_s'])}"
              f"{fmt(row['latency_p50_ms'])}{fmt(row['latency_p99_ms'])}")
    print(f"\n{'server':<12}{'conc':>6}{'off img/s':>12}{'on img/s':>12}{'on/off':>9}")
    for ratio in result["ratios"]:
        print(f"{ratio['server']:<12}{ratio['concurrency']:>6}{ratio['off_img_s']:>12.1f}{ratio['on_img_s']:>12.1f}"
              f"{ratio['on_over_off']:>8.2f}x")


def main() -> None:
    args = parse_args()
    result = run(args)
    print_table(result)
    out = args.out or REPO / "runs" / "benchmarks" / f"{result['sweep_id']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

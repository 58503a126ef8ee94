"""Triton's load-shedding settings at one open-loop rate: no limit, a queue size limit the queue reaches, one it
never reaches, and a queue deadline. Each is a real sweep of the dynamic-batching Triton variant (the tiny model,
Poisson arrivals, gRPC, batch 1), repeated over rounds that alternate the variants. The table gives what each
answered and refused, and its stalls: answered requests that waited at least --stall-ms, grouped by when they
finished (a stall holds its requests together and lets them all go at once).

What it shows (docs/traffic.md, "Load shedding as a server setting"): Triton's dynamic batcher can miss the wake-up
that a finishing model instance sends and sleep its idle wait of 500 ms; the next request to arrive wakes it, unless
the queue is at max_queue_size and that request is refused instead. A limit the queue reaches then stalls the server
for half a second with every arrival refused; a deadline (queue_timeout_us) does not.

    python benchmarks/queue_limits.py [--rate 300] [--rounds 2] [--small-limit 2] [--deadline-us 50000]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

VARIANT = "triton_onnx_dynbatch"
STALL_GAP_S = 0.02  # stalled requests finishing within this of each other belong to one stall


def stalls(latencies_csv: Path, stall_ms: float) -> list[dict[str, float]]:
    """The answered requests that waited at least `stall_ms`, grouped by when they finished: each group's size and
    its shortest and longest latency."""
    with latencies_csv.open() as f:
        rows = [r for r in csv.DictReader(f) if r["latency_ms"]]
    long = sorted((float(r["send_epoch_s"]) + float(r["latency_ms"]) / 1e3, float(r["latency_ms"]))
                  for r in rows if float(r["latency_ms"]) >= stall_ms)
    groups: list[list[float]] = []
    last_end = float("-inf")
    for end, latency in long:
        if end - last_end > STALL_GAP_S:
            groups.append([])
        groups[-1].append(latency)
        last_end = end
    return [{"requests": len(g), "min_ms": min(g), "max_ms": max(g)} for g in groups]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="Poisson arrivals, req/s (one the server sustains)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--small-limit", type=int, default=2, help="a max_queue_size the queue reaches")
    parser.add_argument("--large-limit", type=int, default=1000, help="a max_queue_size it never reaches")
    parser.add_argument("--deadline-us", type=int, default=50_000, help="queue_timeout_us of the deadline variant")
    parser.add_argument("--stall-ms", type=float, default=400.0, help="an answered request this late was stalled")
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    key = f"backends.{VARIANT}"
    variants = {"no limit": [],
                f"max_queue_size={args.small_limit}": [f"{key}.max_queue_size={args.small_limit}"],
                f"max_queue_size={args.large_limit}": [f"{key}.max_queue_size={args.large_limit}"],
                f"queue_timeout_us={args.deadline_us}": [f"{key}.queue_timeout_us={args.deadline_us}"]}
    common = ["model=tiny", "gpu=local", f"experiment.backends=[{VARIANT}]", "experiment.protocols=[grpc]",
              "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.load_mode=poisson",
              f"experiment.request_rates=[{args.rate:g}]", f"experiment.window_s={args.window_s}",
              "experiment.stability.max_windows=3", "experiment.max_error_rate=1"]
    work = Path(tempfile.mkdtemp(prefix="tierbench-queue-limits-"))
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    try:
        for round_no in range(1, args.rounds + 1):
            for index, (name, overrides) in enumerate(variants.items()):
                print(f"round {round_no}/{args.rounds}: {name} at {args.rate:g} req/s ...", flush=True)
                status, records = run_sweep(work, f"r{round_no}-v{index}", [*common, *overrides])
                if len(records) != 1 or records[0]["status"] != "ok":
                    raise RuntimeError(f"{name}: no measured trial (exit {status}): see {work}")
                record = records[0]
                found = stalls(Path(record["trial_dir"]) / "latencies.csv", args.stall_ms)
                m = record["metrics"]
                runs[name].append({"img_s": m["throughput_img_s"], "refused": m.get("error_rate", 0.0),
                                   "p99_ms": m["latency_p99_ms"], "max_ms": m["latency_max_ms"], "stalls": found})
    finally:
        if args.keep:
            print(f"logs and runs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, measured in runs.items():
        found = [s for run in measured for s in run["stalls"]]
        rows.append({"setting": name, "runs": len(measured),
                     "answered img/s": statistics.median(r["img_s"] for r in measured),
                     "refused share": statistics.median(r["refused"] for r in measured),
                     "p99 ms": statistics.median(r["p99_ms"] for r in measured),
                     "max ms": max(r["max_ms"] for r in measured),
                     "stalls": len(found),
                     "requests per stall": float(np.mean([s["requests"] for s in found])) if found else "",
                     "stalled latency ms": (f"{min(s['min_ms'] for s in found):.0f}-"
                                            f"{max(s['max_ms'] for s in found):.0f}") if found else ""})
    report(f"queue_limits_r{args.rate:g}_q{args.small_limit}", list(rows[0]), rows,
           {"rate_rps": args.rate, "rounds": args.rounds, "window_s": args.window_s, "stall_ms": args.stall_ms,
            "variant": VARIANT, "runs": runs})


if __name__ == "__main__":
    main()

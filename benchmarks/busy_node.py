"""The Python client on a node whose CPUs other work keeps busy: open-loop arrivals at a few rates, measured while
`--busy` processes (at the niceness a process started by hand has, 0) spin beside the sweep. Ray starts its workers
at niceness 15; a client left there is starved by that work and sends late, and its lateness reads as the server's
latency. The table gives, per rate, the niceness the client ran at, the share of arrivals sent more than 5 ms late,
how late its event loop ran (p99), the p99 latency, and the rate it sent.

    python benchmarks/busy_node.py [--busy 2] [--rates 50,200,800] [--label now]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

SPIN = "while True: pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=2, help="processes spinning beside the sweep")
    parser.add_argument("--rates", default="50,200,800", help="Poisson arrivals, req/s, comma-separated")
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--label", default="now", help="names the JSON (e.g. the commit measured)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    overrides = ["model=tiny", "gpu=local", "experiment.load_engine=python", "experiment.backends=[triton_onnx]",
                 "experiment.protocols=[grpc]", "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]",
                 "experiment.load_mode=poisson", f"experiment.request_rates=[{','.join(f'{r:g}' for r in rates)}]",
                 f"experiment.window_s={args.window_s}", "experiment.stability.windows=1", "experiment.warmup_s=0.5",
                 "cluster.schedule_timeout_s=600"]  # a busy node's Ray worker takes a minute to describe it
    work = Path(tempfile.mkdtemp(prefix="tierbench-busy-node-"))
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy)]
    try:
        print(f"{args.busy} busy process(es); Poisson at {args.rates} req/s, the Python client ...", flush=True)
        status, records = run_sweep(work, "busy", overrides)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        if args.keep:
            print(f"logs and runs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    measured = sorted((r for r in records if r["status"] == "ok"), key=lambda r: r["metrics"]["target_rate_rps"])
    if len(measured) != len(rates):
        raise RuntimeError(f"{len(measured)} of {len(rates)} trials measured (sweep exit {status})")
    rows = [{"rate req/s": r["metrics"]["target_rate_rps"], "client niceness": r["params"]["client_niceness"],
             "sent late": r["metrics"]["late_fraction"], "loop lag p99 ms": r["metrics"]["client_loop_lag_p99_ms_max"],
             "p99 ms": r["metrics"]["latency_p99_ms"], "sent req/s": r["metrics"]["achieved_rate_rps"],
             "overloaded": bool(r["metrics"]["overloaded"])} for r in measured]
    report(f"busy_node_python_{args.label}", list(rows[0]), rows,
           {"busy_processes": args.busy, "rates_rps": rates, "window_s": args.window_s, "label": args.label})


if __name__ == "__main__":
    main()

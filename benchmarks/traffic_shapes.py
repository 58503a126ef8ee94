"""Traffic shapes on one server at one mean rate: Poisson, gamma arrivals of CV 3 and on/off bursts, then a ramp
through the server's capacity. Each is one sweep of the FastAPI service (the tiny model on the CPU, compiled engine,
open loop); the table gives each shape's p50, p99, the share of requests the engine sent late, and goodput within the
deadline, and the ramp's knee (the offered rate where goodput leaves the offered line). Goals: gamma's p99 above
Poisson's at the same mean rate; the engine's sent-late share at most 1 %.

    python benchmarks/traffic_shapes.py [--rate 100] [--window-s 3] [--deadline-ms 50] [--ramp-rate 400]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

LATE_GOAL = 0.01


def sweep(work: Path, sweep_id: str, overrides: list[str]) -> dict:
    """One sweep's one trial's record."""
    status, records = run_sweep(work, sweep_id, overrides)
    if len(records) != 1:
        raise RuntimeError(f"{sweep_id}: {len(records)} trial records (exit {status}): see {work}")
    return records[0]


def knee(record: dict, share: float = 0.9) -> float | None:
    """The offered req/s of the first bin that served well less than `share` of what it was offered."""
    for point in record["series"]:
        offered = point["offered_rps"] * int(record["params"]["batch_size"])
        if offered > 0 and point.get("goodput_img_s", point["throughput_img_s"]) < share * offered:
            return float(point["offered_rps"])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="the mean rate of every shape, req/s")
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--deadline-ms", type=float, default=50.0)
    parser.add_argument("--ramp-rate", type=float, default=400.0, help="the ramp's last step, req/s")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    common = ["model=tiny", "gpu=local", "experiment.backends=[fastapi]", "experiment.protocols=[http]",
              "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", f"experiment.window_s={args.window_s}",
              "experiment.load_engine=compiled", f"experiment.slo.deadline_ms={args.deadline_ms}",
              "experiment.max_error_rate=1"]
    shapes = {"poisson": ["experiment.load_mode=poisson"],
              "gamma_cv3": ["experiment.load_mode=gamma", "experiment.arrivals.cv=3"],
              "bursts_25pct": ["experiment.load_mode=bursts", "experiment.arrivals.burst_on_s=0.25",
                               "experiment.arrivals.burst_off_s=0.75"]}
    work = Path(tempfile.mkdtemp(prefix="tierbench-traffic-shapes-"))
    rows = []
    try:
        for name, overrides in shapes.items():
            print(f"{name} at {args.rate:g} req/s ...", flush=True)
            record = sweep(work, name, [*common, *overrides, f"experiment.request_rates=[{args.rate:g}]",
                                        "experiment.stability.windows=3", "experiment.stability.max_windows=3"])
            m = record["metrics"]
            rows.append({"shape": name, "status": record["status"], "mean req/s": args.rate,
                         "offered req/s": m.get("offered_rate_rps"), "p50 ms": m.get("latency_p50_ms"),
                         "p99 ms": m.get("latency_p99_ms"), "late share": m.get("late_fraction"),
                         "goodput img/s": m.get("goodput_img_s"), "error rate": m.get("error_rate"),
                         "knee req/s": None})
        print(f"ramp to {args.ramp_rate:g} req/s ...", flush=True)
        record = sweep(work, "ramp", [*common, "experiment.load_mode=ramp", "experiment.arrivals.ramp_steps=8",
                                      f"experiment.request_rates=[{args.ramp_rate:g}]"])
        m = record["metrics"]
        rows.append({"shape": "ramp_8_steps", "status": record["status"], "mean req/s": None,
                     "offered req/s": m.get("offered_rate_rps"), "p50 ms": m.get("latency_p50_ms"),
                     "p99 ms": m.get("latency_p99_ms"), "late share": m.get("late_fraction"),
                     "goodput img/s": m.get("goodput_img_s"), "error rate": m.get("error_rate"),
                     "knee req/s": knee(record)})
    finally:
        if args.keep:
            print(f"logs and runs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    by_shape = {r["shape"]: r for r in rows}
    gamma_higher = (by_shape["gamma_cv3"]["p99 ms"] or 0) > (by_shape["poisson"]["p99 ms"] or float("inf"))
    late_ok = all((r["late share"] or 0) <= LATE_GOAL for r in rows)
    report("traffic_shapes", list(rows[0]), rows,
           {"rate": args.rate, "window_s": args.window_s, "deadline_ms": args.deadline_ms,
            "ramp_rate": args.ramp_rate, "gamma_p99_above_poisson": gamma_higher, "late_share_within_goal": late_ok})


if __name__ == "__main__":
    main()

"""Do tiers run in parallel? Wall time of a two-tier sweep over the same sweep with one tier, on an emulated
cluster (`cluster=emulated`: Ray nodes on this machine declaring a100 / rtx4090 / a client pool).

Runs the real command line (`python -m runners.sweep cluster=emulated gpu=... -m`), alternating one-tier and
two-tier sweeps, and reports each wall time, the span of the measured trials (first trial start to last trial
end, without cluster start and stop) and the two-tier / one-tier ratios (goal: <= 1.3; 2.0 would mean the tiers
ran one after the other). Every emulated node shares this machine's CPUs: on a small machine the two tiers'
servers compete for cores, which the ratio includes.

    python benchmarks/tier_parallelism.py [--repeats 2] [--out benchmarks/results/tier_parallelism.json] [-- overrides]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATRIX = ["experiment.backends=[triton_onnx,pytorch]", "experiment.protocols=[http]",
          "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1,2]",
          "experiment.window_s=2", "experiment.warmup_s=0.5", "experiment.warmup_requests=2"]


def run_sweep(tiers: list[str], overrides: list[str], work: Path) -> dict:
    """One multirun over `tiers`; its wall time and the span of its trials."""
    results = work / f"{'-'.join(tiers)}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "runners.sweep", "cluster=emulated", f"gpu={','.join(tiers)}",
           f"results_dir={results}", f"mlflow.tracking_uri=sqlite:///{results / 'mlflow.db'}", *MATRIX, *overrides,
           "-m"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"sweep over {tiers} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    records = [json.loads(p.read_text()) for p in results.glob("*/*/trials/*/record.json")]
    statuses = sorted({r["status"] for r in records})
    span = max(r["finished_at"] for r in records) - min(r["started_at"] for r in records)
    return {"tiers": tiers, "wall_s": round(wall, 2), "trials_span_s": round(span, 2), "trials": len(records),
            "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="pairs of (one tier, two tiers) sweeps")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "tier_parallelism.json")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for both sweeps")
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory(prefix="tierbench-parallelism-") as tmp:
        for i in range(args.repeats):
            for tiers in (["a100"], ["a100", "rtx4090"]):
                run = run_sweep(tiers, args.overrides, Path(tmp))
                run["repeat"] = i
                runs.append(run)
                print(f"  repeat {i}: {len(tiers)} tier(s) {run['wall_s']:.1f} s wall, "
                      f"{run['trials_span_s']:.1f} s of trials", flush=True)
    one = [r for r in runs if len(r["tiers"]) == 1]
    two = [r for r in runs if len(r["tiers"]) == 2]
    ratios = {key: [round(b[key] / a[key], 3) for a, b in zip(one, two, strict=True)]
              for key in ("wall_s", "trials_span_s")}
    summary = {key: statistics.median(values) for key, values in ratios.items()}

    print(f"\n{'sweep':<12}{'wall s (median)':>18}{'trials span s':>16}{'trials':>8}")
    for label, group in (("1 tier", one), ("2 tiers", two)):
        print(f"{label:<12}{statistics.median(r['wall_s'] for r in group):>18.1f}"
              f"{statistics.median(r['trials_span_s'] for r in group):>16.1f}{group[0]['trials']:>8}")
    print(f"{'2 / 1':<12}{summary['wall_s']:>18.2f}{summary['trials_span_s']:>16.2f}"
          f"   (goal <= 1.3; per pair: wall {ratios['wall_s']}, trials {ratios['trials_span_s']})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "tier_parallelism", "matrix": MATRIX + args.overrides, "runs": runs, "ratios": ratios,
        "median_ratio": summary, "goal_ratio_max": 1.3,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

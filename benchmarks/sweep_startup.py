"""Where a small sweep's own time goes around its trials: what every sweep pays (a user's first command, and each of
the test suite's sweeps), read from the sweep's log.

    python benchmarks/sweep_startup.py [--runs 3] [--name sweep_startup]

Runs `python -m runners.sweep` on the tiny model (about a millisecond a pass, so the trials are the smallest part),
one trial each on Triton and on Ray Serve (HTTP, tensor, batch 1, concurrency 2, one 1 s window), `--runs` times
in a row, each with its own local Ray and a fresh SQLite store, and splits each run's wall time at the milestones its
log prints: Ray up, trials planned, inputs ready (the node described, MLflow open, the in-process ceiling timed or
read from its cache), each server starting, each trial recorded, Ray stopped, the process gone. Prints the median of
each phase over the runs with the range, and writes `benchmarks/results/<name>.json` with every run's phases.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

SWEEP = ["model=tiny", "experiment.backends=[triton_onnx,pytorch]", "experiment.protocols=[http]",
         "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[2]",
         "experiment.window_s=1", "experiment.stability.windows=1", "experiment.warmup_s=0.3"]
# (phase, the log line that ends it), in the order a sweep prints them; the first phase starts with the process.
MILESTONES = [
    ("compose, imports, Ray's start", r"Started a local Ray instance"),
    ("hold the node, plan", r"trials; raw results in"),
    ("describe the node, open MLflow, ceiling, inputs", r"inputs: corpus"),
    ("(clients ready, Triton asked to start)", r"starting triton_onnx on"),
    ("Triton's start, cross-check, telemetry, trial", r"\[1/2\] local/triton_onnx"),
    ("Triton's stop", r"starting pytorch on"),
    ("Serve's start, cross-check, telemetry, trial", r"\[2/2\] local/pytorch"),
    ("Serve app's delete, Ray's stop", r"stopped the local Ray this sweep started"),
]
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def stamp(line: str) -> float | None:
    """The epoch seconds of a log line's timestamp (Hydra's and Ray's formats both carry one); None without."""
    found = STAMP.search(line)
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if found else None


def phases(log: str, started: float, ended: float) -> dict[str, float]:
    """Seconds per phase: from the previous milestone (the process's start for the first) to this one's line."""
    lines = log.splitlines()
    out, previous = {}, started
    for phase, pattern in MILESTONES:
        at = next((at for line in lines if re.search(pattern, line) and (at := stamp(line)) is not None), None)
        if at is None:
            raise SystemExit(f"the sweep's log has no line matching {pattern!r}: its output changed, or it failed:\n"
                             f"{log[-3000:]}")
        out[phase] = round(at - previous, 2)
        previous = at
    out["exit"] = round(ended - previous, 2)
    out["total"] = round(ended - started, 2)
    return out


def one_run(work: Path) -> dict[str, float]:
    started = time.time()
    code, _ = run_sweep(work, "startup", SWEEP)
    ended = time.time()
    log = (work / "startup.log").read_text()
    if code != 0:
        raise SystemExit(f"the sweep failed (exit {code}):\n{log[-3000:]}")
    return phases(log, started, ended)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--name", default="sweep_startup")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="tierbench-startup-") as tmp:
            runs.append(one_run(Path(tmp)))
        print(f"run {i + 1}/{args.runs}: {runs[-1]['total']:.1f} s", flush=True)
    rows = [{"phase": phase, "median s": statistics.median(r[phase] for r in runs),
             "min s": min(r[phase] for r in runs), "max s": max(r[phase] for r in runs)}
            for phase in runs[0]]
    report(args.name, ["phase", "median s", "min s", "max s"], rows, {"sweep": SWEEP, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Settings search: the quick strategy (a hill climb from the backend's own settings) against the exhaustive grid,
each a real sweep (`python -m runners.sweep experiment=cheapest ...`) on the local tier, one backend.

    python benchmarks/config_search.py [--backend triton_onnx_dynbatch] [--model resnet18] [--slo-p99-ms 150]

Goal: the quick search's winner within 5 % of the grid winner's throughput at the SLO, with at most a third of
the grid's probes (candidates measured); and the searched best against the backend's own settings (the gain).
Also what each candidate waited for its server: a process start, or the running server reloading the model with
the candidate's config (`server_start`, `server_startup_s`).

Rows: the grid; the quick search run live (its own sweep: its figures carry this machine's run-to-run noise, its
winner is measured again); the quick search replayed on the grid's measurements (the same climb, each point's value
taken from the grid: the strategy alone, without the noise).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from experiments.config.choices import SearchStrategy  # noqa: E402
from experiments.results.layout import TierFolder  # noqa: E402
from experiments.results.records import read_record  # noqa: E402
from experiments.run.settings_search import SearchSpace, search_settings  # noqa: E402
from serving.paths import REPO_ROOT  # noqa: E402

SPACE = {"triton": {"instance_count": [1, 2, 3, 4], "max_queue_delay_us": [0, 500, 2000, 10000, 50000]},
         "ray_serve": {"num_replicas": [1, 2, 3, 4], "batch_wait_timeout_s": [0.0005, 0.002, 0.01, 0.03, 0.06],
                       "batcher": ["serve"]}}  # the preset's other batcher left out: the grid stays 20 points
CLASS_OF = {"triton_onnx_dynbatch": "triton", "pytorch_batched": "ray_serve"}


def space_overrides(backend: str) -> list[str]:
    cls = CLASS_OF[backend]
    other = next(c for c in SPACE if c != cls)
    return [f"~experiment.search.space.{other}",
            *(f"experiment.search.space.{cls}.{key}=[{','.join(map(str, values))}]"
              for key, values in SPACE[cls].items())]


def run_search(args: Any, strategy: str, folder: Path) -> tuple[dict[str, Any], float]:
    """One sweep searching `args.backend` by `strategy`; its `search.json` (with `server_starts`) and the seconds it
    took."""
    sweep_id = f"config-search-{strategy}"
    overrides = ["experiment=cheapest", f"model={args.model}", f"experiment.backends=[{args.backend}]",
                 f"experiment.search.strategy={strategy}", f"experiment.slo.p99_ms={args.slo_p99_ms}",
                 f"experiment.protocols=[{args.protocol}]", f"experiment.window_s={args.window_s}",
                 f"sweep_id={sweep_id}", f"results_dir={folder / 'runs'}",
                 f"mlflow.tracking_uri=sqlite:///{folder / 'mlflow.db'}", "quiet=true", *space_overrides(args.backend)]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runners.sweep", *overrides], cwd=REPO_ROOT, text=True,
                          capture_output=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"the {strategy} sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    tier = TierFolder.of(folder / "runs", sweep_id, "local")
    summary = json.loads((tier.deploy / args.backend / "search.json").read_text())
    return {**summary, "server_starts": server_starts(tier)}, seconds


def server_starts(tier: TierFolder) -> dict[str, list[float]]:
    """Seconds each candidate waited for its server, by how it got it: a new process, or the running one reloaded
    (`server_start`); one figure per server start (trials of one start share it)."""
    seen: set[tuple[str, str, float]] = set()
    for record in map(read_record, tier.trials()):
        how, startup = record.params.get("server_start"), record.metrics.get("server_startup_s")
        if how and startup:
            seen.add((record.params["search_values"], how, float(startup)))
    starts: dict[str, list[float]] = {}
    for _, how, startup in sorted(seen):
        starts.setdefault(how, []).append(startup)
    return starts


def replay(grid: dict[str, Any]) -> dict[str, Any]:
    """The quick climb over the grid's own measurements: which candidates it would measure and where it ends."""
    space = SearchSpace.of(grid["space"])
    values = {json.dumps(row["values"], sort_keys=True): row["slo_max_throughput_img_s"] for row in grid["measured"]}
    start = space.nearest(grid["start"]["values"])
    outcome = search_settings(space, lambda v: values[json.dumps(v, sort_keys=True)], SearchStrategy.QUICK, start)
    best = outcome.best
    return {"points_probed": outcome.probes, "candidates_measured": outcome.probes,
            "best": None if best is None else {"values": space.values(best),
                                               "slo_max_throughput_img_s": outcome.value(best)},
            "start": grid["start"], "gain_over_start": outcome.gain}


def row(name: str, summary: dict[str, Any], grid: dict[str, Any], seconds: float | None) -> dict[str, Any]:
    best = summary["best"] or {}
    throughput, grid_best = best.get("slo_max_throughput_img_s"), grid["best"]["slo_max_throughput_img_s"]
    within = throughput / grid_best if throughput and grid_best else None
    probes = summary["candidates_measured"] / grid["candidates_measured"]
    starts = summary.get("server_starts", {})
    return {"search": name, "best_settings": json.dumps(best.get("values")), "img_s_at_slo": throughput,
            "vs_grid_best": within, "candidates": summary["candidates_measured"], "probes_vs_grid": probes,
            "start_img_s_at_slo": summary["start"]["slo_max_throughput_img_s"],
            "gain_over_start": summary["gain_over_start"], "seconds": seconds,
            "server_starts": len(starts.get("process", [])), "start_s_mean": _mean(starts.get("process")),
            "reloads": len(starts.get("reload", [])), "reload_s_mean": _mean(starts.get("reload")),
            "meets_goal": "" if name == "grid" else bool(within and within >= 0.95 and probes <= 1 / 3)}


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(CLASS_OF), default="triton_onnx_dynbatch")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--protocol", default="grpc")
    parser.add_argument("--slo-p99-ms", type=float, default=150.0)
    parser.add_argument("--window-s", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="config-search-") as tmp:
        grid, grid_s = run_search(args, "grid", Path(tmp))
        quick, quick_s = run_search(args, "quick", Path(tmp))
    rows = [row("grid", grid, grid, grid_s), row("quick (live)", quick, grid, quick_s),
            row("quick (replayed on the grid)", replay(grid), grid, None)]
    columns = ["search", "best_settings", "img_s_at_slo", "vs_grid_best", "candidates", "probes_vs_grid",
               "start_img_s_at_slo", "gain_over_start", "seconds", "server_starts", "start_s_mean", "reloads",
               "reload_s_mean", "meets_goal"]
    report(f"config_search_{args.backend}_{args.model}", columns, rows, {
        "backend": args.backend, "model": args.model, "protocol": args.protocol, "slo_p99_ms": args.slo_p99_ms,
        "space": SPACE[CLASS_OF[args.backend]], "goal": "quick within 5 % of the grid's best, <= 1/3 of its probes",
        "grid": grid, "quick": quick})


if __name__ == "__main__":
    main()

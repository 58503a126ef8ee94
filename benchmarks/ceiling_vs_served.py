"""Served against the ceiling: every `ok` trial of the sweeps under a results folder (or one sweep's folder), its
throughput beside its runtime's in-process ceiling on the same node (docs/ceiling.md), its share, GPU busy where
there is a GPU, and the verdict on what held it back; then, per tier and runtime, the best served point and its
share. Reads the run folders the sweeps wrote (`record.json`, `ceiling.json`): nothing is measured here.

    python benchmarks/ceiling_vs_served.py runs/<sweep_id> [--name ceiling_vs_served_cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from experiments.measure.ceiling import read_ceiling  # noqa: E402
from experiments.results.layout import TIER_FILE, TierFolder  # noqa: E402
from experiments.results.records import Status, read_record  # noqa: E402

COLUMNS = ["tier", "sweep", "stack", "batch", "load", "served_img_s", "runtime", "ceiling_batch", "ceiling_img_s",
           "share", "share_of_best", "share_of_resident", "gpu_busy_pct", "served_p50_ms", "inprocess_p50_ms",
           "bottleneck", "evidence"]


def tier_folders(root: Path) -> list[TierFolder]:
    return [TierFolder(p.parent) for p in sorted(root.rglob(TIER_FILE))]


def rows_of(folder: TierFolder) -> list[dict[str, Any]]:
    rows = []
    for trial_dir in sorted(folder.trials()):
        record = read_record(trial_dir)
        m, t = record.metrics, record.trial
        if record.status != Status.OK or "ceiling_img_s" not in m:
            continue
        rows.append({"tier": t.tier, "sweep": folder.path.parent.name,
                     "stack": f"{t.variant}/{t.protocol}/{t.input_format}", "batch": t.batch_size,
                     "load": f"c{t.concurrency}" if t.concurrency else f"r{t.request_rate:g}",
                     "served_img_s": m["throughput_img_s"], "runtime": record.params.get("ceiling_runtime", ""),
                     "ceiling_batch": m.get("ceiling_batch"), "ceiling_img_s": m["ceiling_img_s"],
                     "share": m.get("ceiling_share"), "share_of_best": m.get("ceiling_share_best"),
                     "share_of_resident": m.get("ceiling_share_resident", ""),
                     "gpu_busy_pct": m.get("gpu_util_pct", ""), "served_p50_ms": m.get("latency_p50_ms"),
                     "inprocess_p50_ms": m.get("ceiling_p50_ms", ""), "bottleneck": record.tags.get("bottleneck", ""),
                     "evidence": record.tags.get("bottleneck_evidence", "")})
    return rows


def best_per_runtime(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (tier, runtime): the served point with the highest throughput, and its shares."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["tier"], row["runtime"])
        if key not in best or row["served_img_s"] > best[key]["served_img_s"]:
            best[key] = row
    return list(best.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a results folder, a sweep's folder or a tier's folder")
    parser.add_argument("--name", default="ceiling_vs_served", help="results file name (benchmarks/results/)")
    args = parser.parse_args()
    folders = tier_folders(args.root)
    rows = [row for folder in folders for row in rows_of(folder)]
    if not rows:
        raise SystemExit(f"no ok trial with ceiling figures under {args.root}")
    ceilings = {}
    for folder in folders:
        ceiling = read_ceiling(folder.ceiling_file)
        if ceiling is not None:
            ceilings[f"{folder.path.parent.name}/{folder.path.name}"] = ceiling.to_json()
    print("## Every ok trial\n")
    report(args.name, COLUMNS, rows, {"ceilings": ceilings, "best": best_per_runtime(rows)})
    print("\n## Best served point per tier and runtime\n")
    for row in best_per_runtime(rows):
        share = row["share"]
        print(f"- {row['tier']} {row['runtime']}: {row['stack']} b{row['batch']} {row['load']}: "
              f"{row['served_img_s']:,.0f} img/s = {share:.0%} of the ceiling at batch {row['ceiling_batch']:.3g} "
              f"({row['ceiling_img_s']:,.0f} img/s); {row['bottleneck']}: {row['evidence']}")


if __name__ == "__main__":
    main()

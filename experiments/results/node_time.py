"""What the benchmark itself cost: the time a tier job kept its node up, and that time at the tier's price.

Each node the job held (a replacement after a lost node, a resumed run: each one more) is a row of
`node_time.json` in the tier folder, written when the job lets the node go, so a Ctrl-C or a lost store loses
nothing; the tier run's metrics `node_uptime_s` and `sweep_cost_usd` are the sums. An autoscaler's idle timeout
after the release is billed too and is not in them (its length is in the cluster config)."""

from __future__ import annotations

import json
from typing import Any

from experiments.results.layout import TierFolder


def record_node_time(folder: TierFolder, row: dict[str, Any]) -> None:
    """Add one held node (`node_id`, `asked_at`, `placed_at`, `released_at`, `scaled_up`, `uptime_s`,
    `price_per_hour_usd`) to the tier folder."""
    folder.path.mkdir(parents=True, exist_ok=True)
    rows = read_node_time(folder)
    rows.append(row)
    folder.node_time_file.write_text(json.dumps(rows, indent=2))


def read_node_time(folder: TierFolder) -> list[dict[str, Any]]:
    return json.loads(folder.node_time_file.read_text()) if folder.node_time_file.exists() else []


def node_time_metrics(folder: TierFolder) -> dict[str, float]:
    """The tier run's metrics: node up time and what it cost, summed over the nodes held; {} before any."""
    rows = read_node_time(folder)
    if not rows:
        return {}
    return {"node_uptime_s": round(sum(r["uptime_s"] for r in rows), 3),
            "sweep_cost_usd": round(sum(r["uptime_s"] * r["price_per_hour_usd"] / 3600 for r in rows), 6),
            "node_scale_up_s": round(sum(r["placed_at"] - r["asked_at"] for r in rows if r["scaled_up"]), 3)}

"""The report's "SLO search": per operating point, the highest load whose p99 stayed within the sweep's own target
(`experiment.slo.p99_ms`), what an image costs there, and (where the sweep timed its runtimes) how much of its
in-process ceiling that load used and what held it back."""

from __future__ import annotations

import pandas as pd

from experiments.report import marks
from experiments.report.ceiling_section import percent
from experiments.report.data import SweepData
from experiments.report.render import MISSING_CELL, Document, count, format_frame, ms, rate, usd
from experiments.report.served import marked_table, numeric

SHARE, VERDICT = "of ceiling at max", "verdict at max"
CLIENT_BOUND = " (client behind above)"
CEILING_TEXT = (" “of ceiling at max” is the img/s at that load over its runtime's in-process round trip at the batch "
                "the server computed, and “verdict at max” what held it back there (docs/ceiling.md).")


def slo_search_section(doc: Document, data: SweepData, labels: dict[str, str]) -> None:
    """The sweep's own SLO search (`experiment.slo.p99_ms`): the highest load within the target per point."""
    if data.slo.empty:
        return
    doc.h(1, "SLO search")
    shares, verdicts = _ceiling_columns(data.slo)
    doc.p("For each operating point, the highest load (concurrency, or request rate in open loop) whose p99 "
          "stayed within the target, found by doubling from the grid's lowest load (halving first where that load "
          "missed), then bisection, over real trials (tag "
          "`phase=slo_search`). “at limit” means the search stopped at its load limit still within the target; "
          "“client behind above” that the load above it missed because the client fell behind its own schedule, "
          "so the server's own limit may lie higher."
          + (CEILING_TEXT if shares or verdicts else ""))
    rows, slo_marks = [], []
    for _, row in data.slo.sort_values(["tier", "variant", "protocol", "input_format", "batch_size"]).iterrows():
        met = row["slo_met"] == 1
        slo_marks.append(marks.UNSTABLE if met and row.get("slo_stable_at_max") == 0 else "")
        rows.append({
            "tier": labels.get(row["tier"], row["tier"]),
            "stack": f"{row['variant']}/{row['protocol']}/{row['input_format']}", "batch": row["batch_size"],
            "p99 target ms": ms(row["slo_p99_ms"]),
            "max load": (f"{row['slo_max_load']:g}" + (" (at limit)" if row["slo_limited"] == 1 else "")
                         + (CLIENT_BOUND if row.get("slo_client_bound") == 1 else ""))
            if met else "none meets it" + (CLIENT_BOUND if row.get("slo_client_bound") == 1 else ""),
            "img/s at max": rate(row["slo_max_throughput_img_s"]) if met else "—",
            "p99 ms at max": ms(row["slo_p99_at_max_ms"]) if met else "—",
            "$ per 1k images": usd(row["cost_per_1k_images_at_slo_usd"]) if met else "—",
            "probes": count(row["slo_probes"]),
            SHARE: percent(row.get("slo_ceiling_share_at_max")) if met else MISSING_CELL,
            VERDICT: (row.get("bottleneck") or MISSING_CELL) if met else MISSING_CELL,
        })
    frame = pd.DataFrame(rows).drop(columns=[c for c, shown in ((SHARE, shares), (VERDICT, verdicts)) if not shown])
    figure_marks = pd.DataFrame({c: slo_marks for c in ("max load", "img/s at max", "p99 ms at max",
                                                         "$ per 1k images", SHARE)}, index=frame.index)
    align = [right and column != VERDICT for right, column in zip(numeric(frame, 3), frame.columns, strict=True)]
    marked_table(doc, format_frame(frame, {}, marks=figure_marks), align, figure_marks["max load"], "operating points")


def _ceiling_columns(slo: pd.DataFrame) -> tuple[bool, bool]:
    """Whether any point carries a share of its ceiling, and a verdict, at its highest load: a sweep without them
    (ceiling off, older sweeps) keeps the table it always had."""
    shares = "slo_ceiling_share_at_max" in slo and slo["slo_ceiling_share_at_max"].notna().any()
    verdicts = "bottleneck" in slo and (slo["bottleneck"].fillna("").astype(str) != "").any()
    return bool(shares), bool(verdicts)

"""A generative answer's "Deploy this": where the sweep searched server settings (`experiment=cheapest_generative`),
per tier the candidate with the most output tokens per second within the TTFT and TPOT p99 targets (so the lowest $ per
1M output tokens at the tier's price), against the searched backend's own settings, and the file that deploys it (on
the tier run under `deploy/<backend>/`). Read from the SLO summaries of the search's candidates, as the image report's
"Deploy this" (`experiments.report.deploy`) is."""

from __future__ import annotations

import pandas as pd

from experiments.measure.slo_names import LABELS, SloNames, at_max
from experiments.report.data import SweepData
from experiments.report.deploy import settings_text
from experiments.report.render import ms, rate, ratio, usd
from serving.workloads.registry import workload

NAMES = SloNames.of(workload("generative"))
SEARCH_FILE = "search.json"  # beside the winner's files: what the search measured (experiments.run.backend_search)


def best_per_tier(slo: pd.DataFrame) -> pd.DataFrame:
    """Per tier, its searched candidate with the most output tokens/s within the targets, with its search's start
    beside it (`default_cost`); no row for a tier where none met them."""
    if slo.empty or "search_of" not in slo or NAMES.max_throughput not in slo:
        return pd.DataFrame()
    met = slo[slo["search_of"].notna() & (slo["status"] == "ok") & (slo["slo_met"] == 1)
              & (pd.to_numeric(slo[NAMES.max_throughput], errors="coerce") > 0)]
    rows = []
    for tier, candidates in met.groupby("tier"):
        best = candidates.loc[pd.to_numeric(candidates[NAMES.max_throughput]).idxmax()]
        start = candidates[(candidates["search_of"] == best["search_of"]) & (candidates["search_start"] == "true")]
        rows.append({**best.to_dict(), "tier": tier,
                     "default_cost": start.iloc[0][NAMES.cost] if not start.empty else None})
    return pd.DataFrame(rows)


def targets_text(row: pd.Series) -> str:
    """`TTFT p99 ≤ 500 ms and TPOT p99 ≤ 50 ms`: the targets the summary was searched within."""
    return " and ".join(f"{label} ≤ {float(row[f'slo_{key}']):g} ms" for key, label in LABELS.items()
                        if pd.notna(row.get(f"slo_{key}")))


def deploy_lines(data: SweepData, labels: dict[str, str]) -> list[str]:
    """One line per tier whose search found settings within the targets, cheapest first: what to deploy, its figures
    and its file; a line saying none did where the sweep searched and nothing met them; nothing without a search."""
    slo = data.slo
    if slo.empty or "search_of" not in slo or slo["search_of"].isna().all():
        return []
    best = best_per_tier(slo)
    if best.empty:
        return ["Deploy this: no searched setting met the targets on any tier (see each candidate's SLO summary)."]
    lines = []
    for _, row in best.sort_values(NAMES.cost).iterrows():
        tier, backend = row["tier"], row["search_of"]
        files = [f for f in data.deploy.get((tier, backend), []) if f != SEARCH_FILE]
        file_text = (", ".join(f"`deploy/{backend}/{f}`" for f in files) if files else
                     f"its deploy files under `deploy/{backend}/`")
        at = " and ".join(f"{label} {ms(row.get(at_max(key)))} ms" for key, label in LABELS.items()
                          if pd.notna(row.get(f"slo_{key}")))
        gain = (f"; {ratio(float(row['default_cost']) / float(row[NAMES.cost]))} cheaper than its own settings"
                if row["search_start"] != "true" and pd.notna(row.get("default_cost")) and float(row[NAMES.cost]) > 0
                else "")
        lines.append(f"**Deploy this on {labels.get(tier, tier)}: {backend} ({settings_text(row['search_values'])}), "
                     f"{usd(row[NAMES.cost])} per 1M output tokens** at {rate(row[NAMES.max_throughput])} output "
                     f"tok/s within {targets_text(row)} ({at} at {float(row['slo_max_load']):g} in flight){gain}. "
                     f"Deploy it with {file_text} (candidate `{row['variant']}`; the search's every point in "
                     f"`deploy/{backend}/{SEARCH_FILE}`).")
    return lines

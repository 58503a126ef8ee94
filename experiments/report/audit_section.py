"""The report's "Caching audit" (`experiment.inputs.audit`): each operating point measured with distinct inputs and
again with one input repeated, as MLPerf LoadGen's TEST04 audits caching. A stack that answers the repeated input
more than `audit_max_speedup` faster holds a cache or takes a data-dependent path: its distinct-input figures are the
ones to price, and it is named here."""

from __future__ import annotations

import pandas as pd

from experiments.report.answer import point_name
from experiments.report.data import SweepData
from experiments.report.render import Document, format_frame, ms

P50 = "latency_p50_ms"
POINT = ("tier", "stack", "batch_size", "load")
DEFAULT_MAX_SPEEDUP = 0.10


def audit_frame(data: SweepData) -> pd.DataFrame:
    """Each point measured both ways: its p50 with distinct inputs and repeated, the speed-up, and the flag."""
    repeated = data.repeated
    if repeated.empty or P50 not in repeated:
        return pd.DataFrame()
    distinct = data.ok[[*POINT, P50, "unstable"]]
    twins = repeated[repeated["status"] == "ok"][[*POINT, P50, "unstable", "audit_max_speedup"]]
    pairs = distinct.merge(twins, on=list(POINT), suffixes=("_distinct", "_repeated"))
    if pairs.empty:
        return pairs
    pairs["limit"] = pd.to_numeric(pairs["audit_max_speedup"], errors="coerce").fillna(DEFAULT_MAX_SPEEDUP)
    pairs["speedup"] = 1 - pairs[f"{P50}_repeated"] / pairs[f"{P50}_distinct"]
    faster = pairs["speedup"] > pairs["limit"]
    # A verdict needs both measurements settled: where either's windows disagreed, the gap may be their noise.
    unsettled = pairs["unstable_distinct"].astype(bool) | pairs["unstable_repeated"].astype(bool)
    pairs["flagged"] = faster & ~unsettled
    pairs["inconclusive"] = faster & unsettled
    return pairs


def audit_section(doc: Document, data: SweepData, labels: dict[str, str]) -> list[str]:
    """The section (only where the sweep ran the audit); returns the summary's lines."""
    pairs = audit_frame(data)
    if pairs.empty:
        return []
    doc.h(1, "Caching audit")
    limit = float(pairs["limit"].iloc[0])
    doc.p("Each point below was measured twice at the same load: with distinct inputs (the corpus's images in turn, "
          "the figures the rest of this report uses) and with one input repeated. A stack whose repeated-input p50 "
          f"is more than {limit:.0%} faster is flagged: it caches answers or takes a path that depends on the data, "
          "and a benchmark that repeats one input would flatter it. Where either measurement was unstable (its windows "
          "never agreed), a gap is called inconclusive, not flagged: measure it again with more windows "
          "(`experiment.stability.max_windows`) or longer ones (`experiment.window_s`).")
    rows = [{"point": point_name(row, labels).strip("*"), "p50 distinct": row[f"{P50}_distinct"],
             "p50 repeated": row[f"{P50}_repeated"], "repeated faster by": f"{row['speedup']:+.1%}",
             "flag": ("**cache or data-dependent path**" if row["flagged"] else
                      "inconclusive (unstable)" if row["inconclusive"] else "-")}
            for _, row in pairs.iterrows()]
    doc.table(format_frame(pd.DataFrame(rows), {"p50 distinct": ms, "p50 repeated": ms}),
              [False, True, True, True, False])
    flagged = sorted({str(s) for s in pairs.loc[pairs["flagged"], "stack"]})
    unsure = sorted({str(s) for s in pairs.loc[pairs["inconclusive"], "stack"]})
    lines = [f"caching audit: {', '.join(flagged)} answered a repeated input more than {limit:.0%} faster (a cache "
             "or a data-dependent path): priced with distinct inputs"] if flagged else []
    if unsure:
        lines.append(f"caching audit: inconclusive for {', '.join(unsure)} (a gap over {limit:.0%} between unstable "
                     "measurements)")
    return lines or [f"caching audit: no stack answered a repeated input more than {limit:.0%} faster"]

"""What was offered and what was served: the overloaded trials listed apart with why, the open-loop trials'
rates side by side, and the trials whose server counted other than their clients. Plus what every section's tables
share: the table with its marks, the alignment of its columns, and how an operating point reads."""

from __future__ import annotations

import pandas as pd

from experiments.measure.metrics import CLIENT_LAG_MS, CLIENT_LATE_SHARE, OVERLOAD_FRACTION, SERVER_COUNT_TOLERANCE
from experiments.report import marks, tables
from experiments.report.data import SweepData, open_loop
from experiments.report.render import Document, count, format_frame, ms, rate
from experiments.report.tables import MARKS, P50, P99, POINT, THROUGHPUT

STACK_NOTE = ("A stack is `backend variant/protocol/input format`; `b` is the batch size; a load is `cN` (N "
              "closed-loop request loops) or `poisson-rR` / `constant-rR` (open-loop arrivals at R req/s; `trace-rR`: "
              "a trace replayed with its peak at R req/s).")


def marked_table(doc: Document, out: pd.DataFrame, numeric: list[bool], figure_marks: pd.DataFrame | pd.Series,
                 what: str = "figures") -> None:
    """A table, then what its marks mean and how many of its figures carry each (nothing when none do)."""
    doc.table(out, numeric)
    legend = marks.legend(figure_marks, what)
    if legend:
        doc.p(legend)


def load_marks(out: pd.DataFrame, trial_marks: pd.Series) -> pd.DataFrame:
    """Marks for a row table (one trial per row, in order): on its `load` cell, for the whole row."""
    return pd.DataFrame({"load": trial_marks.to_numpy()}, index=out.index)


def numeric(frame: pd.DataFrame, first_text: int) -> list[bool]:
    """Alignment of a table whose first `first_text` columns are text: numbers to the right."""
    return [False] * first_text + [True] * (frame.shape[1] - first_text)


def point_numeric(frame: pd.DataFrame) -> list[bool]:
    """Alignment of a table that starts with an operating point (stack, batch, load): numbers to the right."""
    return [False, True, False] + [True] * (frame.shape[1] - 3)


def overloaded_section(doc: Document, data: SweepData, labels: dict[str, str], throughput: str = THROUGHPUT,
                       unit: str = "img/s") -> None:
    """The overloaded trials, apart, with what arrived, what was served and how far the backlog grew; `throughput`
    is the figure they served, shown as `unit` (a generative sweep's: output_tokens_s, output tok/s)."""
    rows = data.ok[data.ok["overloaded"]]
    if rows.empty:
        return
    doc.h(1, "Overloaded trials")
    doc.p(f"Open-loop trials that fell behind their arrivals ({marks.OVERLOADED}): fewer requests ended (answered or "
          f"refused) than arrived, so the backlog of unserved requests grew across the windows (by more than "
          f"{OVERLOAD_FRACTION:.0%} of the arrivals, and more than twice their Poisson noise). Their throughput is "
          "what the server served flat out, its capacity (unless the client fell behind: below); their latency only "
          "grows with the length of the trial. So they are left out of the answer, the Pareto frontier and every "
          f"cost figure. Where the client itself fell behind its schedule (more than {CLIENT_LATE_SHARE:.0%} of the "
          f"arrivals sent late while its own timer ran p99 {CLIENT_LAG_MS:g} ms late or more), what it served is a "
          "lower bound on the server's capacity, and “why” says so.")
    frame = pd.DataFrame({
        "tier": rows["tier"].map(lambda t: labels.get(t, t)), "stack": rows["stack"], "b": rows["batch_size"],
        "load": rows["load"].astype(str), "offered req/s": rows.get("offered_rate_rps"),
        "served req/s": rows.get("requests_s"), unit: rows[throughput],
        "backlog growth": rows.get("backlog_growth_requests"), "p50 ms": rows[P50],
        "why": [_why(row) for _, row in rows.iterrows()],
    })
    out = format_frame(frame, {"offered req/s": rate, "served req/s": rate, unit: rate, "p50 ms": ms,
                               "backlog growth": count})
    doc.table(out, [False, False, True, False, True, True, True, True, True, False])


def _why(row: pd.Series) -> str:
    """What arrived and what was served, and whether the client was what fell behind."""
    text = (f"{row['offered_rate_rps']:.1f} req/s arrived, {row['requests_s']:.1f} served: "
            f"{row['backlog_growth_requests']:.0f} more requests waiting at the end")
    if row["client_behind"]:
        text += (f"; the client fell behind its schedule ({row['late_fraction']:.0%} sent late, its timer p99 "
                 f"{row['client_loop_lag_p99_ms_max']:.0f} ms late)")
    return text


def open_loop_table(doc: Document, ok: pd.DataFrame) -> None:
    """Open-loop trials: target, offered (scheduled), achieved (sent) and served rates with their latency."""
    frame = tables.open_loop(ok)
    if frame.empty:
        return
    doc.h(2, "Open-loop trials: offered vs served")
    doc.p("Target: the configured rate; offered: arrivals scheduled in the windows; achieved: requests sent in "
          "them; img/s: images whose requests completed in them (what the server served). Backlog growth = "
          "arrivals − completions over the windows; server/client: the server's own count of served images over "
          "the clients'.")
    rows = ok[open_loop(ok)].set_index(POINT).sort_index()
    frame = frame.assign(overloaded=rows["overloaded"].map({True: f"yes {marks.OVERLOADED}", False: "no"}),
                         stable=rows["unstable"].map({True: f"no {marks.UNSTABLE}", False: "yes"}))
    names = {"target_rate_rps": "target req/s", "offered_rate_rps": "offered req/s",
             "achieved_rate_rps": "achieved req/s", THROUGHPUT: "img/s", P50: "p50 ms", P99: "p99 ms",
             "server_queue_ms": "server queue ms", "backlog_growth_requests": "backlog growth",
             "server_count_ratio": "server/client"}
    frame = frame.rename(columns=names)
    formats = {c: rate for c in ("target req/s", "offered req/s", "achieved req/s", "img/s")}
    out = format_frame(frame.reset_index().rename(columns={"batch_size": "b"}),
                       formats | {"p50 ms": ms, "p99 ms": ms, "server queue ms": ms, "backlog growth": count,
                                  "server/client": lambda v: f"{v:.3f}" if pd.notna(v) else "—"})
    marked_table(doc, out, point_numeric(out)[:-2] + [False, False], rows[MARKS], "trials")


def server_count_note(doc: Document, ok: pd.DataFrame) -> None:
    """Trials where the server's own count of served images disagreed with the clients' (tag
    `server_count_mismatch`): one of the two counts is wrong, so the trial's throughput is in doubt."""
    off = ok[ok["server_count_mismatch"]]
    if off.empty:
        return
    names = ", ".join(f"{r.stack}/b{r.batch_size}/{r.load} ({r.server_count_ratio:.3f})" for r in off.itertuples())
    doc.note(f"**Server and clients disagree** on the images served (by more than {SERVER_COUNT_TOLERANCE:.0%}) "
             f"in {len(off)} trial(s), server/client: {names}, more than the reads of its counters can move. Their "
             "throughput is in doubt.")

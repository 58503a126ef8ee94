"""A generative sweep's section for one tier: its price, its token table (per trial: TTFT, ITL, TPOT and end-to-end
latency, output tokens/s, requests/s, errors, goodput, cost per 1M tokens, who counted the tokens, answers shorter
than asked and tokens per streamed event), what those last two mean where they call for it, the open-loop trials'
rates, and every point's cost at each listed price of the tier."""

from __future__ import annotations

import pandas as pd

from experiments.measure.intervals import metric_names
from experiments.report.data import NODES, SweepData, TierInfo, nodes
from experiments.report.generative.cost_section import STACK_NOTE
from experiments.report.generative.points import (
    COST,
    OUTPUT_RATE,
    PACKED_EVENTS,
    POINT,
    SHORT_SHARE,
    TOKENS_PER_EVENT,
    TOTAL_COST,
    at_price,
    priced_points,
)
from experiments.report.marks import OVERLOADED, UNSTABLE
from experiments.report.noise import interval_ends
from experiments.report.render import MISSING_CELL, Document, count, format_frame, ms, rate, usd
from experiments.report.served import load_marks, marked_table
from experiments.report.tables import MARKS
from serving.node import busy_elsewhere

# The token table: figure -> its column, in order (those no trial of the tier carries are left out).
TOKEN_COLUMNS = {
    "ttft_p50_ms": "TTFT p50 ms", "ttft_p99_ms": "TTFT p99 ms", "itl_p50_ms": "ITL p50 ms", "itl_p99_ms": "ITL p99 ms",
    "tpot_p50_ms": "TPOT p50 ms", "tpot_p99_ms": "TPOT p99 ms", "latency_p50_ms": "e2e p50 ms",
    "latency_p99_ms": "e2e p99 ms", OUTPUT_RATE: "output tok/s", "requests_s": "req/s", "error_rate": "errors",
    "goodput_share": "goodput", COST: "$/1M out", TOTAL_COST: "$/1M total", "tokens_counted_by": "counted by",
    SHORT_SHARE: "short", TOKENS_PER_EVENT: "tok/event",
}


TOKEN_COST_ENDS = tuple(end for cost in (COST, TOTAL_COST) for end in metric_names(cost))


def _share(value: object) -> str:
    return MISSING_CELL if value is None or pd.isna(value) else f"{float(value):.1%}"


FORMATS = {column: ms for column in TOKEN_COLUMNS.values() if column.endswith(" ms")} | {
    "output tok/s": rate, "req/s": rate, "errors": _share, "goodput": _share, "$/1M out": usd, "$/1M total": usd,
    "short": _share, "tok/event": lambda v: MISSING_CELL if pd.isna(v) else f"{float(v):.2f}"}


def tier_section(doc: Document, data: SweepData, ok: pd.DataFrame, tier: str) -> None:
    """The tier's tables from its `ok` trials."""
    info = data.tiers[tier]
    doc.h(1, f"Tier {info.label}")
    primary = info.prices[0] if info.prices else None
    price = f"${primary.usd_per_hour:g}/h ({primary.source or 'no source given'}" + (
        f", seen {primary.seen})" if primary.seen else ")") if primary else "unknown"
    doc.p(f"{info.display_name or tier}; measured on `{info.gpu_name or 'unknown'}`. Primary price {price}. "
          f"{STACK_NOTE}")
    if info.emulated:
        doc.note("Emulated tier: these numbers come from an emulated node, not from the named GPU.")
    if busy_elsewhere(info.cpu_busy_before, info.cpu_count):
        doc.note(f"**Busy node**: {info.cpu_busy_before:.1f} of its {info.cpu_count} cores were busy before this "
                 "tier's job started anything on it. Its servers and clients shared the CPU with that work, and these "
                 "figures include it.")
    rows = ok.sort_values(POINT).reset_index(drop=True)
    priced = priced_points(rows[~rows["overloaded"]], {tier: info.prices})
    _token_table(doc, rows, at_price(priced))
    _callouts(doc, rows)
    _open_loop(doc, rows)
    _costs(doc, priced, info)


def _token_table(doc: Document, rows: pd.DataFrame, primary: pd.DataFrame) -> None:
    doc.h(2, "Tokens: latency, throughput and cost per trial")
    doc.p("TTFT: from when the request was due to its first output token (streamed answers only); ITL: every gap "
          "between two events that carried output; TPOT: (end to end − TTFT) / (output tokens − 1) per request; e2e: "
          "the whole answer. Output tok/s and req/s: what completed inside the windows; errors: failed share of the "
          "requests; goodput: share answered within the sweep's TTFT and TPOT targets (where it had some); costs at "
          f"the primary price, none for an overloaded trial ({OVERLOADED}); counted by: who counted the tokens "
          "(`usage`: the server's, `tokenizer`: the model's tokenizer, `events`: one per streamed event); short: the "
          "share of answers shorter than asked; tok/event: output tokens per streamed event.")
    # Costs at the primary price, recomputed for every point (none where it overloaded, or the tier has no price).
    frame = rows.drop(columns=[c for c in (COST, TOTAL_COST, *TOKEN_COST_ENDS) if c in rows])
    if primary.empty:
        frame = frame.assign(**{COST: float("nan"), TOTAL_COST: float("nan")})
    else:
        frame = frame.join(primary.set_index(POINT)[[COST, TOTAL_COST, *_ends(primary)]], on=POINT)
    shown = {m: c for m, c in TOKEN_COLUMNS.items() if m in frame and frame[m].notna().any()}
    table = frame[[*POINT, *shown]].rename(columns=shown).assign(load=frame["load"].astype(str))
    out = format_frame(table, FORMATS, marks=load_marks(table, frame[MARKS]),
                       intervals=interval_ends(frame, {m: c for m, c in shown.items()}))
    text = {"stack", "counted by"}
    marked_table(doc, out, [c not in text and c != "load" for c in out.columns], frame[MARKS], "trials")


def _ends(frame: pd.DataFrame) -> list[str]:
    """The cost columns' interval ends a priced frame carries."""
    return [c for c in TOKEN_COST_ENDS if c in frame.columns]


def _callouts(doc: Document, rows: pd.DataFrame) -> None:
    """Answers shorter than asked (the server did not pin the length), and tokens packed per event (ITL per event)."""
    if SHORT_SHARE in rows:
        short = rows[pd.to_numeric(rows[SHORT_SHARE], errors="coerce") > 0]
        if not short.empty:
            pinned = ", ".join(sorted(short["endpoint_pin_output"].dropna().astype(str).unique())) \
                if "endpoint_pin_output" in short else ""
            doc.note("**Answers shorter than asked**: "
                     + "; ".join(f"{r.stack} · {r.load}: {_share(getattr(r, SHORT_SHARE))} of its requests "
                                 f"({float(r.output_tokens_mean):.1f} output tokens on average of "
                                 f"{float(r.requested_tokens_mean):.1f} asked)" for r in short.itertuples())
                     + ". The server did not pin the length" + (f" (`endpoint_pin_output` = {pinned})" if pinned
                                                                 else "")
                     + ": the model stopped early, so these trials' output tokens per request, tokens/s and cost per "
                     "request are the model's, not the prompt set's, and set beside another server's they compare "
                     "different answers.")
    if TOKENS_PER_EVENT in rows:
        packed = rows[pd.to_numeric(rows[TOKENS_PER_EVENT], errors="coerce") > PACKED_EVENTS]
        if not packed.empty:
            doc.note("**Several tokens per streamed event**: "
                     + "; ".join(f"{r.stack} · {r.load}: {float(getattr(r, TOKENS_PER_EVENT)):.2f}"
                                 for r in packed.itertuples())
                     + f" output tokens per event (more than {PACKED_EVENTS:g}). Their ITL is the gap between events, "
                     "not between tokens: compare TPOT across servers instead.")


def _open_loop(doc: Document, rows: pd.DataFrame) -> None:
    """Open-loop trials: the rates asked, offered, sent and served, and whether the server kept up."""
    opened = rows[rows["load_mode"].astype(str) != "closed"]
    if opened.empty:
        return
    doc.h(2, "Open-loop trials: offered vs served")
    doc.p("Target: the configured rate; offered: arrivals scheduled in the windows; achieved: requests sent in them; "
          "served: requests that completed in them, and their output tokens. Backlog growth = arrivals − completions "
          "over the windows.")
    names = {"target_rate_rps": "target req/s", "offered_rate_rps": "offered req/s",
             "achieved_rate_rps": "achieved req/s", "requests_s": "served req/s", OUTPUT_RATE: "output tok/s",
             "backlog_growth_requests": "backlog growth"}
    shown = {m: c for m, c in names.items() if m in opened}
    frame = opened[[*POINT, *shown]].rename(columns=shown).assign(
        load=opened["load"].astype(str),
        overloaded=opened["overloaded"].map({True: f"yes {OVERLOADED}", False: "no"}),
        stable=opened["unstable"].map({True: f"no {UNSTABLE}", False: "yes"}))
    out = format_frame(frame, {c: (count if c == "backlog growth" else rate) for c in shown.values()})
    marked_table(doc, out, [False, False, *([True] * len(shown)), False, False], opened[MARKS], "trials")


def _costs(doc: Document, priced: pd.DataFrame, info: TierInfo) -> None:
    """Every point at each listed price of the tier: $ per 1M output tokens and per 1M tokens."""
    doc.h(2, "Cost per 1M tokens at each listed price")
    if priced.empty:
        doc.p("No trial on this tier has a cost figure: every one overloaded its server (see “Overloaded trials”), or "
              "the tier has no price.")
        return
    columns: dict[str, pd.Series] = {}
    lows: dict[str, pd.Series] = {}
    highs: dict[str, pd.Series] = {}
    for price in info.prices:
        at = priced[priced["price"] == price.name].set_index(POINT)
        for cost, short in ((COST, "out"), (TOTAL_COST, "total")):
            name = f"$/1M {short} @{price.name} (${price.usd_per_hour:g}/h)"
            columns[name] = at[cost]
            low, high = f"{cost}_ci_low", f"{cost}_ci_high"
            if low in at and high in at:
                lows[name], highs[name] = at[low], at[high]
    frame = pd.DataFrame(columns).sort_index()
    first = at_price(priced).set_index(POINT).reindex(frame.index)
    frame.insert(0, "output tok/s", first[OUTPUT_RATE])
    ends = (pd.DataFrame(lows).reindex(frame.index), pd.DataFrame(highs).reindex(frame.index)) if lows else None
    out = format_frame(frame, {"output tok/s": rate} | {c: usd for c in columns},
                       best={c: "min" for c in columns}, marks=pd.DataFrame({"output tok/s": first[MARKS]}),
                       intervals=ends).reset_index()
    out["load"] = out["load"].astype(str)
    marked_table(doc, out, [False, False, *([True] * (out.shape[1] - 2))], first[MARKS], "points")
    fleets = first[pd.Series(nodes(first), index=first.index) > 1]
    if not fleets.empty:
        served = ", ".join(f"`{stack}` ({n} nodes)" for stack, n in
                           fleets.reset_index().groupby("stack")[NODES].first().items())
        doc.p(f"Served by several nodes behind one URL: {served}. Each of their figures is priced at the node count × "
              "the column's price per hour.")

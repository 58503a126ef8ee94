"""A generative sweep's "How close to the engine's limit": per tier and launched backend, its best served point set
against the engine it runs, timed in-process on the same node (the token ceiling, experiments/run/token_ceiling.py):
the engine's output tokens/s at the batch the server generated, the served output tokens/s, the share, and the
verdict on what held it back with its numbers and the settings that would move it
(`experiments.measure.token_efficiency`). Every figure is the trial's own, as the sweep logged it: nothing is
computed again here. A sweep without any (endpoints only, or the ceiling off) has no such section."""

from __future__ import annotations

import pandas as pd

from experiments.measure.efficiency import ABOVE_CEILING
from experiments.measure.token_efficiency import ENGINE_BATCH, ENGINE_OUTPUT_TOKENS_S, SHARE, VERDICTS
from experiments.report.ceiling_section import RUNTIME, level, outran, percent
from experiments.report.data import SweepData
from experiments.report.generative.points import OUTPUT_RATE
from experiments.report.marks import suffix
from experiments.report.render import MISSING_CELL, Document, rate
from experiments.report.tables import figure, stable_first

ENDPOINT = "endpoint"  # the `backend` of a server tierbench did not start: its engine is not tierbench's to time
INTRO = ("Each engine a tier's launched servers run was timed in-process on the tier's node before any server started "
         "(no server, no client, no HTTP), at the prompts' mean lengths and at the batches the trials reach. A trial "
         "is set against it at the batch its server generated (the server's own average where it counts its "
         "generates, else the conversations in flight up to the engine's limit): “of engine” is its served output "
         "tokens/s over the engine's there. Each backend's row is its point that served the most output tokens/s "
         "(stable ones first). The verdict is the first rule that applies, in this order: "
         + ", ".join(str(v) for v in VERDICTS) + " (docs/generative-stacks.md).")
OUTRAN = (f"{{n}} trial(s) here served more than their engine in-process by over {(ABOVE_CEILING - 1) * 100:.0f} %: "
          "no server outruns its engine, so that in-process figure reads low there (the node busy while it was timed, "
          "or a batch read between two timed), and their share is no measure of what is left.")


def with_engine(rows: pd.DataFrame) -> pd.DataFrame:
    """Trials set against their engine in-process: its key named and its output tokens/s at their batch logged."""
    named = rows[RUNTIME].fillna("").astype(str) != "" if RUNTIME in rows else pd.Series(False, index=rows.index)
    return rows[named & figure(rows, ENGINE_OUTPUT_TOKENS_S).notna() & figure(rows, SHARE).notna()]


def _batch(row: pd.Series) -> str:
    return f"{float(row[ENGINE_BATCH]):.3g}" if pd.notna(row.get(ENGINE_BATCH)) else MISSING_CELL


def _share(row: pd.Series) -> str:
    return percent(row[SHARE]) + (", reads low" if outran(row) else ", level" if level(row) else "")


def _point(row: pd.Series) -> str:
    """`http/chat_stream · c4` (and its marks): a point within its backend's row."""
    return f"{row['protocol']}/{row['input_format']} · {row['load']}{suffix(row.get('marks'))}"


def _best(trials: pd.DataFrame) -> pd.Series:
    """The point that served the most output tokens/s: sustained and stable ones first."""
    sustained = trials[~trials["overloaded"].astype(bool)]
    pool = stable_first(sustained if not sustained.empty else trials)
    return pool.loc[figure(pool, OUTPUT_RATE).fillna(0).idxmax()]


def _each_trial(trials: pd.DataFrame) -> str:
    """`c1: load, 75 %; c8: queue, 85 %`: every trial of a backend, its verdict and share."""
    rows = trials.sort_values(["protocol", "input_format", "load"])
    several = rows[["protocol", "input_format"]].drop_duplicates().shape[0] > 1
    return "; ".join(f"{_point(r) if several else str(r['load']) + suffix(r.get('marks'))}: "
                     f"{r.get('bottleneck') or 'no verdict'}, {percent(r[SHARE])}" for _, r in rows.iterrows())


def _tier(doc: Document, ok: pd.DataFrame, label: str) -> None:
    doc.h(2, f"Tier {label}")
    timed = with_engine(ok)
    rows, items = [], []
    for backend, trials in timed.groupby("variant", sort=True):
        best = _best(trials)
        rows.append({"backend": f"`{backend}`", "engine": f"`{best[RUNTIME]}`", "point": _point(best),
                     "batch generated": _batch(best),
                     "engine in-process output tok/s": rate(best[ENGINE_OUTPUT_TOKENS_S]),
                     "served output tok/s": rate(best[OUTPUT_RATE]), "of engine": _share(best),
                     "verdict": best.get("bottleneck") or MISSING_CELL})
        verdict = best.get("bottleneck")
        said = (f"**{verdict}**: {best.get('bottleneck_evidence') or 'no evidence logged'}. Fix: "
                f"{best.get('bottleneck_fix') or 'none logged'}." if verdict else "no verdict logged.")
        items.append(f"`{backend}` at {_point(best)}: {said}"
                     + (f" Each trial: {_each_trial(trials)}." if len(trials) > 1 else ""))
    doc.table(pd.DataFrame(rows), [False, False, False, True, True, True, True, False])
    doc.bullets(items)
    if count := int(timed.apply(outran, axis=1).sum()):
        doc.p(OUTRAN.format(n=count))
    _not_timed(doc, ok[~ok.index.isin(timed.index)])


def _not_timed(doc: Document, rest: pd.DataFrame) -> None:
    """The tier's backends whose trials carry no in-process figure, and why that can be."""
    if rest.empty:
        return
    parts = []
    for backend, trials in rest.groupby("variant", sort=True):
        endpoint = (trials["backend"].astype(str) == ENDPOINT).all() if "backend" in trials else False
        parts.append(f"`{backend}` ({len(trials)} trial(s): "
                     + ("an endpoint, whose engine tierbench does not run)" if endpoint else
                        "no in-process figure to set them against: the engine was not timed, with "
                        "`ceiling.enabled=false` or where its timing failed (the tier run's `ceiling.json` says why), "
                        "or not at their batch)"))
    doc.p("Not set against an engine: " + "; ".join(parts) + ".")


def summary_line(sustained: pd.DataFrame, labels: dict[str, str]) -> str | None:
    """`closest to its engine: l4 · serve_transformers/http/chat_stream · c8: 85 % of <engine>'s in-process output
    tokens/s at batch 4 (bottleneck: queue)`: the sustained point nearest its engine (stable ones first, and points
    that did not outrun it); None without one."""
    rows = with_engine(sustained)
    if rows.empty:
        return None
    rows = stable_first(rows)
    believable = rows[~rows.apply(outran, axis=1)]
    rows = believable if not believable.empty else rows
    row = rows.loc[figure(rows, SHARE).idxmax()]
    line = (f"closest to its engine: {labels.get(row['tier'], row['tier'])} · {row['stack']} · {row['load']}: "
            f"{percent(row[SHARE])} of {row[RUNTIME]}'s in-process output tokens/s at batch {_batch(row)}")
    return line + (f" (bottleneck: {row['bottleneck']})" if row.get("bottleneck") else "")


def ceiling_section(doc: Document, data: SweepData, labels: dict[str, str]) -> list[str]:
    """Add the section where some trial was set against its engine; returns its summary line (none otherwise: an
    endpoint's engine is not tierbench's to time, so there is nothing to say)."""
    ok = data.ok
    if with_engine(ok).empty:
        return []
    doc.h(1, "How close to the engine's limit")
    line = summary_line(data.sustained, labels)
    if line is not None:
        doc.p(f"**{line[0].upper()}{line[1:]}.**")
    doc.p(INTRO)
    for tier in sorted(data.tiers):
        trials = ok[ok["tier"] == tier]
        if with_engine(trials).empty:
            if not trials.empty:
                doc.h(2, f"Tier {labels.get(tier, tier)}")
                _not_timed(doc, trials)
            continue
        _tier(doc, trials, labels.get(tier, tier))
    return [line] if line is not None else []

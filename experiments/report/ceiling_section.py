"""The report's "How close to the GPU's limit": each served figure set against the same runtime timed in-process on
the same node (`experiments.measure.ceiling`), one table row per runtime and tier, then what held the trials back
(the verdict each trial carries, `experiments.measure.efficiency`) with the setting that would move it. Also each
tier's floor (what an image would cost at its best in-process throughput: the Pareto plot draws it) and the one-line
efficiency of the answer's pick. A sweep without ceiling figures gets one line saying why."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from experiments.config.prices import Price, cost_per_1k_images
from experiments.measure.efficiency import ABOVE_CEILING, Bottleneck, above_ceiling, level_with_ceiling
from experiments.report.data import SweepData
from experiments.report.marks import suffix
from experiments.report.render import MISSING_CELL, Document, ms, rate, usd, usd_per_hour
from experiments.report.tables import THROUGHPUT, figure, stable_first

RUNTIME, SHARE = "ceiling_runtime", "ceiling_share"
# Where a runtime computes, as its key names it (`serving.runtime.Runtime.key`): these places are not a GPU.
CPU_PLACES = frozenset({"cpu", "CPUExecutionProvider"})
VERDICT_ORDER = [str(b) for b in Bottleneck]  # the order the rules are tried in
EMPTY = ("No trial carries an in-process ceiling, so there is nothing to set the served figures against: the sweep "
         "ran with `ceiling.enabled=false`, was logged before the ceiling was measured, or no runtime could be timed "
         "on its nodes (each tier run's `ceiling.json` says why).")
ROUND_TRIP_TEXT = ("Each runtime this tier's servers run was timed in-process on the same node before any server "
                   "started: no server, no client, no network. The **round trip** (a batch in host memory in, its "
                   "logits back in host memory) is what a server pays per forward pass")
GPU_TEXT = ("; **device-resident** (input already on the GPU, output left there) is the GPU's own limit with that "
            "runtime. A served point's share is its img/s over the round trip at the batch the server computed; "
            "“of best” is over the runtime's best batch.")
CPU_TEXT = (". This tier computes on its CPU: there is no device memory to keep a batch in, so the round trip is the "
            "hardware's own limit. A served point's share is its img/s over it at the batch the server computed; "
            "“of best” is over the runtime's best batch.")


@dataclass(frozen=True)
class Floor:
    """What an image would cost on a tier kept busy at its best in-process throughput: no server on it costs less."""

    tier: str
    img_s: float
    resident: bool  # the device-resident best (the GPU's own limit), else the round trip's
    usd_per_hour: float  # the tier's primary price

    @property
    def usd_per_1k(self) -> float:
        return float(cost_per_1k_images(self.usd_per_hour, self.img_s))


def _text(rows: pd.DataFrame, name: str) -> pd.Series:
    return rows[name].fillna("").astype(str) if name in rows else pd.Series("", index=rows.index, dtype=object)


def percent(share: object) -> str:
    """A share as `47 %` (two figures below 10 %, where a rounded 0 would read as nothing); a dash where missing."""
    if share is None or pd.isna(share):
        return MISSING_CELL
    value = float(share) * 100
    return f"{value:.0f} %" if value >= 10 else f"{value:.2g} %"


def on_gpu(runtime: str) -> bool:
    """Whether a runtime key (`torch/cuda/fp16`, `onnxruntime/CPUExecutionProvider/fp32`) computes on a GPU."""
    parts = runtime.split("+")[0].split("/")
    return len(parts) > 1 and parts[1] not in CPU_PLACES


def outran(row: pd.Series) -> bool:
    """Whether a served point is above its runtime's in-process timing by more than it can be (it reads low there)."""
    return above_ceiling(row.get(SHARE), row.get("ceiling_share_resident"))


def level(row: pd.Series) -> bool:
    """Whether a served point is past its runtime's in-process timing by no more than that timing's noise."""
    return level_with_ceiling(row.get(SHARE), row.get("ceiling_share_resident"))


def _outran(rows: pd.DataFrame) -> pd.Series:
    return rows.apply(outran, axis=1) if not rows.empty else pd.Series(False, index=rows.index, dtype=bool)


OUTRAN_TEXT = (f"{{n}} served point(s) here outran their runtime in-process by more than "
               f"{(ABOVE_CEILING - 1) * 100:.0f} %: "
               "a server cannot, so the in-process timing reads low there (timed while other work slowed the node, "
               "or a noisy point), and those shares are not the hardware's limit. Time the runtime again on a quiet "
               "node, `python -m runners.ceiling ceiling.cache=false` with the sweep's overrides: later sweeps on "
               "the node use that timing.")
LEVEL_TEXT = (f"{{n}} served point(s) here read above 100 % of their runtime in-process, by no more than "
              f"{(ABOVE_CEILING - 1) * 100:.0f} %: no server passes the runtime it serves, so read them as level with "
              "it (the in-process timing takes seconds, on a node that other work may slow).")


def with_ceiling(rows: pd.DataFrame) -> pd.DataFrame:
    """Trials set against a ceiling: their runtime named and its round-trip figures logged."""
    return rows[(_text(rows, RUNTIME) != "") & figure(rows, "ceiling_best_img_s").notna()]


def tier_floors(rows: pd.DataFrame, prices: dict[str, list[Price]]) -> dict[str, Floor]:
    """Per priced tier with a ceiling: its floor at its primary price, from the largest device-resident best among
    its trials, else the largest round-trip best."""
    floors = {}
    for tier, trials in rows.groupby("tier", sort=True):
        listed = prices.get(str(tier)) or []
        resident = figure(trials, "ceiling_resident_best_img_s").max()
        best = resident if pd.notna(resident) else figure(trials, "ceiling_best_img_s").max()
        if listed and listed[0].usd_per_hour > 0 and pd.notna(best) and best > 0:
            floors[str(tier)] = Floor(str(tier), float(best), pd.notna(resident), listed[0].usd_per_hour)
    return floors


def closest(sustained: pd.DataFrame) -> pd.Series | None:
    """The served point nearest its runtime's ceiling at its batch (stable trials first, and points that did not
    outrun their ceiling)."""
    rows = sustained[figure(sustained, SHARE).notna()]
    if rows.empty:
        return None
    rows = stable_first(rows)
    believable = rows[~_outran(rows)]
    rows = believable if not believable.empty else rows
    return rows.loc[figure(rows, SHARE).idxmax()]


def share_sentence(row: pd.Series) -> str:
    """` It reaches 47 % of its runtime's in-process throughput at batch 8 (`runtime`; bottleneck: queue).`, for the
    answer's pick; '' when it was not set against a ceiling."""
    share = row.get(SHARE)
    if share is None or pd.isna(share):
        return ""
    batch = row.get("ceiling_batch")
    at = f" at batch {float(batch):.3g}" if batch is not None and pd.notna(batch) else ""
    details = [f"`{row[RUNTIME]}`"] if row.get(RUNTIME) else []
    if row.get("bottleneck"):
        details.append(f"bottleneck: {row['bottleneck']}")
    sentence = (f" It reaches {percent(share)} of its runtime's in-process throughput{at}"
                + (f" ({'; '.join(details)})" if details else ""))
    if outran(row):
        return sentence + ": more than a server can, so that in-process timing reads low (see its section)."
    if level(row):
        return sentence + ": level with that in-process timing, within its noise (see its section)."
    return sentence + "."


def _point(row: pd.Series) -> str:
    """An operating point within its tier, as the answer names points: `stack · b8 · c4` (and its marks)."""
    return f"{row['stack']} · b{row['batch_size']} · {row['load']}{suffix(row.get('marks'))}"


def _at(value: object, batch: object) -> str:
    return MISSING_CELL if pd.isna(value) else f"{rate(value)} (b{float(batch):g})"


def _runtime_row(runtime: str, trials: pd.DataFrame, sustained: pd.DataFrame) -> dict[str, str]:
    """One runtime on one tier: its in-process figures, then its best sustained point (the most img/s) against them."""
    best = trials.loc[figure(trials, "ceiling_best_img_s").idxmax()]
    resident = figure(trials, "ceiling_resident_best_img_s")
    top = trials.loc[resident.idxmax()] if resident.notna().any() else None
    row = {"runtime": f"`{runtime}`", "in-process b1 p50 ms": ms(figure(trials, "ceiling_b1_p50_ms").max()),
           "best round trip img/s": _at(best["ceiling_best_img_s"], best.get("ceiling_best_batch")),
           "best device-resident img/s": MISSING_CELL if top is None else _at(
               top["ceiling_resident_best_img_s"], top.get("ceiling_resident_best_batch"))}
    if sustained.empty:
        return row | {"best served point": "none sustained its load"}
    pick = stable_first(sustained)
    pick = pick.loc[figure(pick, THROUGHPUT).idxmax()]
    share, busy = pick.get(SHARE), pick.get("gpu_util_pct")
    return row | {"best served point": _point(pick), "served img/s": rate(pick[THROUGHPUT]),
                  "of round trip at its batch": MISSING_CELL if pd.isna(share) else
                  f"{percent(share)} (b{float(pick['ceiling_batch']):.3g})"
                  + (", reads low" if outran(pick) else ", level" if level(pick) else ""),
                  "of runtime's best": percent(pick.get("ceiling_share_best")),
                  "GPU busy %": MISSING_CELL if busy is None or pd.isna(busy) else f"{float(busy):.0f}",
                  "verdict": pick.get("bottleneck") or MISSING_CELL}


RUNTIME_COLUMNS = ["runtime", "in-process b1 p50 ms", "best round trip img/s", "best device-resident img/s",
                   "best served point", "served img/s", "of round trip at its batch", "of runtime's best", "GPU busy %",
                   "verdict"]
GPU_ONLY = ("best device-resident img/s", "GPU busy %")  # no such figure on a CPU: left out, not a column of dashes


def _runtime_table(doc: Document, timed: pd.DataFrame, sustained: pd.DataFrame, gpu: bool) -> None:
    rows = [_runtime_row(runtime, trials, sustained[_text(sustained, RUNTIME) == runtime])
            for runtime, trials in timed.groupby(RUNTIME, sort=True)]
    columns = [c for c in RUNTIME_COLUMNS if gpu or c not in GPU_ONLY]
    table = pd.DataFrame(rows).reindex(columns=columns).fillna(MISSING_CELL)
    doc.table(table, [c.endswith(("ms", "img/s", "%", "batch", "best")) for c in columns])


def _verdicts(doc: Document, rows: pd.DataFrame) -> None:
    """How many trials got each verdict, its fix, and one example with the numbers that decided it."""
    verdict = _text(rows, "bottleneck")
    tagged = rows[verdict != ""]
    if tagged.empty:
        doc.p("No trial on this tier carries a verdict on what held it back.")
        return
    doc.p(f"What held each trial back ({len(tagged)} of {len(rows)} successful trials carry a verdict), decided from "
          "the trial's own figures, the first rule that applies: client, compute, cpu, then the largest of queue, "
          "proxy and transport, else load:")
    names = sorted(set(verdict[verdict != ""]), key=lambda v: (VERDICT_ORDER.index(v) if v in VERDICT_ORDER
                                                               else len(VERDICT_ORDER), v))
    items = []
    for name in names:
        group = tagged[verdict[tagged.index] == name]
        fixes = [f for f in _text(group, "bottleneck_fix") if f]
        fix = fixes[0] if fixes else (Bottleneck(name).fix if name in VERDICT_ORDER else "none logged")
        sustained = group[~group["overloaded"].astype(bool)]
        pool = stable_first(sustained if not sustained.empty else group)
        example = pool.loc[figure(pool, THROUGHPUT).fillna(0).idxmax()]
        evidence = example.get("bottleneck_evidence") or "no evidence logged"
        items.append(f"**{name}**: {len(group)} trial(s). Fix: {fix}. E.g. {_point(example)}: {evidence}.")
    doc.bullets(items)


def _tier(doc: Document, data: SweepData, tier: str, label: str, floor: Floor | None) -> None:
    ok = data.ok[data.ok["tier"] == tier]
    timed = with_ceiling(ok)
    doc.h(2, f"Tier {label}")
    if timed.empty:
        doc.p("No trial on this tier carries an in-process ceiling (the ceiling was off, or no runtime of it could "
              "be timed: the tier run's `ceiling.json` says why).")
    else:
        gpu = any(on_gpu(r) for r in timed[RUNTIME]) or figure(timed, "ceiling_resident_best_img_s").notna().any()
        text = ROUND_TRIP_TEXT + (GPU_TEXT if gpu else CPU_TEXT)
        if floor is not None:
            text += (f" Kept busy at its best in-process throughput ({rate(floor.img_s)} img/s, "
                     f"{'device-resident' if floor.resident else 'round trip'}), this tier would cost "
                     f"{usd(floor.usd_per_1k)} per 1k images at its primary price ({usd_per_hour(floor.usd_per_hour)}"
                     "/h): its floor, which no server on it can beat.")
        doc.p(text)
        sustained = data.sustained[data.sustained["tier"] == tier]
        _runtime_table(doc, timed, with_ceiling(sustained), gpu)
        if count := int(_outran(timed).sum()):
            doc.p(OUTRAN_TEXT.format(n=count))
        if count := int(timed.apply(level, axis=1).sum()):
            doc.p(LEVEL_TEXT.format(n=count))
    _verdicts(doc, ok)


def summary_line(sustained: pd.DataFrame, labels: dict[str, str]) -> str | None:
    """`closest to the ceiling: <point>: 62 % of <runtime>'s in-process throughput at b8 (bottleneck: queue)`."""
    row = closest(sustained)
    if row is None:
        return None
    line = (f"closest to the ceiling: {labels.get(row['tier'], row['tier'])} · {_point(row)}: {percent(row[SHARE])} "
            f"of {row.get(RUNTIME) or 'its runtime'}'s in-process throughput at b{float(row['ceiling_batch']):.3g}")
    line += f" (bottleneck: {row['bottleneck']})" if row.get("bottleneck") else ""
    if outran(row):
        return line + ", more than a server can: that in-process timing reads low"
    return line + (", level with that in-process timing, within its noise" if level(row) else "")


def ceiling_section(doc: Document, data: SweepData, labels: dict[str, str], floors: dict[str, Floor]) -> list[str]:
    """Add the section; returns its summary line (none when no served point was set against a ceiling). `floors`:
    `tier_floors` of the sweep, which the Pareto plot draws too."""
    ok = data.ok
    gpu = any(on_gpu(r) for r in set(_text(ok, RUNTIME)))  # no runtime named: no claim of a GPU
    doc.h(1, f"How close to the {'GPU' if gpu else 'hardware'}'s limit")
    if ok.empty:
        doc.p("No trial succeeded, so there is nothing to set against the in-process ceiling.")
        return []
    if with_ceiling(ok).empty and (_text(ok, "bottleneck") == "").all():
        doc.p(EMPTY)
        return []
    line = summary_line(data.sustained, labels)
    if line is not None:
        doc.p(f"**{line[0].upper()}{line[1:]}.**")
    for tier in sorted(data.tiers):
        if (ok["tier"] == tier).any():
            _tier(doc, data, tier, labels.get(tier, tier), floors.get(tier))
    return [line] if line is not None else []

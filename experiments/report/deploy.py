"""The report's "Deploy this": per tier, the best settings a settings search found (`experiment.search`) with
their throughput, p99 and cost per 1k images at the SLO; across tiers, the cheapest, against the runner-up tier and
against the searched backend's own settings (what the search gained). Read from the SLO summaries of the search's
candidates (params `search_of`, `search_values`, `search_start`); the deploy files are on each tier run under
`deploy/<backend>/`. Below the answer, how close each winner came to its runtime's in-process ceiling and what stopped
it there (the summary's `slo_*_at_max` figures and verdict), so a reader knows whether another setting could serve
more or the GPU itself is the limit."""

from __future__ import annotations

import json

import pandas as pd

from experiments.measure.efficiency import VERDICT_TAGS, Bottleneck
from experiments.report.ceiling_section import percent
from experiments.report.data import CEILING_PARAMS, SLO_AT_MAX, SweepData
from experiments.report.render import Document, count, format_frame, ms, rate, ratio, usd
from experiments.report.tables import P99, stable_first
from experiments.report.tables import THROUGHPUT as TRIAL_THROUGHPUT

THROUGHPUT = "slo_max_throughput_img_s"
COST = "cost_per_1k_images_at_slo_usd"
# The winner's figures at its highest load within the SLO: how close it came to its runtime's ceiling, what stopped it.
AT_MAX = [*SLO_AT_MAX, *CEILING_PARAMS, *VERDICT_TAGS]
BEST_COLUMNS = ["tier", "backend", "protocol", "input_format", "batch_size", "settings", "entry", THROUGHPUT, "p99_ms",
                COST, "default_settings", "default_throughput", "default_cost", "candidates", "strategy", *AT_MAX]
# Each share of the ceiling: (column, how the sentence leads with it, how it reads beside the lead).
SHARES = [("slo_ceiling_share_at_max", "of {runtime} in-process throughput at its batch",
           "of the runtime's throughput at its batch"),
          ("slo_ceiling_share_best_at_max", "of {runtime} best in-process throughput", "of the runtime's best"),
          ("slo_ceiling_share_resident_at_max", "of {runtime} device-resident best", "of the device-resident best")]


def settings_text(values: str) -> str:
    """`{"instance_count": 2, "max_queue_delay_us": 500}` -> `instance_count=2, max_queue_delay_us=500`."""
    return ", ".join(f"{k}={v}" for k, v in json.loads(values).items())


def best_per_tier(slo: pd.DataFrame) -> pd.DataFrame:
    """One row per tier: its candidate with the highest throughput within the SLO (the cheapest image, as the
    tier's price is fixed), with the start of the same search beside it (`default_*`) and the candidates counted."""
    return _best_of_groups(slo, ["tier"])


def best_per_backend(slo: pd.DataFrame) -> pd.DataFrame:
    """One row per tier and searched backend: what each search found (the tier's winner is one of them), for a reader
    bound to one stack."""
    return _best_of_groups(slo, ["tier", "search_of"])


def _best_of_groups(slo: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if slo.empty or "search_of" not in slo or slo["search_of"].isna().all():
        return pd.DataFrame()
    searched = slo[slo["search_of"].notna() & (slo["status"] == "ok")]
    rows = []
    for group, candidates in searched.groupby(keys):
        tier = group[0]
        met = candidates[(candidates["slo_met"] == 1) & (candidates[THROUGHPUT] > 0)]
        if met.empty:
            rows.append({"tier": tier, "candidates": len(candidates),
                         **({"backend": group[1]} if len(keys) > 1 else {})})
            continue
        best = met.loc[met[THROUGHPUT].idxmax()]
        same = candidates[candidates["search_of"] == best["search_of"]]
        start = same[same["search_start"] == "true"]
        default = start.iloc[0] if not start.empty else None
        met_default = default is not None and default["slo_met"] == 1 and default[THROUGHPUT] > 0
        rows.append({"tier": tier, "backend": best["search_of"], "protocol": best["protocol"],
                     "input_format": best["input_format"], "batch_size": best["batch_size"],
                     "settings": settings_text(best["search_values"]), "entry": best["variant"],
                     THROUGHPUT: best[THROUGHPUT], "p99_ms": best["slo_p99_at_max_ms"], COST: best[COST],
                     "default_settings": settings_text(default["search_values"]) if default is not None else None,
                     "default_throughput": default[THROUGHPUT] if met_default else None,
                     "default_cost": default[COST] if met_default else None,
                     "candidates": len(same), "strategy": best["search_strategy"]}
                    | {column: best.get(column) for column in AT_MAX})
    best = pd.DataFrame(rows, columns=BEST_COLUMNS)
    for column in (THROUGHPUT, "p99_ms", COST, "default_throughput", "default_cost", *SLO_AT_MAX):
        best[column] = pd.to_numeric(best[column])
    return best


def deploy_section(doc: Document, data: SweepData, labels: dict[str, str]) -> list[str]:
    """Add "Deploy this" when the sweep searched settings; returns its one-line answer for the summary."""
    best = best_per_tier(data.slo)
    if best.empty:
        return []
    doc.h(1, "Deploy this")
    slo_ms = data.slo["slo_p99_ms"].dropna()
    target = f"p99 ≤ {slo_ms.iloc[0]:g} ms" if not slo_ms.empty else "the SLO"
    doc.p(f"Per tier, the server settings a search found with the highest throughput within {target} (so the lowest "
          "cost per image at the tier's price), each candidate measured by the SLO search as real trials; “search "
          "gain” is over the searched backend's own settings (the search's start). The winner's `config.pbtxt` or "
          "Serve `serve_config.yaml` is on the tier run under `deploy/<backend>/`, with `search.json`.")
    met = best.dropna(subset=[COST])
    table = pd.DataFrame({
        "tier": best["tier"].map(lambda t: labels.get(t, t)),
        "stack": [f"{r.backend}/{r.protocol}/{r.input_format}/b{r.batch_size}" if isinstance(r.backend, str)
                  else "none meets the SLO" for r in best.itertuples()],
        "settings": best["settings"].fillna("—"),
        "img/s at SLO": best[THROUGHPUT].map(rate),
        "p99 ms": best["p99_ms"].map(ms),
        "$ per 1k images": best[COST].map(usd),
        "default settings": best["default_settings"].fillna("—"),
        "$ per 1k, default": best["default_cost"].map(usd),
        "search gain": (best["default_cost"] / best[COST]).map(ratio),
        "candidates": best["candidates"].map(count),
    })
    doc.table(format_frame(table, {}), [False, False, False, True, True, True, False, True, True, True])
    if met.empty:
        line = f"No searched setting met {target} on any tier."
        doc.p(line)
        return [line]
    ranked = met.sort_values(COST)
    first = ranked.iloc[0]
    line = (f"Deploy {first['backend']} ({first['settings']}) on {labels.get(first['tier'], first['tier'])}: "
            f"{usd(first[COST])} per 1k images at {rate(first[THROUGHPUT])} img/s within {target}")
    if len(ranked) > 1:
        second = ranked.iloc[1]
        line += (f"; {ratio(second[COST] / first[COST])} cheaper than the runner-up, "
                 f"{labels.get(second['tier'], second['tier'])} ({usd(second[COST])})")
    if pd.notna(first.get("default_cost")):
        line += f"; {ratio(first['default_cost'] / first[COST])} cheaper than its default settings"
    doc.p(f"**{line}.**")
    if not slo_ms.empty:
        trials = getattr(data, "sustained", pd.DataFrame())  # a frame built by hand may carry the SLO rows alone
        for _, winner in met.iterrows():
            note = lower_load_note(trials, data.slo, winner, float(slo_ms.iloc[0]), labels)
            if note:
                doc.p(note)
    _closeness(doc, met, labels, target)
    _each_backend(doc, best_per_backend(data.slo), labels, target)
    return [line]


def lower_load_note(trials: pd.DataFrame, slo: pd.DataFrame, winner: pd.Series, slo_p99_ms: float,
                    labels: dict[str, str]) -> str:
    """Where the tier's fastest single trial within the target is another candidate's lower load, why "Deploy this"
    names the winner all the same, with both figures; '' where they agree. The search rates each candidate at its
    highest load within the target (the load a node of it can be planned on), the answer by its cheapest trial: on a
    noisy machine a lower load of one candidate can serve more than another's highest, so the two can differ."""
    if trials.empty or "variant" not in trials or slo.empty:
        return ""
    tier = winner["tier"]
    searched = slo[(slo["tier"] == tier) & slo["search_of"].notna() & (slo["status"] == "ok")]
    rows = trials[(trials["tier"] == tier) & trials["variant"].isin(set(searched["variant"]))
                  & (trials[P99] <= slo_p99_ms)]
    rows = stable_first(rows)  # as the answer takes them
    if rows.empty:
        return ""
    fastest = rows.loc[rows[TRIAL_THROUGHPUT].idxmax()]
    if fastest["variant"] == winner["entry"] or fastest[TRIAL_THROUGHPUT] <= winner[THROUGHPUT]:
        return ""
    own = searched[(searched["variant"] == fastest["variant"]) & (searched["slo_met"] == 1)]
    at_max = (f": at its highest load within the target that candidate served {rate(own[THROUGHPUT].max())} img/s"
              if not own.empty else "")
    return (f"On {labels.get(tier, tier)} the search's fastest single trial within p99 ≤ {slo_p99_ms:g} ms, "
            f"{fastest['variant']} at {fastest['load']} ({rate(fastest[TRIAL_THROUGHPUT])} img/s, p99 "
            f"{ms(fastest[P99])} ms), is not the candidate named here{at_max}. The search rates each candidate at its "
            f"highest load within the target, the load a node of it can be planned on, where {winner['entry']} served "
            f"{rate(winner[THROUGHPUT])} img/s. The two trials are "
            f"{percent(fastest[TRIAL_THROUGHPUT] / winner[THROUGHPUT] - 1)} apart; measuring each load several times "
            "(`experiment.repeats`) tells whether that is more than noise.")


def _each_backend(doc: Document, each: pd.DataFrame, labels: dict[str, str], target: str) -> None:
    """Where a tier's search covered several backends: each one's winner, for a reader bound to one stack."""
    if each.empty or each.groupby("tier").size().max() < 2:
        return
    doc.p(f"Each searched backend's best settings within {target}, cheapest first, for a deployment bound to one "
          "stack (its files are under `deploy/<backend>/` too):")
    each = each.sort_values(["tier", COST], na_position="last")
    table = pd.DataFrame({
        "tier": each["tier"].map(lambda t: labels.get(t, t)),
        "backend": each["backend"],
        "settings": [s if isinstance(s, str) else "none meets the SLO" for s in each["settings"]],
        "img/s at SLO": each[THROUGHPUT].map(rate),
        "p99 ms": each["p99_ms"].map(ms),
        "$ per 1k images": each[COST].map(usd),
        "of the ceiling at its batch": each["slo_ceiling_share_at_max"].map(percent),
        "verdict": each["bottleneck"].fillna("—"),
        "search gain": (each["default_cost"] / each[COST]).map(ratio),
    })
    doc.table(format_frame(table, {}), [False, False, False, True, True, True, True, False, True])


def _closeness(doc: Document, met: pd.DataFrame, labels: dict[str, str], target: str) -> None:
    """How close each tier's winner came to the hardware and what stopped it: where to look next, or that the GPU
    itself is the limit. Nothing when no winner carries these figures."""
    items = []
    for _, row in met.iterrows():
        text = closeness_text(row, target)
        if text:
            items.append(f"**{labels.get(row['tier'], row['tier'])}** · {row['backend']} ({row['settings']}): {text}")
    if items:
        doc.p("How close each winner came to its runtime timed in-process on the same node, no server in the way "
              "(docs/ceiling.md), and what stopped it there:")
        doc.bullets(items)


def closeness_text(row: pd.Series, target: str) -> str:
    """`At its highest load within p99 ≤ 50 ms it serves 62 % of `runtime`'s in-process throughput at its batch
    (48 % of the runtime's best, ...), the GPU busy 55 %. What stopped it: queue — <evidence>. Next: <fix>.`;
    '' when the winner carries neither a share, GPU busy nor a verdict."""
    sentences = [sentence for sentence in (_shares_sentence(row, target), _verdict_sentence(row)) if sentence]
    return " ".join(sentences)


def _present(value: object) -> bool:
    return value is not None and pd.notna(value)


def _text(row: pd.Series, key: str) -> str:
    """A text field of the row; '' where it is absent (a frame without the column, or no value)."""
    value = row.get(key)
    return str(value) if _present(value) else ""


def _shares_sentence(row: pd.Series, target: str) -> str:
    """The winner's shares of its runtime's ceiling and the GPU busy at its highest load within the SLO."""
    runtime = f"`{_text(row, 'ceiling_runtime')}`'s" if _text(row, "ceiling_runtime") else "its runtime's"
    shares = [(row[column], lead, aside) for column, lead, aside in SHARES if _present(row.get(column))]
    busy = row.get("slo_gpu_util_pct_at_max")
    if not shares and not _present(busy):
        return ""
    text = f"At its highest load within {target}"
    if shares:
        (share, lead, _), *others = shares
        text += f" it serves {percent(share)} {lead.format(runtime=runtime)}"
        if others:
            text += " (" + ", ".join(f"{percent(value)} {aside}" for value, _, aside in others) + ")"
        return text + (f", the GPU busy {float(busy):.0f} %." if _present(busy) else ".")
    return text + f" the GPU was busy {float(busy):.0f} %."


def _verdict_sentence(row: pd.Series) -> str:
    """What stopped the winner, the numbers that say so, and the setting that would move it; for `compute`, that no
    serving setting serves more on that GPU."""
    verdict = _text(row, "bottleneck")
    if not verdict:
        return ""
    evidence = _text(row, "bottleneck_evidence")
    text = f"What stopped it: {verdict}" + (f" — {evidence}." if evidence else ".")
    if verdict == Bottleneck.COMPUTE:
        text += " The GPU itself is the limit: no serving setting serves more on it."
    fix = _text(row, "bottleneck_fix") or (Bottleneck(verdict).fix if verdict in list(Bottleneck) else "")
    return text + (f" Next: {fix}." if fix else "")

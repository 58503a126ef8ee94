"""The report's answer: the cheapest operating point (within a p99 target when one is given) and the fastest,
taken from trials whose server kept up with their load, stable ones first, saying when the pick itself is
unstable, and, where trials were measured several times, whether the runner-up is within noise of the pick."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from experiments.config.prices import cost_per_1k_images
from experiments.report import tables
from experiments.report.ceiling_section import share_sentence
from experiments.report.data import SweepData
from experiments.report.marks import OVERLOADED, UNSTABLE
from experiments.report.noise import noise_line, runner_up, spread
from experiments.report.render import ms, rate, usd
from experiments.report.tables import P50, P99, THROUGHPUT
from serving.node import busy_elsewhere

COST = "cost_per_1k_usd"  # a priced point's $ per 1k images, at the price it is priced at
UNSTABLE_PICK = (f" {UNSTABLE} *Unstable*: its windows never agreed, and no stable trial qualifies; re-run it "
                 "with more or longer windows (`experiment.stability.max_windows`, `experiment.window_s`).")


def point_name(row: pd.Series, labels: dict[str, str]) -> str:
    return f"**{labels.get(row['tier'], row['tier'])} · {row['stack']} · b{row['batch_size']} · {row['load']}**"


def _caveat(row: pd.Series) -> str:
    return UNSTABLE_PICK if bool(row.get("unstable", False)) else ""


def _efficiency(sustained: pd.DataFrame, pick: pd.Series) -> str:
    """How close the pick's trial came to its runtime's in-process ceiling (a priced pick carries only the figures
    its price needs: its trial is found by its operating point); '' without a ceiling."""
    trial = sustained[(sustained["tier"] == pick["tier"]) & (sustained["stack"] == pick["stack"])
                      & (sustained["batch_size"] == pick["batch_size"]) & (sustained["load"] == pick["load"])]
    return share_sentence(trial.iloc[0]) if not trial.empty else ""


def _good_images(sustained: pd.DataFrame, pick: pd.Series) -> str:
    """With a deadline (experiment.slo.deadline_ms, else the p99 target), what the pick's images answered well in time
    cost at its price: its goodput, not its throughput, buys them (docs/traffic.md); '' without goodput."""
    trial = sustained[(sustained["tier"] == pick["tier"]) & (sustained["stack"] == pick["stack"])
                      & (sustained["batch_size"] == pick["batch_size"]) & (sustained["load"] == pick["load"])]
    if trial.empty or "goodput_img_s" not in trial.columns:
        return ""
    row = trial.iloc[0]
    goodput, deadline = row.get("goodput_img_s"), pd.to_numeric(row.get("goodput_deadline_ms"), errors="coerce")
    if goodput is None or pd.isna(goodput) or goodput <= 0 or pd.isna(deadline):
        return ""
    cost = cost_per_1k_images(float(pick["usd_per_hour"]), float(goodput))
    return (f" Within {float(deadline):g} ms it answered {float(row['goodput_share']):.1%} of its requests well: "
            f"**{usd(cost)} per 1k good images**.")


def by_p99(rows: pd.DataFrame) -> pd.DataFrame:
    """Trials by p99, lowest first: stable ones only when there are any."""
    return tables.stable_first(rows).sort_values(P99, kind="stable")


def fastest(rows: pd.DataFrame) -> pd.Series:
    """The lowest p99, among stable trials when there are any."""
    return by_p99(rows).iloc[0]


def answer_lines(data: SweepData, labels: dict[str, str], prices: dict, slo_p99_ms: float | None,
                 price_label: Callable[[pd.Series], str]) -> list[str]:
    """The answer in a few Markdown lines (the report's first section, the console, the MLflow note)."""
    sustained = data.sustained
    lines: list[str] = []
    if sustained.empty:
        lines.append(f"Every successful trial overloaded its server ({OVERLOADED}): there is no cost figure to "
                     "give; see “Overloaded trials”.")
    else:
        priced = tables.priced_points(sustained, prices)
        best = fastest(sustained)

        def name(row: pd.Series) -> str:
            return point_name(row, labels)

        def label(tier: str) -> str:
            return labels.get(tier, tier)

        def cheaper(ranked: pd.DataFrame, pick: pd.Series) -> str | None:
            return noise_line(pick, runner_up(ranked, pick), COST, usd, " per 1k images", "", name, label)

        def faster(pick: pd.Series) -> str | None:
            return noise_line(pick, runner_up(by_p99(sustained), pick), P99, ms, " ms", "p99 ", name, label)

        if slo_p99_ms is not None:
            pick = tables.slo_pick(priced, slo_p99_ms)
            if pick is None:
                lines.append(f"Nothing measured meets p99 ≤ {slo_p99_ms:g} ms: the lowest p99 is {ms(best[P99])} ms "
                             f"at {point_name(best, labels)}.{_caveat(best)}")
            else:
                lines.append(f"Cheapest operating point with p99 ≤ {slo_p99_ms:g} ms, at each tier's primary price: "
                             f"{point_name(pick, labels)}: **{usd(pick['cost_per_1k_usd'])} per 1k images**"
                             f"{spread(pick, COST, usd)} (p99 {ms(pick[P99])} ms, p50 {ms(pick[P50])} ms, "
                             f"{rate(pick[THROUGHPUT])} img/s, price {price_label(pick)}).{_caveat(pick)}"
                             + _efficiency(sustained, pick) + _good_images(sustained, pick))
                lines.append(cheaper(tables.slo_ranked(priced, slo_p99_ms), pick))
                anywhere = tables.slo_pick(priced, slo_p99_ms, price=None)
                if anywhere is not None and anywhere["price"] != "primary":
                    lines.append(f"At any listed price: {point_name(anywhere, labels)} at price "
                                 f"{price_label(anywhere)}: **{usd(anywhere['cost_per_1k_usd'])} per 1k "
                                 f"images**{spread(anywhere, COST, usd)}.{_caveat(anywhere)}")
        else:
            cheapest = tables.slo_pick(priced, math.inf)
            lines.append(f"Cheapest operating point at each tier's primary price: {point_name(cheapest, labels)}: "
                         f"**{usd(cheapest['cost_per_1k_usd'])} per 1k images**{spread(cheapest, COST, usd)} at p99 "
                         f"{ms(cheapest[P99])} ms.{_caveat(cheapest)}" + _efficiency(sustained, cheapest)
                         + _good_images(sustained, cheapest))
            lines.append(cheaper(tables.slo_ranked(priced, math.inf), cheapest))
            lines.append(f"Lowest p99: {point_name(best, labels)}: {ms(best[P99])} ms{spread(best, P99, ms)} at "
                         f"{usd(best['cost_per_1k_images_usd'])} per 1k images.{_caveat(best)}")
            lines.append(faster(best))
            lines.append("Give a latency target with `--slo-p99-ms` for a pick; meanwhile the Pareto frontier below "
                         "answers any target: take the frontier point with the largest p99 within it.")
        unstable = int(sustained["unstable"].sum())
        if unstable:
            lines.append(f"{unstable} of {len(sustained)} trials are unstable ({UNSTABLE}: their windows never "
                         "agreed within the stability rule): the answer takes stable trials wherever one "
                         "qualifies, and every table and plot marks the unstable figures.")
    over_bound = data.ok[data.ok["over_accuracy_bound"]] if "over_accuracy_bound" in data.ok else data.ok.iloc[:0]
    if not over_bound.empty:
        lines.append(f"{len(over_bound)} trial(s) of {', '.join(sorted(set(over_bound['stack'])))} lost more top-1 "
                     "than `experiment.accuracy.max_top1_drop` allows and are left out of the answer and every cost "
                     "figure: see “Accuracy”.")
    overloaded = int(data.ok["overloaded"].sum())
    if overloaded:
        behind = int((data.ok["overloaded"] & data.ok["client_behind"]).sum())
        whose = (f" In {behind} of them the client fell behind its own schedule: what those served is a lower bound "
                 "on the server's capacity.") if behind else ""
        lines.append(f"{overloaded} open-loop trial(s) fell behind their arrivals ({OVERLOADED}) and are left out of "
                     f"the answer, the Pareto frontier and every cost figure: see “Overloaded trials”.{whose}")
    busy = [info for info in data.tiers.values() if busy_elsewhere(info.cpu_busy_before, info.cpu_count)]
    for info in busy:
        lines.append(f"Tier {labels.get(info.name, info.label)}'s node had {info.cpu_busy_before:.1f} of its "
                     f"{info.cpu_count} cores busy before the sweep started anything on it: its figures include that "
                     "work.")
    return [line for line in lines if line]

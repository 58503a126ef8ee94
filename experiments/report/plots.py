"""The report's plots (matplotlib, Agg backend, PNG): latency vs throughput per backend for each tier, p99 vs
$ per 1k images with the Pareto frontier (and each tier's floor: its cost at its best in-process throughput), and
cost per 1k images by tier and backend. Unstable trials are drawn hollow (hatched bars), overloaded ones ringed in
red, and each legend says how many. And the capacity plan's $/month against traffic, one step line per tier."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from experiments.config.choices import LoadMode
from experiments.config.prices import HOURS_PER_MONTH, Price, cost_per_1k_images
from experiments.report.data import nodes
from experiments.report.marks import UNSTABLE
from experiments.report.tables import P50, P99, THROUGHPUT

if TYPE_CHECKING:
    from experiments.report.ceiling_section import Floor

DPI = 110
OVERLOAD_COLOR = "crimson"
# Past these, a plot of a large sweep (a settings search: thousands of trials) stays quick and readable: matplotlib's
# "best" legend place tests every data point against every candidate place, and a load label per point overlaps its
# neighbours into a smear. Smaller plots are drawn as before.
BEST_LEGEND_MAX_POINTS = 300
LABELLED_LOADS_MAX = 12


def _legend_place(points: int) -> str:
    return "best" if points <= BEST_LEGEND_MAX_POINTS else "upper left"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _log_if_wide(ax: Any, values: pd.Series, axis: str) -> None:
    """Log scale when values span more than 20x, so small and large ones both stay readable."""
    from matplotlib.ticker import FuncFormatter

    v = values[values > 0].dropna()
    if len(v) > 1 and v.max() / v.min() > 20:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        target = ax.yaxis if axis == "y" else ax.xaxis
        plain = FuncFormatter(lambda x, _: f"{x:g}")  # 200, not 2×10²
        target.set_major_formatter(plain)
        sparse = FuncFormatter(lambda x, _: f"{x:g}" if f"{x:g}"[0] in "25" else "")  # 20, 50: not every minor
        target.set_minor_formatter(sparse if v.max() / v.min() < 200 else FuncFormatter(lambda x, _: ""))


def _scatter_marked(ax: Any, rows: pd.DataFrame, x: str, y: str, **style: Any) -> None:
    """Points filled when stable, hollow when unstable, ringed in red when overloaded."""
    color = style.pop("color")
    stable = rows[~rows["unstable"]]
    unstable = rows[rows["unstable"]]
    ax.scatter(stable[x], stable[y], color=color, **style)
    ax.scatter(unstable[x], unstable[y], facecolors="white", edgecolors=color, linewidths=1.4, **style)
    over = rows[rows["overloaded"]]
    ax.scatter(over[x], over[y], s=190, facecolors="none", edgecolors=OVERLOAD_COLOR, linewidths=1.6, zorder=4)


def _mark_legend(ax: Any, rows: pd.DataFrame) -> None:
    """Legend entries for the marks, with how many of the panel's points carry them."""
    if rows["unstable"].any():
        ax.scatter([], [], facecolors="white", edgecolors="gray", linewidths=1.4,
                   label=f"hollow {UNSTABLE}: unstable ({int(rows['unstable'].sum())} of {len(rows)})")
    if rows["overloaded"].any():
        ax.scatter([], [], s=190, facecolors="none", edgecolors=OVERLOAD_COLOR, linewidths=1.6,
                   label=f"red ring: overloaded ({int(rows['overloaded'].sum())} of {len(rows)})")


def latency_vs_throughput(ok: pd.DataFrame, tier_label: str, path: Path) -> Path:
    """One panel per backend variant; a line per (protocol, format, batch, load mode) through its loads
    (concurrency levels or open-loop rates): p50 solid, p99 dotted, each point labelled with its load (on a line of
    more than LABELLED_LOADS_MAX loads, its first and last)."""
    plt = _pyplot()
    variants = sorted(ok["variant"].unique())
    ncols = min(len(variants), 3)
    nrows = math.ceil(len(variants) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.2 * nrows), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, variant in zip(axes.flat, variants, strict=False):
        rows = ok[ok["variant"] == variant]
        groups = rows.groupby(["protocol", "input_format", "batch_size", "load_mode"], sort=True)
        for i, ((protocol, fmt, batch, mode), line) in enumerate(groups):
            line = line.sort_values(["concurrency", "request_rate"])
            color = cmap(i % 10)
            open_loop = f" {mode}" if LoadMode(mode).open_loop else ""
            ax.plot(line[THROUGHPUT], line[P50], "-", color=color, label=f"{protocol}/{fmt} b{batch}{open_loop}")
            ax.plot(line[THROUGHPUT], line[P99], ":", color=color, alpha=0.8)
            _scatter_marked(ax, line, THROUGHPUT, P50, color=color, marker="o", s=28, zorder=3)
            ax.scatter(line[THROUGHPUT], line[P99], color=color, marker="x", alpha=0.8)
            labelled = line if len(line) <= LABELLED_LOADS_MAX else line.iloc[[0, -1]]  # the ends say the range
            for x, y, load, over in zip(labelled[THROUGHPUT], labelled[P50], labelled["load"].astype(str),
                                        labelled["overloaded"], strict=True):
                short = load.rpartition("-")[2]  # c4, or r80 (the line's label names the arrival mode)
                ax.annotate(short + (" overloaded" if over else ""), (x, y), textcoords="offset points",
                            xytext=(4, -10), fontsize=7, color=OVERLOAD_COLOR if over else color)
        _log_if_wide(ax, pd.concat([rows[P50], rows[P99]]), "y")
        ax.margins(x=0.15)  # room for the labels of the outermost points
        ax.set_title(variant)
        ax.set_xlabel("throughput (img/s served)")
        ax.set_ylabel("latency (ms)")
        ax.plot([], [], "o-", color="gray", label="p50 (solid)")
        ax.plot([], [], "x:", color="gray", label="p99 (dotted)")
        _mark_legend(ax, rows)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc=_legend_place(2 * len(rows)))
    for ax in list(axes.flat)[len(variants):]:
        ax.set_visible(False)
    fig.suptitle(f"Latency vs throughput, tier {tier_label} (points: loads)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _dollars(value: float) -> str:
    """$0.000025, not $2.5e-05: a floor's cost is far below a cent, and a legend is read, not parsed."""
    return "$" + np.format_float_positional(value, precision=3, unique=False, fractional=False, trim="-")


def _floor_lines(ax: Any, floors: dict[str, Floor], colors: dict[str, Any], labels: dict[str, str]) -> None:
    """Each tier's floor as a dashed line at its $ per 1k images, in the tier's colour, named in the legend."""
    for tier, floor in sorted(floors.items()):
        where = "in-process, device-resident" if floor.resident else "in-process"
        ax.axhline(floor.usd_per_1k, color=colors.get(tier, "gray"), ls="--", lw=1,
                   label=f"{labels.get(tier, tier)} floor: {_dollars(floor.usd_per_1k)} / 1k at "
                         f"{floor.img_s:,.0f} img/s {where}")


def pareto(ok: pd.DataFrame, frontier: pd.DataFrame, labels: dict[str, str], path: Path,
           slo_p99_ms: float | None = None, pick: pd.Series | None = None,
           floors: dict[str, Floor] | None = None) -> Path:
    """Every operating point: p99 (x) vs $ per 1k images at its tier's primary price (y); colour = tier,
    marker = backend variant; the frontier as a step line with its points numbered and named in a key. `floors`: per
    tier, what an image would cost at its best in-process throughput (a dashed line; the cost axis goes log when it
    lies far below the points, so they stay apart)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6.2 + 0.17 * len(frontier)))
    markers = dict(zip(sorted(ok["variant"].unique()), "osD^v<>Pp*", strict=False))
    cmap = plt.get_cmap("tab10")
    floors = floors or {}
    colors = {str(tier): cmap(i % 10) for i, tier in enumerate(sorted(ok["tier"].unique()))}
    for i, (tier, rows) in enumerate(ok.groupby("tier", sort=True)):
        for variant, vrows in rows.groupby("variant", sort=True):
            _scatter_marked(ax, vrows, P99, "cost_per_1k_images_usd", color=cmap(i % 10), alpha=0.7,
                            marker=markers.get(variant, "o"))
            ax.scatter([], [], color=cmap(i % 10), alpha=0.7, marker=markers.get(variant, "o"),
                       label=f"{labels.get(str(tier), tier)} · {variant}")
    _mark_legend(ax, ok)
    key: list[str] = []
    if not frontier.empty:
        ax.step(frontier[P99], frontier["cost_per_1k_images_usd"], where="post", color="black", lw=1.2,
                label="Pareto frontier")
        # Frontier points sit close together (same stack over HTTP and gRPC): number them on the plot and name
        # them in a key below it, in the order of the report's frontier table, so no two labels overlap.
        for n, (_, row) in enumerate(frontier.iterrows(), start=1):
            ax.annotate(str(n), (row[P99], row["cost_per_1k_images_usd"]), textcoords="offset points",
                        xytext=(0, 7 if n % 2 else -13), ha="center", fontsize=8, fontweight="bold")
            key.append(f"{n}  {labels.get(row['tier'], row['tier'])}/{row['stack']}/b{row['batch_size']}"
                       f"/{row['load']}: p99 {row[P99]:.1f} ms, ${row['cost_per_1k_images_usd']:.3g}/1k img"
                       + (f"  {UNSTABLE} unstable" if row["unstable"] else ""))
    if pick is not None:
        ax.scatter([pick[P99]], [pick["cost_per_1k_images_usd"]], s=220, facecolors="none", edgecolors="crimson",
                   lw=1.8, label="SLO pick (primary price)", zorder=5)
    if slo_p99_ms is not None:
        ax.axvline(slo_p99_ms, color="crimson", ls="--", lw=1, label=f"SLO p99 ≤ {slo_p99_ms:g} ms")
    _floor_lines(ax, floors, colors, labels)
    _log_if_wide(ax, ok[P99], "x")
    floor_costs = pd.Series([floor.usd_per_1k for floor in floors.values()], dtype=float)
    _log_if_wide(ax, pd.concat([ok["cost_per_1k_images_usd"], floor_costs], ignore_index=True), "y")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("$ per 1k images (each tier's primary price)")
    ax.set_title("Latency vs cost: lower-left is better; the frontier holds the only sensible choices")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7, loc=_legend_place(len(ok)))
    if key:
        fig.text(0.01, 0.01, "Pareto frontier, fastest first:\n" + "\n".join(key), fontsize=7.5,
                 family="monospace", va="bottom")
        fig.tight_layout(rect=(0, (len(key) + 1.5) * 0.17 / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def cost_bars(ok: pd.DataFrame, prices_by_tier: dict[str, list[Price]], labels: dict[str, str],
              path: Path) -> Path:
    """Per backend stack (variant/protocol/format) and tier: the lowest $ per 1k images over its operating
    points at the tier's primary price (bar, labelled with its batch/load; hatched when unstable), and at each
    other listed price of the tier (black ticks)."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    # A point that completed nothing inside its window (a starved node) has no cost: it has no bar either.
    priced = ok[ok["cost_per_1k_images_usd"].notna()]
    best = priced.loc[priced.groupby(["stack", "tier"])["cost_per_1k_images_usd"].idxmin()]
    stacks = sorted(best["stack"].unique())
    tiers = sorted(best["tier"].unique())
    width = 0.8 / max(len(tiers), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(stacks) * max(len(tiers), 1)), 5.5))
    cmap = plt.get_cmap("tab10")
    ticks_labelled = False
    tier_handles = []
    for i, tier in enumerate(tiers):
        rows = best[best["tier"] == tier].set_index("stack")
        xs = [k + (i - (len(tiers) - 1) / 2) * width for k, s in enumerate(stacks) if s in rows.index]
        present = [s for s in stacks if s in rows.index]
        values = rows.loc[present, "cost_per_1k_images_usd"]
        bars = ax.bar(xs, values, width=width * 0.92, color=cmap(i % 10))
        # A patch of its own: a bar container's legend entry copies its first bar, hatched or not.
        tier_handles.append(Patch(color=cmap(i % 10), label=f"{labels.get(tier, tier)} (primary "
                                  f"${prices_by_tier[tier][0].usd_per_hour:g}/h)" if prices_by_tier.get(tier)
                                  else labels.get(tier, tier)))
        for bar, stack in zip(bars, present, strict=True):
            r = rows.loc[stack]
            if r["unstable"]:
                bar.set_hatch("//")
                bar.set_edgecolor("white")
            ax.annotate(f"b{r['batch_size']}/{r['load']}" + (f" {UNSTABLE}" if r["unstable"] else ""),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()), textcoords="offset points",
                        xytext=(0, 2), ha="center", fontsize=7)
            for price in prices_by_tier.get(tier, [])[1:]:
                y = float(cost_per_1k_images(price.usd_per_hour, r[THROUGHPUT], nodes(r)))
                ax.plot([bar.get_x(), bar.get_x() + bar.get_width()], [y, y], color="black", lw=1.5,
                        label=None if ticks_labelled else "other listed prices of the tier")
                ax.annotate(price.name, (bar.get_x() + bar.get_width(), y), fontsize=6, va="center",
                            xytext=(2, 0), textcoords="offset points")
                ticks_labelled = True
    ax.set_xticks(range(len(stacks)))
    ax.set_xticklabels(stacks, rotation=20, ha="right")
    _log_if_wide(ax, best["cost_per_1k_images_usd"], "y")
    ax.set_ylabel("$ per 1k images (lowest over batch/load)")
    ax.set_title("Cheapest operating point per backend stack and tier")
    ax.grid(True, axis="y", alpha=0.3)
    handles = tier_handles + ax.get_legend_handles_labels()[0]
    if best["unstable"].any():
        handles.append(Patch(facecolor="gray", hatch="//", edgecolor="white",
                             label=f"hatched {UNSTABLE}: unstable ({int(best['unstable'].sum())} of {len(best)} bars)"))
    ax.legend(handles=handles, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def capacity_cost(curves: dict[str, list[tuple[float, float]]], traffic: Any, up_to_img_s: float,
                  crossings: list[tuple[float, float]], path: Path) -> Path:
    """$/month (y) against peak traffic (x): one step line per curve, `[(x_k, cost_k)]` meaning cost_k for a peak
    in (x_(k-1), x_k] (experiments.report.capacity.cost_steps); the plan's peak dashed, crossovers marked ×."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 5.5))
    cmap = plt.get_cmap("tab10")
    for i, (label, steps) in enumerate(curves.items()):
        xs = [0.0, *(x for x, _ in steps)]
        ys = [steps[0][1], *(cost for _, cost in steps)]
        ax.step(xs, ys, where="pre", color=cmap(i % 10), lw=1.6, label=label)
    ax.axvline(traffic.peak_img_s, color="gray", ls="--", lw=1,
               label=f"this plan's peak: {traffic.peak_img_s:,g} img/s")
    if crossings:
        ax.scatter(*zip(*crossings, strict=True), marker="x", color="black", zorder=4, label="crossover")
    ax.set_xlim(0, up_to_img_s)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"peak traffic (img/s); nodes sized for the peak +{traffic.headroom * 100:g} % headroom")
    ax.set_ylabel(f"$ per month ({HOURS_PER_MONTH} h, primary price)")
    ax.set_title("What each tier costs per month at a given peak, within the p99 target")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path

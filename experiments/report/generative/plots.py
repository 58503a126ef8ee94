"""A generative sweep's Pareto plots: a latency (TTFT p99, or TPOT p99) against $ per 1M output tokens at each tier's
primary price, one PNG each, with the frontier as a step line, its points numbered and named in a key, and the target
as a dashed line where one is set. Markers as the image report's (`experiments.report.plots`): colour = tier, shape =
backend variant, hollow = unstable."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.report.generative.points import COST
from experiments.report.marks import UNSTABLE
from experiments.report.plots import DPI, _legend_place, _log_if_wide, _mark_legend, _pyplot, _scatter_marked


def pareto(points: pd.DataFrame, frontier: pd.DataFrame, x: str, x_label: str, labels: dict[str, str], path: Path,
           target_ms: float | None = None, pick: pd.Series | None = None) -> Path:
    """Every point: `x` (a latency, ms) against $ per 1M output tokens (`points`: one row per point, at its tier's
    primary price), the frontier of `frontier` in black, `target_ms` dashed, the answer's `pick` ringed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6.2 + 0.17 * len(frontier)))
    points = points.dropna(subset=[x, COST])
    markers = dict(zip(sorted(points["variant"].unique()), "osD^v<>Pp*", strict=False))
    cmap = plt.get_cmap("tab10")
    for i, (tier, rows) in enumerate(points.groupby("tier", sort=True)):
        for variant, vrows in rows.groupby("variant", sort=True):
            _scatter_marked(ax, vrows, x, COST, color=cmap(i % 10), alpha=0.7, marker=markers.get(variant, "o"))
            ax.scatter([], [], color=cmap(i % 10), alpha=0.7, marker=markers.get(variant, "o"),
                       label=f"{labels.get(str(tier), tier)} · {variant}")
    _mark_legend(ax, points)
    key: list[str] = []
    if not frontier.empty:
        ax.step(frontier[x], frontier[COST], where="post", color="black", lw=1.2, label="Pareto frontier")
        for n, (_, row) in enumerate(frontier.iterrows(), start=1):
            ax.annotate(str(n), (row[x], row[COST]), textcoords="offset points", xytext=(0, 7 if n % 2 else -13),
                        ha="center", fontsize=8, fontweight="bold")
            key.append(f"{n}  {labels.get(row['tier'], row['tier'])}/{row['stack']}/{row['load']}: {x_label} "
                       f"{row[x]:.1f} ms, ${row[COST]:.3g}/1M out" + (f"  {UNSTABLE} unstable" if row["unstable"]
                                                                      else ""))
    if pick is not None and pd.notna(pick.get(x)):
        ax.scatter([pick[x]], [pick[COST]], s=220, facecolors="none", edgecolors="crimson", lw=1.8,
                   label="the answer's pick (primary price)", zorder=5)
    if target_ms is not None:
        ax.axvline(target_ms, color="crimson", ls="--", lw=1, label=f"target {x_label} ≤ {target_ms:g} ms")
    _log_if_wide(ax, points[x], "x")
    _log_if_wide(ax, points[COST], "y")
    ax.set_xlabel(f"{x_label} (ms)")
    ax.set_ylabel("$ per 1M output tokens (each tier's primary price)")
    ax.set_title(f"{x_label} vs cost per output token: lower-left is better; the frontier holds the only sensible "
                 "choices", fontsize=10)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7, loc=_legend_place(len(points)))
    if key:
        fig.text(0.01, 0.01, "Pareto frontier, fastest first:\n" + "\n".join(key), fontsize=7.5, family="monospace",
                 va="bottom")
        fig.tight_layout(rect=(0, (len(key) + 1.5) * 0.17 / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path

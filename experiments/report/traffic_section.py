"""The report's "Errors and traffic over time": which trials had requests fail and how (error rate by class, the
goodput left), which stalled (their server answered nothing for long while requests waited), and for each trial
whose load changes with time (a ramp, bursts, a trace replay) its course bin by bin: the rate offered against what
was served and served well, and the latency, so it shows *when* the target broke. A ramp's knee is the offered rate
where goodput leaves the offered line. How to read it: docs/traffic.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.config.choices import LoadMode
from experiments.measure.metrics import STALL_FACTOR, STALL_MIN_MS, is_stalled
from experiments.report.data import SweepData
from experiments.report.render import Document, count, format_frame, ms, rate

DOCS = "docs/traffic.md"
TOKENS = "output_tokens_s"  # a generative trial's bins count its output tokens/s where an image trial's count images
KNEE_SHARE = 0.9  # a bin serves well less than this share of what it was offered: the ramp's knee
MAX_PLOTS = 8
DPI = 110


def _share(value: float) -> str:
    return f"{value:.1%}"


def _errors(doc: Document, data: SweepData, labels: dict[str, str], goodput: tuple[str, str]) -> list[str]:
    trials = data.trials
    if "error_rate" not in trials.columns:
        return []
    failing = trials[trials["error_rate"].fillna(0) > 0]
    if failing.empty:
        return []
    doc.h(2, "Requests that failed")
    doc.p("Each trial's share of failed requests (scheduled inside its windows), by error class (`http_<status>`, "
          "`grpc_<code>`, `timeout`, `reset`, `refused`, `invalid`). Its latency figures are of the requests answered "
          "well; `p99 all` counts the failed ones too, at the time they failed. A trial past "
          "`experiment.max_error_rate` failed, its figures kept.")
    classes = sorted(c for c in trials.columns if c.startswith("error_rate_"))
    rows = []
    for _, r in failing.iterrows():
        found = {c.removeprefix("error_rate_"): float(r[c]) for c in classes if pd.notna(r.get(c)) and r[c] > 0}
        rows.append({"tier": labels.get(r["tier"], r["tier"]), "stack": r["stack"], "b": int(r["batch_size"]),
                     "load": r["load"], "status": r["status"], "failed": _share(float(r["error_rate"])),
                     "by class": ", ".join(f"{k} {_share(v)}" for k, v in found.items()),
                     goodput[1]: float(r.get(goodput[0], np.nan)),
                     "p99 ms": float(r.get("latency_p99_ms", np.nan)),
                     "p99 all ms": float(r.get("latency_all_p99_ms", np.nan))})
    frame = format_frame(pd.DataFrame(rows), {goodput[1]: rate, "p99 ms": ms, "p99 all ms": ms}, default=count)
    doc.table(frame, [False, False, True, False, False, True, False, True, True, True])
    return [f"{len(failing)} trial(s) had requests fail (up to {_share(float(failing['error_rate'].max()))}): "
            "see “Requests that failed”"]


def stalled_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials whose server answered nothing for long while requests waited (`is_stalled`)."""
    if "answer_gap_max_ms" not in trials.columns:
        return trials.iloc[:0]
    return trials[is_stalled(trials)]


def _stalls(doc: Document, stalled: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    if stalled.empty:
        return []
    doc.h(2, "Stalls")
    doc.p(f"Trials whose server answered nothing for at least {STALL_FACTOR:g} times their p50 (and "
          f"{STALL_MIN_MS:g} ms) while requests waited (`answer_gap_max_ms`, tag `stalled`): a freeze that their "
          "p99 hides when it holds few of their requests, and that their slowest request and refusals show. Triton's "
          f"dynamic batcher with a `max_queue_size` the queue reaches stalls this way ({DOCS}).")
    rows = [{"tier": labels.get(r["tier"], r["tier"]), "stack": r["stack"], "b": int(r["batch_size"]),
             "load": r["load"], "status": r["status"], "longest gap ms": float(r["answer_gap_max_ms"]),
             "p50 ms": float(r["latency_p50_ms"]), "p99 ms": float(r.get("latency_p99_ms", np.nan)),
             "slowest ms": float(r.get("latency_max_ms", np.nan))}
            for _, r in stalled.iterrows()]
    frame = format_frame(pd.DataFrame(rows), {c: ms for c in ("longest gap ms", "p50 ms", "p99 ms", "slowest ms")},
                         default=count)
    doc.table(frame, [False, False, True, False, False, True, True, True, True])
    return [f"{len(stalled)} trial(s) stalled: their server answered nothing for up to "
            f"{ms(float(stalled['answer_gap_max_ms'].max()))} ms while requests waited (see “Stalls”)"]


def served(series: pd.DataFrame) -> pd.Series:
    """What each bin served well: its images' goodput, else their throughput; a generative trial's output tokens/s."""
    for name in ("goodput_img_s", "throughput_img_s", TOKENS):
        if name in series:
            return series[name]
    raise KeyError(f"no served rate among the series' {list(series.columns)}")


def per_request(series: pd.DataFrame, row: pd.Series) -> float:
    """What one request offers in the unit `served` counts: its images (batch size), or for tokens the trial's
    measured output tokens per request (else the max_tokens it asked for)."""
    if TOKENS not in series:
        return int(row["batch_size"])
    for name in ("output_tokens_mean", "requested_tokens_mean"):
        value = pd.to_numeric(row.get(name), errors="coerce")
        if pd.notna(value) and value > 0:
            return float(value)
    return float("nan")


def knee(series: pd.DataFrame, images_per_request: float) -> pd.Series | None:
    """The first bin that served well (goodput, else throughput; output tokens/s for tokens) less than KNEE_SHARE of
    what it was offered (`images_per_request`: the unit's count per request, `per_request`); None when every bin kept
    up."""
    served_now = served(series)
    offered = series["offered_rps"] * images_per_request
    behind = series[(offered > 0) & (served_now < KNEE_SHARE * offered)]
    return None if behind.empty else behind.iloc[0]


def _plot(series: pd.DataFrame, row: pd.Series, title: str, path: Path, deadline_ms: float | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = per_request(series, row)
    unit = "output tokens/s" if TOKENS in series else "images/s"
    ramp = row["load_mode"] == LoadMode.RAMP
    fig, axes = plt.subplots(1, 3 if ramp else 2, figsize=(15 if ramp else 11, 4.2))
    t = series["t_s"]
    rates_ax, latency_ax = axes[0], axes[1]
    rates_ax.step(t, series["offered_rps"] * images, where="post", label="offered", color="grey")
    rates_ax.step(t, series[TOKENS if TOKENS in series else "throughput_img_s"], where="post", label="served",
                  color="tab:blue")
    if "goodput_img_s" in series:
        rates_ax.step(t, series["goodput_img_s"], where="post", label="served well (goodput)", color="tab:green")
    rates_ax.set(xlabel="seconds into the measurement", ylabel=unit, title="rate")
    rates_ax.legend(fontsize=8)
    for name, style in (("latency_p99_ms", "-"), ("latency_p50_ms", ":")):
        if name in series:
            latency_ax.step(t, series[name], where="post", linestyle=style, color="tab:red",
                            label=name.removeprefix("latency_").removesuffix("_ms"))
    if deadline_ms is not None:
        latency_ax.axhline(deadline_ms, color="black", lw=0.8, linestyle="--", label=f"deadline {deadline_ms:g} ms")
    if series.get("latency_p99_ms", pd.Series(dtype=float)).max() > 20 * max(series["latency_p50_ms"].min(), 1e-3):
        latency_ax.set_yscale("log")
    latency_ax.set(xlabel="seconds into the measurement", ylabel="ms", title="latency")
    if series["error_rate"].max() > 0:
        errors_ax = latency_ax.twinx()
        errors_ax.step(t, series["error_rate"] * 100, where="post", color="tab:orange", label="failed %")
        errors_ax.set_ylabel("failed %")
        errors_ax.legend(loc="lower right", fontsize=8)
    latency_ax.legend(fontsize=8, loc="upper left")
    if ramp:
        _knee_plot(axes[2], series, images, unit)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _knee_plot(ax: Any, series: pd.DataFrame, images: float, unit: str = "images/s") -> None:
    offered = series["offered_rps"] * images
    served_now = served(series)
    top = float(max(offered.max(), served_now.max(), 1.0))
    ax.plot([0, top], [0, top], color="grey", lw=0.8, linestyle="--", label="served = offered")
    ax.scatter(offered, served_now, s=14, color="tab:green")
    found = knee(series, images)
    if found is not None:
        x = float(found["offered_rps"]) * images
        short = "img/s" if unit == "images/s" else "tok/s"
        ax.axvline(x, color="crimson", lw=1, label=f"knee ≈ {x:.4g} {short} offered")
    ax.set(xlabel=f"offered {unit} (bin)", ylabel=f"served well, {unit}", title="the ramp's knee")
    ax.legend(fontsize=8)


def traffic_section(doc: Document, images: dict[str, Path], folder: Path, data: SweepData,
                    labels: dict[str, str], goodput: tuple[str, str] = ("goodput_img_s", "goodput img/s"),
                    served_what: str = "images served and served well (answered within the deadline)") -> list[str]:
    """The section (nothing when no request failed and no trial's load changed with time); its summary lines.
    `goodput`: the failed trials' goodput figure and its column; `served_what`: what the bins count (a generative
    sweep's: its goodput in output tokens/s, and the output tokens its bins served, whose knee is in tokens/s)."""
    shown = [(run_id, frame) for run_id, frame in data.series.items() if not frame.empty and "t_s" in frame]
    failing = "error_rate" in data.trials.columns and (data.trials["error_rate"].fillna(0) > 0).any()
    stalled = stalled_trials(data.trials)
    if not shown and not failing and stalled.empty:
        return []
    doc.h(1, "Errors and traffic over time")
    summary = _errors(doc, data, labels, goodput) + _stalls(doc, stalled, labels)
    if not shown:
        return summary
    doc.p(f"Each trial whose load changes with time, bin by bin (a fifth of a window; {DOCS}): the rate offered "
          f"against the {served_what}, and the latency of the "
          "requests scheduled in each bin. A ramp's knee is the first bin that served well less than "
          f"{KNEE_SHARE:.0%} of what it was offered.")
    rows = data.trials.set_index("run_id")
    knees = []
    for run_id, frame in shown[:MAX_PLOTS]:
        row = rows.loc[run_id]
        title = f"{labels.get(row['tier'], row['tier'])} · {row['stack']} · b{int(row['batch_size'])} · {row['load']}"
        name = f"traffic_{run_id[:8]}.png"
        deadline = pd.to_numeric(row.get("goodput_deadline_ms"), errors="coerce")
        images[name] = _plot(frame, row, title, folder / name, None if pd.isna(deadline) else float(deadline))
        doc.image(name, title)
        if row["load_mode"] == LoadMode.RAMP:
            found = knee(frame, per_request(frame, row))
            what, tokens = "goodput", ""
            if TOKENS in frame and found is not None:  # a generative ramp: its knee in output tokens/s
                what = "output tokens/s"
                tokens = f" (≈ {found['offered_rps'] * per_request(frame, row):.4g} output tokens/s)"
            knees.append(f"{title}: " + (f"{what} left the offered line at ≈ {found['offered_rps']:.4g} req/s "
                                         f"offered{tokens} ({found['t_s']:.1f} s in, p99 "
                                         f"{found.get('latency_p99_ms', float('nan')):.4g} ms)"
                                         if found is not None else "it kept up through the whole ramp"))
    if len(shown) > MAX_PLOTS:
        doc.p(f"{len(shown) - MAX_PLOTS} more such trial(s) are in MLflow (step metrics `series_*`).")
    if knees:
        doc.bullets(knees)
        summary += [f"ramp {k}" for k in knees]
    return summary

"""SLO search: the highest load (concurrency, or rate in open loop) whose latency figures stay within their targets,
and where a goodput rule is set (`experiment.slo.min_goodput_share`), whose goodput stays at least that share of the
load offered. The targets are the workload's (`Workload.slo_targets`): an image sweep's end-to-end p99
(`experiment.slo.p99_ms`), a generative sweep's TTFT p99 and TPOT p99 (`ttft_p99_ms`, `tpot_p99_ms`); a probe meets
them all or misses. The summary's figures are named after the workload's throughput and cost (`SloNames`).

Doubling from the first load until a target breaks (or the load limit is hit), then bisection between
the last load that met it and the first that didn't; where the first load already misses, halving down to the floor
until one meets, then the same bisection. Every probe is a real measured trial; loads already
measured by the grid are reused. An overloaded probe (an open loop whose completions fell behind its arrivals)
misses, whatever its latency: its latency only grows with the length of the trial. Where the miss that bounds the
answer was measured by a client that fell behind its own schedule (`client_behind`), the bound is the client's, and the
result says so (`client_bound`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from experiments.config.choices import SloRange
from experiments.measure.intervals import Interval, interval_metrics
from experiments.measure.slo_names import FIGURE_OF, IMAGE, LABELS, SloNames, at_max
from serving.metric import cost_per
from serving.workloads.workload import Workload

# Bisection stops when the open-loop rate is known to within this fraction.
RATE_PRECISION = 0.05


@dataclass(frozen=True)
class SloTargets:
    """What a search keeps: each latency target set among the workload's SLO keys (`experiment.slo.<key>`, in ms),
    and the goodput rule. The deadline is goodput's, not a target of its own."""

    bounds: tuple[tuple[str, float], ...]  # (SLO key, ms): (("p99_ms", 50.0),), (("ttft_p99_ms", 500.0), ...)
    min_goodput_share: float | None = None

    @classmethod
    def of(cls, slo: Any, workload: Workload) -> SloTargets:
        """The targets `slo` (an `SloConfig`) sets among `workload.slo_targets`; no bounds: no search."""
        return cls(tuple(slo.targets(workload.slo_targets).items()),
                   slo.min_goodput_share)

    @classmethod
    def p99(cls, p99_ms: float, min_goodput_share: float | None = None) -> SloTargets:
        """An image search's one target: every request's end-to-end p99."""
        return cls((("p99_ms", p99_ms),), min_goodput_share)

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def met_by(self, probe: SloProbe) -> bool:
        if probe.overloaded or any(not probe.figure(FIGURE_OF.get(key, key)) <= ms for key, ms in self.bounds):
            return False  # a figure the probe lacks (NaN) misses too
        share = self.min_goodput_share
        return share is None or (probe.goodput_share is not None and probe.goodput_share >= share)

    def unmeetable(self, workload: Workload, request_format: str) -> str | None:
        """Why no load of `request_format` can meet these targets: they bound a figure its requests never have
        (`Workload.lacks`: an answer not streamed has no TTFT or TPOT), so a search would only probe it down to its
        floor; None when it can."""
        missing, having = workload.unmeasured(request_format, {key: FIGURE_OF.get(key, key) for key, _ in self.bounds})
        if not missing:
            return None
        return (f"input format {request_format} has no {' or '.join(LABELS.get(k, k) for k in missing)} (its requests "
                f"never carry one): no load can meet {self.describe()}, so its SLO search is skipped, not probed down "
                "to its floor" + (f"; the input formats that have it: {', '.join(having)}" if having else ""))

    def metrics(self) -> dict[str, float]:
        """`slo_<key>`: each target searched for (`slo_p99_ms`, `slo_ttft_p99_ms`, `slo_tpot_p99_ms`)."""
        return {f"slo_{key}": ms for key, ms in self.bounds}

    def describe(self) -> str:
        """`p99 <= 50 ms`, `TTFT p99 <= 500 ms and TPOT p99 <= 50 ms`."""
        return " and ".join(f"{LABELS.get(key, key)} <= {ms:g} ms" for key, ms in self.bounds)

    def tag(self) -> str:
        """`p99-50ms`, `ttft-p99-500ms-tpot-p99-50ms`: the targets in a run name."""
        return "-".join(f"{key.removesuffix('_ms').replace('_', '-')}-{ms:g}ms" for key, ms in self.bounds)


@dataclass(frozen=True)
class SloProbe:
    """One measured load: its end-to-end p99, its throughput in the workload's unit, and the other latency figures
    its targets may bound (`figures`: a generative trial's `ttft_p99_ms`, `tpot_p99_ms`)."""

    load: float
    p99_ms: float
    throughput: float
    overloaded: bool = False
    stable: bool = True
    # The throughput's 95 % interval where the probe was measured several times (experiment.repeats); else None.
    throughput_interval: tuple[float, float] | None = None
    goodput_share: float | None = None  # requests answered well within the deadline over those offered
    goodput: float | None = None  # their units per second (with a deadline: what the capacity plan sizes on)
    client_behind: bool = False  # an open-loop client that fell behind its own schedule measured this load
    figures: Mapping[str, float] = field(default_factory=dict)

    def figure(self, name: str) -> float:
        """The latency figure `name` (ms); NaN where the probe has none (an answer not streamed has no TTFT)."""
        if name == FIGURE_OF["p99_ms"]:
            return self.p99_ms
        return float(self.figures.get(name, math.nan))

    def meets(self, targets: SloTargets | float, min_goodput_share: float | None = None) -> bool:
        """Within every target (a number: an image search's p99 in ms, with `min_goodput_share`)."""
        return _targets(targets, min_goodput_share).met_by(self)


def _targets(targets: SloTargets | float, min_goodput_share: float | None = None) -> SloTargets:
    return targets if isinstance(targets, SloTargets) else SloTargets.p99(targets, min_goodput_share)


@dataclass
class SloResult:
    targets: SloTargets | float  # a number: an image search's p99 target (ms)
    best: SloProbe | None  # the highest load that met the targets; None when even the lowest did not
    probes: list[SloProbe] = field(default_factory=list)
    limited: bool = False  # the search stopped at the configured load limit, still within the targets
    client_bound: bool = False  # the lowest load that missed had a client that fell behind: the bound is the client's
    names: SloNames = IMAGE  # the summary's figures, in the workload's unit

    def __post_init__(self) -> None:
        self.targets = _targets(self.targets)

    def metrics(self, price_per_hour_usd: float) -> dict[str, float]:
        """The search's figures, its cost at `price_per_hour_usd`: what the nodes that served it cost per hour
        (`experiments.run.trial.priced_usd_per_hour`)."""
        targets, names, best = self.targets, self.names, self.best
        out = {**targets.metrics(), "slo_probes": float(len(self.probes)), "slo_met": float(best is not None),
               "slo_limited": float(self.limited), "slo_client_bound": float(self.client_bound)}
        if targets.min_goodput_share is not None:
            out["slo_min_goodput_share"] = targets.min_goodput_share
        if best is None:
            return out
        if best.goodput_share is not None:
            out["slo_goodput_share_at_max"] = best.goodput_share
        if best.goodput is not None:
            out[names.max_goodput] = best.goodput
        out.update({"slo_max_load": best.load, names.max_throughput: best.throughput,
                    **{at_max(key): best.figure(FIGURE_OF.get(key, key)) for key, _ in targets.bounds},
                    "slo_stable_at_max": float(best.stable)})
        if best.throughput > 0:
            out[names.cost] = cost_per(price_per_hour_usd, best.throughput, names.per)
        if best.throughput_interval is not None:
            # The per-node capacity's interval: the capacity plan's node counts and $/month ranges come from it.
            spread = Interval(*best.throughput_interval)
            out.update(interval_metrics(names.max_throughput, spread))
            out.update(interval_metrics(names.cost, spread.map(
                lambda t: cost_per(price_per_hour_usd, t, names.per) if t > 0 else math.inf)))
        return out

    def to_json(self) -> dict:
        return asdict(self)


def search_slo(measure_at: Callable[[float], SloProbe | None], targets: SloTargets | float, loads: SloRange,
               known: dict[float, SloProbe] | None = None, min_goodput_share: float | None = None,
               names: SloNames = IMAGE) -> SloResult:
    """`measure_at(load)` measures one load (None when that measurement failed, which counts as a miss); `targets` what
    it keeps (a number: an image search's p99 in ms, with `min_goodput_share`). The search starts at `loads.start` and
    goes down to `loads.floor` at most when that misses (`LoadMode.slo_search_range`)."""
    targets = _targets(targets, min_goodput_share)
    probes: dict[float, SloProbe | None] = dict(known or {})

    def probe(load: float) -> SloProbe | None:
        if load not in probes:
            probes[load] = measure_at(load)
        return probes[load]

    def meets(result: SloProbe | None) -> bool:
        return result is not None and targets.met_by(result)

    good: float | None = None
    bad: float | None = None
    integer, limit, floor = loads.integer, loads.limit, loads.floor
    load = loads.start
    while True:
        if meets(probe(load)):
            good = load
            if load >= limit:
                break
            load = min(limit, load * 2)
        else:
            bad = load
            break
    while good is None and bad > floor:
        load = max(floor, bad // 2 if integer else bad / 2)
        if meets(probe(load)):
            good = load
        else:
            bad = load
    if good is not None and bad is not None:
        while (bad - good > 1) if integer else (bad - good > RATE_PRECISION * good):
            middle = (good + bad) // 2 if integer else (good + bad) / 2
            if meets(probe(middle)):
                good = middle
            else:
                bad = middle
    measured = [p for p in probes.values() if p is not None]
    bound = probes.get(bad) if bad is not None else None
    return SloResult(targets, probes.get(good) if good is not None else None,
                     sorted(measured, key=lambda p: p.load), limited=good is not None and bad is None,
                     client_bound=bound is not None and bound.client_behind, names=names)


def summary_line(metrics: Mapping[str, float], workload: Workload) -> str:
    """`highest load within p99 <= 50 ms: 8 (240.0 img/s, $0.0012/1k img)`: an SLO summary in a line of the log."""
    names = SloNames.of(workload)
    within = " and ".join(f"{LABELS[key]} <= {metrics[f'slo_{key}']:g} ms" for key in LABELS
                          if f"slo_{key}" in metrics)
    if not metrics["slo_met"]:
        return f"no load meets {within}"
    unit = next(m.unit for m in workload.metrics if m.name == names.throughput)
    per = {1e3: "1k", 1e6: "1M"}.get(names.per, f"{names.per:g}")
    short = {"image": "img"}.get(workload.unit, workload.unit)
    cost = metrics.get(names.cost, math.nan)
    return (f"highest load within {within}: {metrics['slo_max_load']:g} ({metrics[names.max_throughput]:.1f} {unit}, "
            f"${cost:.4f}/{per} {short})")

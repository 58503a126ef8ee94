"""SLO search: the highest load (concurrency, or rate in open loop) whose p99 stays within a target, and where a
goodput rule is set (`experiment.slo.min_goodput_share`), whose goodput stays at least that share of the load offered.

Doubling from the first load until p99 breaks the target (or the load limit is hit), then bisection between
the last load that met it and the first that didn't; where the first load already misses, halving down to the floor
until one meets, then the same bisection. Every probe is a real measured trial; loads already
measured by the grid are reused. An overloaded probe (an open loop whose completions fell behind its arrivals)
misses, whatever its p99: its latency only grows with the length of the trial. Where the miss that bounds the answer
was measured by a client that fell behind its own schedule (`client_behind`), the bound is the client's, and the
result says so (`client_bound`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from experiments.config.choices import SloRange
from experiments.config.prices import cost_per_1k_images
from experiments.measure.intervals import Interval, interval_metrics
from experiments.measure.pooled import cost_intervals

# Bisection stops when the open-loop rate is known to within this fraction.
RATE_PRECISION = 0.05


@dataclass(frozen=True)
class SloProbe:
    load: float
    p99_ms: float
    throughput_img_s: float
    overloaded: bool = False
    stable: bool = True
    # The throughput's 95 % interval where the probe was measured several times (experiment.repeats); else None.
    throughput_interval: tuple[float, float] | None = None
    goodput_share: float | None = None  # requests answered well within the deadline over those offered
    goodput_img_s: float | None = None  # their images per second (with a deadline: what the capacity plan sizes on)
    client_behind: bool = False  # an open-loop client that fell behind its own schedule measured this load

    def meets(self, slo_p99_ms: float, min_goodput_share: float | None = None) -> bool:
        if self.overloaded or self.p99_ms > slo_p99_ms:
            return False
        return min_goodput_share is None or (self.goodput_share is not None
                                             and self.goodput_share >= min_goodput_share)


@dataclass
class SloResult:
    slo_p99_ms: float
    best: SloProbe | None  # the highest load that met the SLO; None when even the lowest did not
    probes: list[SloProbe] = field(default_factory=list)
    limited: bool = False  # the search stopped at the configured load limit, still within the SLO
    min_goodput_share: float | None = None  # the goodput rule the search also kept (None: p99 only)
    client_bound: bool = False  # the lowest load that missed had a client that fell behind: the bound is the client's

    def metrics(self, price_per_hour_usd: float) -> dict[str, float]:
        """The search's figures, its cost at `price_per_hour_usd`: what the nodes that served it cost per hour
        (`experiments.run.trial.priced_usd_per_hour`)."""
        out = {"slo_p99_ms": self.slo_p99_ms, "slo_probes": float(len(self.probes)),
               "slo_met": float(self.best is not None), "slo_limited": float(self.limited),
               "slo_client_bound": float(self.client_bound)}
        if self.min_goodput_share is not None:
            out["slo_min_goodput_share"] = self.min_goodput_share
        if self.best is not None and self.best.goodput_share is not None:
            out["slo_goodput_share_at_max"] = self.best.goodput_share
        if self.best is not None and self.best.goodput_img_s is not None:
            out["slo_max_goodput_img_s"] = self.best.goodput_img_s
        if self.best is not None:
            out.update(slo_max_load=self.best.load, slo_max_throughput_img_s=self.best.throughput_img_s,
                       slo_p99_at_max_ms=self.best.p99_ms, slo_stable_at_max=float(self.best.stable))
            if self.best.throughput_img_s > 0:
                out["cost_per_1k_images_at_slo_usd"] = cost_per_1k_images(price_per_hour_usd,
                                                                          self.best.throughput_img_s)
            if self.best.throughput_interval is not None:
                # The per-node capacity's interval: the capacity plan's node counts and $/month ranges come from it.
                spread = Interval(*self.best.throughput_interval)
                out.update(interval_metrics("slo_max_throughput_img_s", spread))
                found = cost_intervals(price_per_hour_usd, spread)
                out.update({name.replace("cost_per_1k_images_usd", "cost_per_1k_images_at_slo_usd"): value
                            for name, value in found.items() if name.startswith("cost_per_1k_images_usd")})
        return out

    def to_json(self) -> dict:
        return asdict(self)


def search_slo(measure_at: Callable[[float], SloProbe | None], slo_p99_ms: float, loads: SloRange,
               known: dict[float, SloProbe] | None = None, min_goodput_share: float | None = None) -> SloResult:
    """`measure_at(load)` measures one load (None when that measurement failed, which counts as a miss). The search
    starts at `loads.start` and goes down to `loads.floor` at most when that misses (`LoadMode.slo_search_range`)."""
    probes: dict[float, SloProbe | None] = dict(known or {})

    def probe(load: float) -> SloProbe | None:
        if load not in probes:
            probes[load] = measure_at(load)
        return probes[load]

    def meets(result: SloProbe | None) -> bool:
        return result is not None and result.meets(slo_p99_ms, min_goodput_share)

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
    return SloResult(slo_p99_ms, probes.get(good) if good is not None else None,
                     sorted(measured, key=lambda p: p.load), limited=good is not None and bad is None,
                     min_goodput_share=min_goodput_share, client_bound=bound is not None and bound.client_behind)

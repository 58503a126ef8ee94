"""The traffic a capacity plan is sized for (`capacity.*` in a sweep, `--traffic-img-s` in `runners.report`), checked
once where it comes in. In images/s, the unit every throughput figure here has (`slo_max_throughput_img_s`); a
request of b images counts b. Kept free of pandas so config checks load fast; the plan is
`experiments.report.capacity`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from experiments.config.checks import Checked, refused_by
from experiments.config.errors import not_allowed, refuse

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

# The capacity plan's spare capacity above the peak unless the user says (`capacity.headroom`, `--headroom`).
DEFAULT_HEADROOM = 0.2

# Beyond 100 % spare capacity the "headroom" is a different peak: say that peak instead (or a percent was typed).
MAX_HEADROOM = 1.0
CONFIG_KEYS = ("capacity.traffic_img_s", "capacity.peak_img_s", "capacity.headroom")
FLAG_KEYS = ("--traffic-img-s", "--peak-img-s", "--headroom")


def exact(value: float) -> Fraction:
    """A float as the decimal it prints as (0.2 -> 1/5): node counts are ceilings, and 1200 / 240 must be 5, not
    5.000000000000001 -> 6."""
    return Fraction(repr(float(value)))


@dataclass(frozen=True)
class Traffic:
    """Average and peak traffic in images/s, and the spare capacity kept above the peak (0.2: 20 %)."""

    average_img_s: float
    peak_img_s: float
    headroom: float = DEFAULT_HEADROOM

    @property
    def required_img_s(self) -> Fraction:
        """What the nodes must serve within the p99 target: peak x (1 + headroom), headroom applied once, here."""
        return exact(self.peak_img_s) * (1 + exact(self.headroom))

    def describe(self) -> str:
        """`peak 1,000 img/s + 20 % headroom = 1,200 img/s (average 800 img/s)`."""
        average = "" if self.average_img_s == self.peak_img_s else f" (average {self.average_img_s:,g} img/s)"
        return (f"peak {self.peak_img_s:,g} img/s + {self.headroom * 100:g} % headroom = "
                f"{float(self.required_img_s):,g} img/s{average}")


def _example(key: str, value: str) -> str:
    """How the user writes the key: `capacity.headroom=0.2` in a sweep, `--headroom 0.2` on the report's line."""
    return f"{key} {value}" if key.startswith("--") else f"{key}={value}"


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise not_allowed(key, value, "give a finite number")
    return float(value)


def traffic(average: Any, peak: Any = None, headroom: Any = DEFAULT_HEADROOM,
            keys: tuple[str, str, str] = CONFIG_KEYS) -> Traffic:
    """The checked traffic, or ConfigError naming the key (`keys`: how the caller's user spelt them), the value and
    the fix. `peak` None: the average is the peak."""
    average_key, peak_key, headroom_key = keys
    average = _number(average_key, average)
    if average <= 0:
        raise not_allowed(average_key, average, "give the average traffic in images/s, > 0 (a request of b images "
                          f"counts b), e.g. {_example(average_key, '1000')}")
    peak = average if peak is None else _number(peak_key, peak)
    if peak < average:
        raise not_allowed(peak_key, peak, f"the peak is at least the average traffic ({average_key}={average:g}); "
                          "give the highest rate to serve within the SLO, or leave it out to size for the average")
    headroom = _number(headroom_key, headroom)
    if not 0 <= headroom <= MAX_HEADROOM:
        raise not_allowed(headroom_key, headroom, f"a fraction of the peak in [0, {MAX_HEADROOM:g}]: 0.2 keeps 20 % "
                          "spare capacity above it (write 0.2, not 20); for more, give a higher peak")
    return Traffic(average, peak, headroom)


@dataclass
class CapacityConfig(Checked):
    """The report's capacity plan (docs/capacity-plan.md): per tier, the nodes that serve this traffic within
    `experiment.slo.p99_ms` (from the SLO search's highest throughput per node) and what they cost per hour and per
    month at each listed price. Traffic is in images/s: a request of b images counts b."""

    traffic_img_s: float | None = None  # the average traffic, images/s; null: no capacity plan
    peak_img_s: float | None = None  # the peak the nodes are sized for, >= traffic_img_s; null: the average
    headroom: float = DEFAULT_HEADROOM  # spare capacity above the peak, a fraction in [0, 1]: 0.2 sizes for 1.2 x it
    # Generative: the peak requests/s the plan is sized for, in tokens (each request the measured output tokens of
    # the point chosen within experiment.slo.ttft_p99_ms / tpot_p99_ms); null: no plan
    peak_rps: float | None = None

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """The keys of the experiment's workload, and the SLO search the plan sizes nodes from
        (`experiment.slo.p99_ms`)."""
        generative = cfg.experiment.workload == "generative"
        if self.peak_rps is not None:
            if not generative:
                return [refuse(f"{key}.peak_rps", self.peak_rps, "a generative sweep's peak in requests/s; an image "
                                                                 f"sweep's traffic is {CONFIG_KEYS[0]} (images/s)")]
            if not (isinstance(self.peak_rps, int | float) and self.peak_rps > 0):
                return [refuse(f"{key}.peak_rps", self.peak_rps, "the peak requests/s to size the nodes for, > 0")]
            if not 0 <= self.headroom <= 1:
                return [refuse(f"{key}.headroom", self.headroom, "spare capacity above the peak, in [0, 1]")]
        if generative and self.traffic_img_s is not None:
            return [refuse(CONFIG_KEYS[0], self.traffic_img_s, "a generative sweep's plan is sized in requests/s: "
                                                               "capacity.peak_rps=R")]
        if self.traffic_img_s is None:
            if self.peak_img_s is not None:
                return [refuse(CONFIG_KEYS[1], self.peak_img_s, "it sizes a capacity plan: give the average traffic "
                                                                f"too, e.g. {CONFIG_KEYS[0]}={self.peak_img_s:g}")]
            return []
        problems = refused_by(configured_traffic, self)
        if not problems and cfg.experiment.slo.p99_ms is None:
            problems = [refuse(CONFIG_KEYS[0], self.traffic_img_s, "the capacity plan counts nodes from the SLO "
                               "search's highest throughput within the p99 target: set experiment.slo.p99_ms too, "
                               "e.g. experiment.slo.p99_ms=50")]
        return problems


def configured_traffic(capacity: CapacityConfig) -> Traffic | None:
    """A sweep's `capacity.*` as the report takes it; None when no traffic is given (no plan)."""
    if capacity.traffic_img_s is None:
        return None
    return traffic(capacity.traffic_img_s, capacity.peak_img_s, capacity.headroom)

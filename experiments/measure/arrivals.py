"""Open-loop arrival shapes beyond constant and Poisson gaps (experiment.load_mode gamma, bursts, ramp, trace), drawn
in Python for both load engines: the Python client takes them one gap at a time (`next_gap`), the compiled engine as
a file of gaps (`take`). Every shape's `arrivals(rate, rng)` gives that schedule for one client actor's share of the
trial's rate.

    gamma   gaps of a gamma distribution with mean 1 / rate and coefficient of variation `cv` (1: Poisson; 3: the
            bursty traffic production services see, many short gaps and a few long ones). With a period (the
            measurement window) and the schedule's start, every period of the epoch's grid holds exactly its share of
            the rate, placed by the gamma's gaps rescaled to fill it: the shape within a window, the rate asked of it
            (independent gaps of CV 3 offer a window 60 req/s only on average: +42 % was seen over 6 s)
    bursts  Poisson arrivals during `on_s`, none during `off_s`, over and over; `rate` is the mean over both, so
            a burst runs at rate x (on_s + off_s) / on_s
    ramp    Poisson arrivals at a rate rising in `steps` equal steps of `step_s` from `start` x rate to rate (the peak),
            then held there: one measurement window per step, so each window is one offered rate; the first step's
            rate also holds through the warm-up (`lead_s`), so the steps begin about when the windows do
    trace   a trace file's shape (experiments.measure.replay)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from experiments.config.choices import LoadMode
from experiments.measure.replay import Replay, replay_of

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig

BURST_RESOLUTION_S = 0.01  # the on/off pattern's steps
EDGE_S = 0.001  # gamma's periods: arrivals keep this far from a period's edges


class Schedule(Protocol):
    def take(self, count: int) -> np.ndarray: ...

    def next_gap(self) -> float: ...


class Shape(Protocol):
    def arrivals(self, rate: float, rng: np.random.Generator, start: float | None = None) -> Schedule: ...


class Gaps:
    """A renewal schedule: independent gaps drawn by `draw(rng, count)`, in chunks."""

    CHUNK = 4096

    def __init__(self, draw, rng: np.random.Generator) -> None:
        self._draw = draw
        self._rng = rng
        self._buffer: list[float] = []

    def take(self, count: int) -> np.ndarray:
        return np.asarray(self._draw(self._rng, count), dtype=float)

    def next_gap(self) -> float:
        if not self._buffer:
            self._buffer = self.take(self.CHUNK).tolist()[::-1]
        return self._buffer.pop()


class PeriodGaps:
    """Arrivals at `rate` in every period of `period_s` on the epoch's grid (period k, [kP, (k+1)P), holds
    floor(rate (k+1) P) - floor(rate k P) of them; the first, partial one from `start` its share), placed in each by
    gamma gaps of shape `k` rescaled to fill it: the gaps' law conditioned on the period's count (a Dirichlet split),
    so bursts keep their shape within a period while each period offers what was asked of it."""

    def __init__(self, k: float, rate: float, period_s: float, start: float, rng: np.random.Generator) -> None:
        self._k, self._rate, self._period, self._rng = k, rate, period_s, rng
        self._last = start  # the latest arrival handed out (the schedule's start before any)
        self._from = start  # where the next period to fill begins
        self._times: list[float] = []  # the current period's arrivals not yet handed out, latest first

    def _fill(self) -> None:
        while not self._times:
            begin = self._from
            end = (math.floor(begin / self._period) + 1) * self._period
            count = math.floor(self._rate * end) - math.floor(self._rate * begin)
            self._from = end
            if count <= 0:
                continue
            gaps = self._rng.gamma(self._k, 1.0, size=count + 1)
            # kept EDGE_S inside the period: a burst against its edge stays in its period, whatever the float
            # rounding of an epoch time (~0.2 µs) and of the gaps summed again by the load
            edge = min(EDGE_S, (end - begin) / 100)
            times = begin + edge + (end - begin - 2 * edge) * np.cumsum(gaps[:-1]) / gaps.sum()
            self._times = times[::-1].tolist()

    def next_gap(self) -> float:
        if not self._times:
            self._fill()
        at = self._times.pop()
        gap, self._last = at - self._last, at
        return gap

    def take(self, count: int) -> np.ndarray:
        return np.fromiter((self.next_gap() for _ in range(count)), dtype=float, count=count)


@dataclass(frozen=True)
class GammaShape:
    cv: float
    # Every period of this length (the measurement window) on the epoch's grid offers exactly the rate's share, when
    # the schedule's start is known (`PeriodGaps`); None: independent gaps, the rate only on average
    period_s: float | None = None

    def arrivals(self, rate: float, rng: np.random.Generator, start: float | None = None) -> Gaps | PeriodGaps:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        shape, scale = 1.0 / self.cv**2, self.cv**2 / rate  # mean shape x scale = 1 / rate, CV 1 / sqrt(shape)
        if self.period_s is not None and start is not None:
            return PeriodGaps(shape, rate, self.period_s, start, rng)
        return Gaps(lambda r, n: r.gamma(shape, scale, size=n), rng)


@dataclass(frozen=True)
class BurstShape:
    on_s: float
    off_s: float

    def replay(self) -> Replay:
        on = max(1, round(self.on_s / BURST_RESOLUTION_S))
        off = max(1, round(self.off_s / BURST_RESOLUTION_S))
        return Replay((1.0,) * on + (0.0,) * off, (on + off) * BURST_RESOLUTION_S)

    def arrivals(self, rate: float, rng: np.random.Generator, start: float | None = None) -> Schedule:
        replay = self.replay()
        return replay.arrivals(rate * len(replay.shape) / sum(replay.shape), rng)


@dataclass(frozen=True)
class RampShape:
    steps: int
    start: float
    step_s: float
    lead_s: float = 0.0

    SUBSTEPS = 10  # the shape's resolution: a tenth of a step (the lead is rounded to it)
    HELD = 64  # steps at the peak after the ramp, repeated for as long as the load runs

    def replay(self) -> Replay:
        sub_s = self.step_s / self.SUBSTEPS
        lead = [self.start] * round(self.lead_s / sub_s)
        rising = np.repeat(np.linspace(self.start, 1.0, self.steps), self.SUBSTEPS).tolist()
        shape = (*lead, *rising, *([1.0] * (self.HELD * self.SUBSTEPS)))
        return Replay(shape, len(shape) * sub_s)

    def arrivals(self, rate: float, rng: np.random.Generator, start: float | None = None) -> Schedule:
        return self.replay().arrivals(rate, rng)


def shape_of(exp: ExperimentConfig, mode: LoadMode) -> Shape | None:
    """The arrival shape of an open-loop `mode` (None for constant and Poisson, whose gaps LoadMode draws)."""
    arrivals = exp.arrivals
    if mode is LoadMode.GAMMA:  # each measurement window offers the rate asked of it
        return GammaShape(float(arrivals.cv), float(exp.window_s))
    if mode is LoadMode.BURSTS:
        return BurstShape(float(arrivals.burst_on_s), float(arrivals.burst_off_s))
    if mode is LoadMode.RAMP:
        return RampShape(int(arrivals.ramp_steps), float(arrivals.ramp_start), float(exp.window_s),
                         lead_s=float(exp.warmup_s))
    if mode is LoadMode.TRACE:
        return replay_of(exp)
    return None

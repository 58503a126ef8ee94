"""Open-loop arrival shapes beyond constant and Poisson gaps (experiment.load_mode gamma, bursts, ramp, trace), drawn
in Python for both load engines: the Python client takes them one gap at a time (`next_gap`), the compiled engine as
a file of gaps (`take`). Every shape's `arrivals(rate, rng)` gives that schedule for one client actor's share of the
trial's rate.

    gamma   gaps of a gamma distribution with mean 1 / rate and coefficient of variation `cv` (1: Poisson; 3: the
            bursty traffic production services see, many short gaps and a few long ones)
    bursts  Poisson arrivals during `on_s`, none during `off_s`, over and over; `rate` is the mean over both, so
            a burst runs at rate x (on_s + off_s) / on_s
    ramp    Poisson arrivals at a rate rising in `steps` equal steps of `step_s` from `start` x rate to rate (the peak),
            then held there: one measurement window per step, so each window is one offered rate; the first step's
            rate also holds through the warm-up (`lead_s`), so the steps begin about when the windows do
    trace   a trace file's shape (experiments.measure.replay)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from experiments.config.choices import LoadMode
from experiments.measure.replay import Replay, replay_of

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig

BURST_RESOLUTION_S = 0.01  # the on/off pattern's steps


class Schedule(Protocol):
    def take(self, count: int) -> np.ndarray: ...

    def next_gap(self) -> float: ...


class Shape(Protocol):
    def arrivals(self, rate: float, rng: np.random.Generator) -> Schedule: ...


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


@dataclass(frozen=True)
class GammaShape:
    cv: float

    def arrivals(self, rate: float, rng: np.random.Generator) -> Gaps:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        shape, scale = 1.0 / self.cv**2, self.cv**2 / rate  # mean shape x scale = 1 / rate, CV 1 / sqrt(shape)
        return Gaps(lambda r, n: r.gamma(shape, scale, size=n), rng)


@dataclass(frozen=True)
class BurstShape:
    on_s: float
    off_s: float

    def replay(self) -> Replay:
        on = max(1, round(self.on_s / BURST_RESOLUTION_S))
        off = max(1, round(self.off_s / BURST_RESOLUTION_S))
        return Replay((1.0,) * on + (0.0,) * off, (on + off) * BURST_RESOLUTION_S)

    def arrivals(self, rate: float, rng: np.random.Generator) -> Schedule:
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

    def arrivals(self, rate: float, rng: np.random.Generator) -> Schedule:
        return self.replay().arrivals(rate, rng)


def shape_of(exp: ExperimentConfig, mode: LoadMode) -> Shape | None:
    """The arrival shape of an open-loop `mode` (None for constant and Poisson, whose gaps LoadMode draws)."""
    arrivals = exp.arrivals
    if mode is LoadMode.GAMMA:
        return GammaShape(float(arrivals.cv))
    if mode is LoadMode.BURSTS:
        return BurstShape(float(arrivals.burst_on_s), float(arrivals.burst_off_s))
    if mode is LoadMode.RAMP:
        return RampShape(int(arrivals.ramp_steps), float(arrivals.ramp_start), float(exp.window_s),
                         lead_s=float(exp.warmup_s))
    if mode is LoadMode.TRACE:
        return replay_of(exp)
    return None

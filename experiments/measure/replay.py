"""The arrivals of a trace replay (`experiment.load_mode=trace`): a Poisson process whose rate follows the trace's
shape, drawn in Python for both load engines (the Python client takes them one gap at a time, the compiled engine as a
file of gaps), like the other open-loop modes' schedules.

The rate is piecewise constant: step k of the shape lasts `span_s / steps` seconds at `rate x shape[k]` req/s, and the
shape repeats for as long as the load runs. Arrivals by time rescaling: unit exponential gaps on the cumulative rate
Λ(t) = ∫ rate, taken back through Λ⁻¹ (exact for a piecewise-constant rate; a step at rate 0 gets no arrival)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig


@dataclass(frozen=True)
class Replay:
    """The trace's shape (its busiest step is 1) and the seconds one pass of it lasts (one measurement window)."""

    shape: tuple[float, ...]
    span_s: float

    def arrivals(self, rate: float, rng: np.random.Generator, start: float | None = None) -> Arrivals:
        """The schedule at `rate` req/s at the busiest step (an actor's share of the trial's rate)."""
        return Arrivals(self, rate, rng)


class Arrivals:
    """Gaps between arrivals, drawn in chunks that continue one another (the first gap counts from the load's start,
    as in the other open-loop modes)."""

    CHUNK = 4096

    def __init__(self, replay: Replay, rate: float, rng: np.random.Generator) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        shape = np.asarray(replay.shape, dtype=float)
        self._step_s = replay.span_s / shape.size
        self._rates = rate * shape
        self._mass = np.cumsum(self._rates * self._step_s)  # expected arrivals by the end of each step
        self._rng = rng
        self._drawn = 0.0  # the cumulative rate at the last arrival drawn
        self._last_s = 0.0  # its time
        self._buffer: list[float] = []

    def _times(self, mass: np.ndarray) -> np.ndarray:
        """Λ⁻¹: the times at which the cumulative rate reaches `mass`."""
        cycle_mass = self._mass[-1]
        cycles = np.floor(mass / cycle_mass)
        within = mass - cycles * cycle_mass
        step = np.minimum(np.searchsorted(self._mass, within, side="right"), self._mass.size - 1)
        before = self._mass[step] - self._rates[step] * self._step_s
        rates = self._rates[step]
        into = np.divide(within - before, rates, out=np.zeros_like(within), where=rates > 0)
        return cycles * self._mass.size * self._step_s + step * self._step_s + into

    def take(self, count: int) -> np.ndarray:
        """The next `count` gaps, in seconds."""
        mass = self._drawn + np.cumsum(self._rng.exponential(1.0, size=count))
        times = self._times(mass)
        gaps = np.diff(times, prepend=self._last_s)
        self._drawn, self._last_s = float(mass[-1]), float(times[-1])
        return np.maximum(gaps, 0.0)

    def next_gap(self) -> float:
        """One gap (the Python client's schedule)."""
        if not self._buffer:
            self._buffer = self.take(self.CHUNK).tolist()[::-1]
        return self._buffer.pop()


def replay_of(exp: ExperimentConfig) -> Replay:
    """The experiment's trace as its replay: the trace's shape over one measurement window (`experiment.window_s`)."""
    from experiments.config.trace import read_trace

    return Replay(read_trace(str(exp.trace)).shape(), float(exp.window_s))

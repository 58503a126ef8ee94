"""Which server settings give the highest throughput within the SLO: the search over one backend's settings.

The space is a grid: one list of values per setting (`experiment.search.space`). `grid` measures every point.
`quick` climbs from the backend's own settings: it measures every neighbour of the current point (one step along
one setting), moves to the best one while that is better, and stops at a point none of its neighbours beats, as
Model Analyzer's quick search climbs its normalized space. Server settings give surfaces with one hump along each
axis (more instances or a longer batching window help until the server saturates or latency breaks the SLO), where
a climb finds the top with a fraction of the grid's probes; where a surface has two humps the climb can stop on the
lower one, which is why the grid stays available and the benchmark compares the two.

Pure logic: the objective (one number per point, higher is better; None when the point could not be measured) is
given by the caller, which measures each point as real trials. Each point is measured once. A point that failed or
met the SLO at no load scores nothing: the climb leaves it for any neighbour that scores, and stops where none does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from experiments.config.choices import SearchStrategy

Point = tuple[int, ...]  # one index into each setting's values


@dataclass(frozen=True)
class SearchSpace:
    """The settings searched, in order, each with the values to try."""

    settings: tuple[tuple[str, tuple[Any, ...]], ...]

    @classmethod
    def of(cls, space: dict[str, list[Any]]) -> SearchSpace:
        return cls(tuple((name, tuple(values)) for name, values in space.items()))

    @property
    def size(self) -> int:
        count = 1
        for _, values in self.settings:
            count *= len(values)
        return count

    def values(self, point: Point) -> dict[str, Any]:
        """The settings at `point`."""
        return {name: values[i] for (name, values), i in zip(self.settings, point, strict=True)}

    def point_of(self, values: dict[str, Any]) -> Point:
        """The point whose settings are `values` (each listed among its setting's values)."""
        return tuple(values_.index(values[name]) for name, values_ in self.settings)

    def points(self) -> Iterator[Point]:
        return itertools.product(*(range(len(values)) for _, values in self.settings))

    def neighbours(self, point: Point) -> list[Point]:
        """The points one step away along one setting."""
        out = []
        for axis, (_, values) in enumerate(self.settings):
            for step in (-1, 1):
                index = point[axis] + step
                if 0 <= index < len(values):
                    out.append((*point[:axis], index, *point[axis + 1:]))
        return out

    def nearest(self, current: dict[str, Any]) -> Point:
        """The point closest to the backend's own settings: each setting's value if listed, else the nearest
        numeric value (the first value for a setting that is not a number)."""
        point = []
        for name, values in self.settings:
            value = current.get(name)
            if value in values:
                point.append(values.index(value))
            elif _number(value) and all(_number(v) for v in values):
                point.append(min(range(len(values)), key=lambda i, v=value: abs(values[i] - v)))
            else:
                point.append(0)
        return tuple(point)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class SearchOutcome:
    """What a search measured: every point with its objective, the start and the best."""

    space: SearchSpace
    strategy: SearchStrategy
    start: Point
    measured: dict[Point, float | None] = field(default_factory=dict)
    stopped_at_limit: Point | None = None  # the quick climb stopped here: the hardware was the limit (`saturated`)

    @property
    def best(self) -> Point | None:
        """The point with the highest objective; None when no point gave one above zero."""
        scored = [(value, point) for point, value in self.measured.items() if value is not None and value > 0]
        return max(scored, key=lambda vp: vp[0])[1] if scored else None

    def value(self, point: Point | None) -> float | None:
        return None if point is None else self.measured.get(point)

    @property
    def probes(self) -> int:
        return len(self.measured)

    @property
    def gain(self) -> float | None:
        """Best over the start: what searching bought over the backend's own settings."""
        start, best = self.value(self.start), self.value(self.best)
        return best / start if best and start else None


def search_settings(space: SearchSpace, objective: Callable[[dict[str, Any]], float | None],
                    strategy: SearchStrategy, start: Point,
                    saturated: Callable[[dict[str, Any]], bool] | None = None) -> SearchOutcome:
    """Measure points of `space` with `objective` (settings -> higher is better) by `strategy`, from `start`. The
    quick climb also stops at a point `saturated` says has reached the hardware's limit (its GPU busy): no server
    setting can serve more there, so its neighbours are not worth their probes."""
    outcome = SearchOutcome(space, SearchStrategy(strategy), start)

    def measure(point: Point) -> float:
        if point not in outcome.measured:
            outcome.measured[point] = objective(space.values(point))
        value = outcome.measured[point]
        return value if value is not None and value > 0 else float("-inf")  # failed or never met the SLO: no rung

    if outcome.strategy is SearchStrategy.GRID:
        measure(start)  # first, so the default is known even if a later point fails the sweep
        for point in space.points():
            measure(point)
    elif outcome.strategy is SearchStrategy.QUICK:
        current, current_value = start, measure(start)
        while True:
            if saturated is not None and current_value > float("-inf") and saturated(space.values(current)):
                outcome.stopped_at_limit = current
                break
            neighbours = [(measure(p), p) for p in space.neighbours(current)]
            best_value, best = max(neighbours, key=lambda vp: vp[0], default=(float("-inf"), current))
            if best_value <= current_value:
                break
            current, current_value = best, best_value
    else:
        raise ValueError(f"no search for strategy {strategy!r}")
    return outcome

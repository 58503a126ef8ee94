"""The settings search on simulated response surfaces: exact, fast, no server."""

from __future__ import annotations

import math

import pytest

from experiments.config.choices import SearchStrategy
from experiments.run.settings_search import SearchSpace, search_settings

SPACE = SearchSpace.of({"instance_count": [1, 2, 3, 4, 6, 8],
                        "max_queue_delay_us": [0, 100, 500, 1000, 2000, 5000, 10000],
                        "max_batch_size": [1, 2, 4, 8, 16, 32]})


def throughput_at_slo(s: dict) -> float:
    """One hump per axis: instances help until the cores saturate, a longer batching window helps until its wait
    breaks the p99, bigger batches help until one batch's latency does."""
    instances = -((math.log2(s["instance_count"]) - 1.6) ** 2)
    delay = -((math.log10(s["max_queue_delay_us"] + 10) - 2.9) ** 2)
    batch = -((math.log2(s["max_batch_size"]) - 3.2) ** 2)
    return 400 * math.exp(0.3 * instances + 0.5 * delay + 0.2 * batch)


def counting(objective):
    calls = []

    def wrapped(settings: dict) -> float | None:
        calls.append(dict(settings))
        return objective(settings)
    return wrapped, calls


def test_the_grid_measures_every_point_once_and_picks_the_top() -> None:
    objective, calls = counting(throughput_at_slo)
    outcome = search_settings(SPACE, objective, SearchStrategy.GRID, SPACE.nearest({"instance_count": 1}))
    assert len(calls) == SPACE.size == outcome.probes == 6 * 7 * 6
    assert SPACE.values(outcome.best) == max((SPACE.values(p) for p in SPACE.points()), key=throughput_at_slo)
    assert SPACE.values(outcome.best) == {"instance_count": 3, "max_queue_delay_us": 1000, "max_batch_size": 8}


def test_quick_reaches_the_grid_winner_with_a_fraction_of_its_probes() -> None:
    grid = search_settings(SPACE, throughput_at_slo, SearchStrategy.GRID, (0, 0, 0))
    objective, calls = counting(throughput_at_slo)
    start = SPACE.nearest({"instance_count": 1, "max_queue_delay_us": 0, "max_batch_size": 32})
    quick = search_settings(SPACE, objective, SearchStrategy.QUICK, start)
    assert quick.best == grid.best
    assert quick.probes == len(calls) == len({tuple(sorted(c.items())) for c in calls})  # each point once
    assert quick.probes <= grid.probes / 3, quick.probes
    assert quick.gain == pytest.approx(throughput_at_slo(SPACE.values(quick.best)) /
                                       throughput_at_slo(SPACE.values(start)))


def test_quick_stops_where_no_neighbour_is_better() -> None:
    peak = SPACE.nearest({"instance_count": 3, "max_queue_delay_us": 1000, "max_batch_size": 8})
    quick = search_settings(SPACE, throughput_at_slo, SearchStrategy.QUICK, peak)
    assert quick.best == peak and quick.gain == 1.0
    assert quick.probes == 1 + len(SPACE.neighbours(peak)) == 7


def test_failed_and_slo_missing_points_never_win() -> None:
    space = SearchSpace.of({"instance_count": [1, 2, 4]})
    measured = {1: 100.0, 2: None, 4: 0.0}  # 2 failed to start, 4 met the SLO at no load
    outcome = search_settings(space, lambda s: measured[s["instance_count"]], SearchStrategy.GRID, (0,))
    assert space.values(outcome.best) == {"instance_count": 1} and outcome.gain == 1.0
    nothing = search_settings(space, lambda s: None if s["instance_count"] == 1 else 0.0, SearchStrategy.QUICK, (0,))
    assert nothing.best is None and nothing.gain is None
    assert nothing.probes == 2  # the start and its one neighbour: nothing better, so the climb stops


def test_the_start_is_the_backends_own_settings_or_the_nearest_value() -> None:
    assert SPACE.values(SPACE.nearest({"instance_count": 2, "max_queue_delay_us": 2000, "max_batch_size": 8})) == \
        {"instance_count": 2, "max_queue_delay_us": 2000, "max_batch_size": 8}
    assert SPACE.values(SPACE.nearest({"instance_count": 5, "max_queue_delay_us": 300, "max_batch_size": None})) == \
        {"instance_count": 4, "max_queue_delay_us": 100, "max_batch_size": 1}
    flags = SearchSpace.of({"dynamic_batching": [False, True]})
    assert flags.values(flags.nearest({"dynamic_batching": True})) == {"dynamic_batching": True}

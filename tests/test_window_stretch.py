"""A window short of `experiment.stability.min_requests` completions goes on into the next (experiments/measure/
windows.py): the stability rule compares windows that hold enough requests to tell a change from one request more or
less, the server's counters cover the joined windows, and a window never stretches past `MAX_STRETCH`."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.measure.load import WarmupStats
from experiments.measure.samples import WindowSamples
from experiments.measure.windows import (
    MAX_STRETCH,
    STRETCH_SLOWEST,
    WindowStretch,
    measure,
    silence_reason,
    stretch_cap,
)
from experiments.plan import Trial


def window(k: int, completed: int, window_s: float = 1.0, origin: float = 0.0) -> WindowSamples:
    """Window `k` (from `origin`, `window_s` long) in which `completed` requests of 1 image ran 10 ms each."""
    start = origin + k * window_s
    intended = start + np.arange(completed) * (window_s / max(completed, 1))
    return WindowSamples(start, start + window_s, 1, intended, intended, intended + 0.01, np.full(completed, np.nan),
                         np.zeros(completed, dtype=np.int32), completed=completed, sent=completed)


def test_windows_short_of_the_minimum_are_joined_and_none_stretches_past_the_cap() -> None:
    stretch = WindowStretch(min_requests=10, neighbours=1)
    counts = [3, 4, 5, 30] + [1] * MAX_STRETCH
    joined = [stretch.add([window(k, n), window(k, 2 * n)]) for k, n in enumerate(counts)]
    done = [j for j in joined if j is not None]
    assert [j is None for j in joined[:4]] == [True, True, False, False]
    first, second, third = done
    assert (first[0].completed, first[0].window_start, first[0].window_end) == (12, 0.0, 3.0)
    assert first[1].completed == 24, "a neighbour's windows are joined with the trial's"
    assert (second[0].completed, second[0].duration_s) == (30, 1.0)
    assert (third[0].completed, third[0].duration_s) == (MAX_STRETCH, float(MAX_STRETCH)), "taken at the cap"
    assert stretch.starts == [0, 3, 4] and stretch.cut == 4 + MAX_STRETCH
    assert stretch.add([window(99, 0), window(99, 0)]) is None, "the next short window begins a new one"


def test_without_a_minimum_every_window_is_its_own_unless_nothing_ended_in_it() -> None:
    stretch = WindowStretch(min_requests=0, neighbours=0)
    joined = [stretch.add([window(k, n)]) for k, n in enumerate([1, 0, 1, 50])]
    assert [j is None for j in joined] == [False, True, False, False], "an empty window goes on into the next"
    assert stretch.starts == [0, 1, 3] and stretch.cut == 4 and joined[2][0].duration_s == 2.0


def test_a_slow_server_gets_windows_long_enough_to_see_its_requests_end() -> None:
    """The cap is MAX_STRETCH windows, or enough for the warm-up's slowest request STRETCH_SLOWEST times over, within
    what is left of the trial's time."""
    assert stretch_cap(1.0, 0.05, 100.0) == MAX_STRETCH
    assert stretch_cap(1.0, 5.0, 100.0) == 5 * STRETCH_SLOWEST > MAX_STRETCH
    assert stretch_cap(1.0, 5.0, 10.0) == 10, "never past the trial's time"
    assert stretch_cap(1.0, 5.0, 6.0) == MAX_STRETCH, "never below the cap"


class StandInActor:
    """A client actor as `measure` drives it, its `.remote` calls answered at once: each window it is asked for holds
    the next count of `counts` completions."""

    def __init__(self, counts: list[int], warmup_slowest_ms: float = 3.0) -> None:
        self.counts, self.warmup_slowest_ms = iter(counts), warmup_slowest_ms
        for name in ("start", "wait_warm", "collect", "stop"):
            setattr(self, name, SimpleNamespace(remote=getattr(self, f"_{name}")))

    def _start(self, *args) -> tuple:
        return (SimpleNamespace(), 0)

    def _wait_warm(self, *args) -> WarmupStats:
        return WarmupStats(requests=5, seconds=0.1, first_request_ms=2.0, slowest_ms=self.warmup_slowest_ms)

    def _collect(self, start: float, end: float) -> WindowSamples:
        return window(0, next(self.counts), end - start, origin=start)

    def _stop(self) -> None:
        return None


@pytest.mark.parametrize(("min_requests", "windows", "completed"), [(0, 3, 15), (20, 2, 45)])
def test_a_trial_compares_windows_that_hold_the_minimum(monkeypatch: pytest.MonkeyPatch, min_requests: int,
                                                        windows: int, completed: int) -> None:
    """A server that completes 6 or 9 requests a window in turn: without a minimum no two windows in a row agree
    within 10 % of their mean, and the trial stops unstable at its third; with 20 the first three join (21) and agree
    with the next three (24): two windows, stable, 45 requests."""
    cfg = load_config(["experiment.window_s=0.02", "experiment.stability.windows=2",
                       "experiment.stability.max_windows=3", f"experiment.stability.min_requests={min_requests}"])
    fake_ray = SimpleNamespace(get=lambda refs, timeout=None: refs, wait=lambda refs, num_returns, timeout: (refs, []))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    trial = Trial("local", "m", "pytorch", "pytorch", "http", "tensor", 1, 1)
    result = measure([StandInActor([6, 9, 6, 9, 6, 9])], SimpleNamespace(), trial, cfg.experiment,
                     probe=lambda: {"nv_inference_count": 0.0})
    assert (result.windows, result.samples.completed) == (windows, completed)
    assert result.stable == (min_requests > 0)
    # the server's counters are read at the joined windows' ends: their span is the final windows' (0.04 s or 0.12 s)
    assert result.counters_span_s == pytest.approx(result.samples.duration_s, abs=0.015)


def _measured(monkeypatch: pytest.MonkeyPatch, counts: list[int], warmup_slowest_ms: float):
    cfg = load_config(["experiment.window_s=0.02", "experiment.stability.windows=2",
                       "experiment.stability.max_windows=3"])
    fake_ray = SimpleNamespace(get=lambda refs, timeout=None: refs, wait=lambda refs, num_returns, timeout: (refs, []))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    trial = Trial("local", "m", "pytorch", "pytorch", "http", "tensor", 1, 1)
    return measure([StandInActor(counts, warmup_slowest_ms)], SimpleNamespace(), trial, cfg.experiment)


def test_a_server_silent_past_the_longest_window_is_stuck_and_the_trial_stops_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm-up answered in 3 ms, then nothing ended over MAX_STRETCH windows: the trial stops at that window (it does
    not wait out max_windows of them), and its reason says stuck, not slow."""
    result = _measured(monkeypatch, [0] * (3 * MAX_STRETCH), warmup_slowest_ms=3.0)
    assert (result.windows, result.stable, result.samples.ended) == (1, False, 0)
    assert result.samples.duration_s == pytest.approx(MAX_STRETCH * 0.02)
    reason = silence_reason(result.samples.duration_s, 0.003)
    assert "stuck, not slow" in reason and "3 ms" in reason


def test_a_slow_server_is_measured_over_a_longer_window_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm-up requests of 0.2 s against windows of 0.02 s: a window goes on for 30 of them (3 x 0.2 s) and takes the
    request that ends in its 20th; the reason, had none ended, would say slow."""
    result = _measured(monkeypatch, [0] * 19 + [1] + [0] * 19 + [1], warmup_slowest_ms=200.0)
    assert (result.windows, result.samples.completed) == (2, 2)
    assert result.samples.duration_s == pytest.approx(2 * 20 * 0.02)
    assert "slower than the trial's time" in silence_reason(0.2, 0.2)


def test_the_minimum_is_part_of_a_trials_identity_and_without_one_the_keys_stay_those_of_earlier_sweeps() -> None:
    from experiments.plan import trial_key
    from experiments.run.trial import measurement_settings

    trial = Trial("local", "resnet18", "pytorch", "pytorch", "http", "tensor", 1, 1)
    plain = measurement_settings(load_config([]).experiment)
    assert set(plain["stability"]) == {"percent", "windows", "max_windows", "latency_percentile"}
    joined = measurement_settings(load_config(["experiment.stability.min_requests=20"]).experiment)
    assert joined["stability"]["min_requests"] == 20
    assert trial_key(trial, joined, {}) != trial_key(trial, plain, {}), "a resumed sweep re-measures under the rule"

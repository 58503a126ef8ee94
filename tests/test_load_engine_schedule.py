"""The compiled load engine keeps an open loop's schedule: each request sent at its intended time, within the engine's
goal for lateness, run as a process and through `CompiledLoad`. The machine is shared (2 cores, other work), so the
time it kept the engine waiting for a CPU (`RunQueueWait`) is not counted against the engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.arrivals import GammaShape
from experiments.measure.engine import records
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LATE_AFTER_S, LoadPoint
from tests.engine_runs import RunQueueWait, cut_windows, done, http_wire, run_engine
from tests.engine_servers import HttpBehaviour, http_server, triton_like_body

BODY = triton_like_body()

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.slow
def test_open_loop_sends_on_its_schedule(tmp_path: Path) -> None:
    """Constant arrivals at 250/s: the k-th intended 4 ms x k after the load's start exactly, none missed, none
    after the engine stopped, sent within a few ms of them. (How many fit in the 1.5 s depends on how fast the engine
    started: not checked beyond enough to look at.) Not every 5 ms: the heartbeat's period, which would wake an
    engine that forgot to set its timer for its arrivals just in time for them."""
    np.full(2000, 0.004).astype("<f8").tofile(tmp_path / "gaps.f64")
    run_queue = RunQueueWait()
    with http_server(HttpBehaviour(body=BODY)) as srv:
        batch, code, err, _ = run_engine(http_wire(srv.port), ["--open", str(tmp_path / "gaps.f64")], 1.5,
                                         run_queue=run_queue)
    assert code == 0, err
    d = done(batch)
    intended = np.sort(d["intended_ns"])
    ready, last = batch[0], batch[-1]
    assert ready["kind"] == records.Kind.READY and last["kind"] == records.Kind.HEARTBEAT
    assert d.size >= 50
    assert np.array_equal(intended - ready["intended_ns"], 4_000_000 * np.arange(1, d.size + 1))
    assert intended[-1] <= last["sent_ns"] and d.size == srv.requests  # none sent ahead, every one recorded
    # Sent within 2 ms of its time (95 %), not counting what the machine made it wait for a CPU meanwhile.
    lateness = d["sent_ns"] - d["intended_ns"]
    own = lateness - run_queue.during(d["intended_ns"], d["sent_ns"])
    assert np.percentile(own, 95) < 2_000_000, np.percentile(lateness, 95)


def test_compiled_open_loop_is_on_time_at_a_modest_rate() -> None:
    with http_server(HttpBehaviour(body=BODY)) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.POISSON, 200), 5, 1, horizon_s=30)
        run_queue = RunQueueWait()
        (part,) = asyncio.run(cut_windows(load, 1, window_s=1.0, run_queue=run_queue))
    assert 140 <= part.requests <= 260  # Poisson arrivals at 200/s over 1 s
    assert np.all(part.send_s >= part.intended_s)
    lateness = part.send_s - part.intended_s
    assert part.clients[0].late_sends == np.sum(lateness > LATE_AFTER_S)  # the load's count is of its records
    # The engine's goal (docs/benchmarks.md): at most 1 % sent more than 5 ms late (before the engine, 1.3-18 % were),
    # not counting the time the machine kept it waiting for a CPU. (Beside the other test worker and other users
    # of 2 cores, the engine has waited 90 ms at once: a third of a window's sends late, none by its own doing.)
    def monotonic_ns(epoch_s: np.ndarray) -> np.ndarray:
        return np.round((epoch_s - load._epoch_offset) * 1e9).astype(np.int64)

    own = lateness - run_queue.during(monotonic_ns(part.intended_s), monotonic_ns(part.send_s)) / 1e9
    assert np.sum(own > LATE_AFTER_S) <= 0.01 * part.requests, part.clients[0].late_sends


def test_a_gamma_load_offers_each_window_of_its_grid_the_rate_asked_of_it() -> None:
    """Gamma arrivals of CV 3 at 60/s, on the grid of 1 s windows (the engine's schedule starts at the time it is
    told, `--open-at`, so the grid the schedule was drawn on is the one the windows are cut on): 60 in each window,
    give or take the one a float rounding moves, however bursty inside."""
    with http_server(HttpBehaviour(body=BODY)) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.GAMMA, 60, GammaShape(3.0, 1.0)), 5, 1,
                            horizon_s=30)
        parts = asyncio.run(cut_windows(load, 3, window_s=1.0, on_grid=True))
    assert [p.arrivals for p in parts] == [60, 60, 60], [p.arrivals for p in parts]

"""`CompiledLoad`, the compiled engine behind the load generator's windows, against loopback servers: the windows it
cuts from the engine's stream, the first response it checks (the first to end, and one that does not check out fails
the load), and an engine failing mid-trial, which fails the trial but keeps the windows measured before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LoadError, LoadPoint
from tests.engine_runs import cut_windows, http_wire
from tests.engine_servers import HttpBehaviour, http_server, triton_like_body

BODY = triton_like_body()

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


def _checked(body: bytes) -> None:
    if body != BODY:
        raise ValueError("not the expected body")


def test_compiled_load_cuts_windows_from_the_engines_stream() -> None:
    checked = []

    def check(body: bytes) -> None:
        checked.append(body)
        _checked(body)

    with http_server(HttpBehaviour(body=BODY, server_timing="infer;dur=1")) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 2), 5, 4, check_response=check)
        parts = asyncio.run(cut_windows(load, 2))
    assert checked == [BODY]
    for part in parts:
        assert part.requests > 20 and part.completed > 20
        assert part.images_per_request == 4
        assert np.all((part.intended_s >= part.window_start) & (part.intended_s < part.window_end))
        assert np.all(part.latency_s > 0) and np.allclose(part.server_ms, 1.0)
        (health,) = part.clients
        assert 0 < health.cpu_s < part.duration_s  # the engine's own CPU over the window
        assert health.completed == part.completed
    assert load._proc.returncode is not None  # stopped
    assert not Path(load._folder).exists()


def test_a_first_response_that_does_not_check_out_fails_the_load() -> None:
    with http_server(HttpBehaviour(body=b"something else")) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 1), 5, 1, check_response=_checked)
        with pytest.raises(LoadError, match="first response does not check out: ValueError: not the expected body"):
            asyncio.run(cut_windows(load, 1))


def test_the_first_response_checked_is_the_first_to_end_whichever_was_sent_first() -> None:
    """Under concurrency the first request sent may end last: warm-up must not find the file missing. Three of the
    four first requests are held (the engine's first sent arrives last here), so another ends first."""
    checked = []
    with http_server(HttpBehaviour(body=BODY, slow=(2, 3, 4), slow_s=1.5)) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 4), 5, 1, check_response=checked.append)
        (part,) = asyncio.run(cut_windows(load, 1))
    assert checked == [BODY]
    assert part.completed > 20


def test_an_engine_failing_mid_trial_fails_the_trial_with_its_last_lines_and_keeps_earlier_windows() -> None:
    async def scenario(server) -> tuple[object, Exception | None]:
        load = CompiledLoad(http_wire(server.port), LoadPoint(LoadMode.CLOSED, 1), 5, 1)
        await load.open()
        load.start()
        try:
            await load.wait_warm(5, 0.1, 10)
            start = load.now()
            first = await load.collect(start, start + 0.4)
            server.behaviour.vary_after = server.requests + 5  # an answer of another size ends the engine
            try:
                await load.collect(start + 0.4, start + 1.5)
            except LoadError as exc:
                return first, exc
            return first, None
        finally:
            await load.stop()

    with http_server(HttpBehaviour(body=BODY)) as srv:
        first, error = asyncio.run(scenario(srv))
    assert first.requests > 5
    assert error is not None and "bytes where the first was" in str(error)

"""The compiled load engine through error statuses, driven through `CompiledLoad` (its windows' `failures` are what
a trial counts): loopback stand-ins (tests/error_stands.py) answer 503 / grpc-status 14 to every k-th request, or 413
before the request is all sent; each is recorded at the server's share, of its class, and the load goes on. The
first response checked is the first answered well, not an error's."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LoadPoint
from serving.clients.outcomes import Outcome
from tests.error_stands import BODY, STANDS, assert_consistent, every, failure_share, http_stand, http_wire, measure

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.parametrize("share", [0.01, 0.05, 0.20])
@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_error_statuses_are_recorded_at_their_share_and_the_load_goes_on(protocol: str, mode: str,
                                                                        share: float) -> None:
    """Every k-th request answered 503 (gRPC: grpc-status 14): over >= 2,000 requests the windows' failure share is
    the server's, every failure is of that class with the engine's message, everything else was answered; an open
    loop keeps its schedule through them (constant arrivals: one every 1/rate, failed or not)."""
    stand, wire, name, status = STANDS[protocol]
    # The grpc.aio stand-in, on a thread of this process, serves ~2,500 calls/s here; at that rate on a starved CPU
    # (2 cores, another test worker) it falls behind and grpc-core itself answers some calls CANCELLED at once
    # (grpc_1, rightly recorded as such): it is offered half of that.
    rate = 2500.0 if protocol == "http" else 1250.0
    point = LoadPoint(LoadMode.CLOSED, 4) if mode == "closed" else LoadPoint(LoadMode.CONSTANT, rate)
    with stand(every(round(1 / share), status)) as srv:
        load = CompiledLoad(wire(srv.port), point, 5, 1, horizon_s=10)
        part = asyncio.run(measure(load, 2000))
    total = part.requests + part.failures.count
    measured = failure_share(part)
    print(f"{protocol} {mode} set {share:.0%}: {part.failures.count} of {total} failed ({measured:.2%})")
    assert total >= 2000
    assert abs(measured - share) <= 0.01, measured
    assert part.failures.by_class() == {name: part.failures.count}
    assert np.all(part.failures.outcome == (Outcome.HTTP_STATUS if protocol == "http" else Outcome.GRPC_STATUS))
    expect = "HTTP 503 from the server: shedding load" if protocol == "http" else "gRPC status 14: shedding load"
    assert expect in part.error_messages[name] and "compiled engine" in part.error_messages[name]
    if protocol == "http" and mode == "closed":
        assert srv.connections == 4  # a complete 503 leaves its keep-alive connection usable
    assert_consistent(part)
    if mode == "open":
        intended = np.sort(np.concatenate([part.intended_s, part.failures.intended_s]))
        assert np.allclose(np.diff(intended), 1 / rate, atol=2e-6)


@pytest.mark.slow
def test_the_first_response_checked_is_the_first_answered_well() -> None:
    """The first answers are 503s: the body handed to the client's check is the first 200's, not an error's."""
    checked = []
    with http_stand(lambda n: 503 if n <= 10 else "ok") as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 1), 5, 1, check_response=checked.append)
        part = asyncio.run(measure(load, 50))
    assert checked == [BODY]
    assert part.requests >= 50 and part.failures.count == 0  # the 503s came before the warm-up ended


@pytest.mark.slow
def test_an_error_answered_before_the_request_was_all_sent_is_that_status_on_a_new_connection() -> None:
    """Every 3rd 2 MB request is answered 413 once its head is in, and the server closes without reading the body
    (as a proxy does): each is http_413, even where the server's close reset the engine's send first (what it
    answered is read before the connection is given up), and the next request goes on a new connection."""
    with http_stand(every(3, ("early", 413))) as srv:
        load = CompiledLoad(http_wire(srv.port, 2_000_000), LoadPoint(LoadMode.CLOSED, 2), 5, 1)
        part = asyncio.run(measure(load, 150, window_s=0.5, max_windows=6))
    f = part.failures
    print(f"{f.count} early 413s of {part.requests + f.count} ({failure_share(part):.2%})")
    assert f.by_class() == {"http_413": f.count}
    assert abs(failure_share(part) - 1 / 3) <= 0.05  # (a few hundred requests)
    assert "HTTP 413 from the server: too big!" in part.error_messages["http_413"]
    assert_consistent(part)

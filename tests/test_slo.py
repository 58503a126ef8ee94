"""The SLO search finds the highest load within the p99 target with few probes, reusing known loads."""

from __future__ import annotations

import pytest

from experiments.config.choices import SloRange
from experiments.run.slo import SloProbe, search_slo

CLOSED = SloRange(start=1, floor=1, limit=64, integer=True)  # 1 to 64 in flight
FROM_4 = SloRange(start=4, floor=1, limit=64, integer=True)  # from the grid's 4 in flight, down to 1 if 4 misses
RATES = SloRange(start=20.0, floor=20.0, limit=50.0, integer=False)  # open loop from the grid's 20 req/s


def _model(load: float) -> SloProbe:
    """A server whose p99 grows linearly with load and whose throughput saturates at 400 img/s."""
    return SloProbe(load, p99_ms=10 + 5 * load, throughput=min(400.0, 50.0 * load))


def test_finds_the_highest_concurrency_within_the_target() -> None:
    calls = []
    result = search_slo(lambda c: calls.append(c) or _model(c), 50, CLOSED)
    assert result.best == _model(8)  # 10 + 5 * 8 = 50 ms; 9 would be 55 ms
    assert calls == [1, 2, 4, 8, 16, 12, 10, 9]
    m = result.metrics(price_per_hour_usd=3.6)
    assert m["slo_max_throughput_img_s"] == 400 and m["slo_max_load"] == 8
    assert m["cost_per_1k_images_at_slo_usd"] == pytest.approx(3.6 / 3600 / 400 * 1000)


def test_reuses_loads_the_grid_already_measured() -> None:
    calls = []
    known = {1: _model(1), 2: _model(2), 4: _model(4)}
    result = search_slo(lambda c: calls.append(c) or _model(c), 50, CLOSED, known=known)
    assert result.best.load == 8 and 1 not in calls and 4 not in calls


def test_a_search_from_the_grids_load_probes_nothing_below_it_unless_that_load_misses() -> None:
    calls = []
    result = search_slo(lambda c: calls.append(c) or _model(c), 50, FROM_4)
    assert result.best.load == 8 and calls == [4, 8, 16, 12, 10, 9]  # two probes fewer than from 1
    calls.clear()
    result = search_slo(lambda c: calls.append(c) or _model(c), 20, FROM_4)  # 2 in flight: 20 ms
    assert result.best.load == 2 and calls == [4, 2, 3]
    calls.clear()
    none = search_slo(lambda c: calls.append(c) or _model(c), 12, FROM_4)  # 1 in flight: 15 ms
    assert none.best is None and calls == [4, 2, 1]
    # Open loop: the lowest rate is the floor (a rate below the grid's is not asked for).
    assert search_slo(_model, 20, SloRange(4.0, 4.0, 64.0, False)).best is None


def test_open_loop_rate_is_bisected_to_five_percent() -> None:
    result = search_slo(_model, 50, SloRange(1.0, 1.0, 64.0, False))
    assert 8 * 0.95 <= result.best.load <= 8


def test_a_target_no_load_meets_and_one_every_load_meets() -> None:
    none = search_slo(_model, 5, CLOSED)
    assert none.best is None and none.metrics(1.0)["slo_met"] == 0
    assert "cost_per_1k_images_at_slo_usd" not in none.metrics(1.0)
    every = search_slo(_model, 10_000, CLOSED)
    assert every.best.load == 64 and every.limited


def test_a_failed_measurement_counts_as_a_miss() -> None:
    result = search_slo(lambda c: None if c >= 4 else _model(c), 50, CLOSED)
    assert result.best.load == 3


def test_an_overloaded_probe_misses_whatever_its_p99() -> None:
    """Past 5 req/s this server falls behind its arrivals: a short window's p99 can still look fine (the queue
    has only begun to grow), yet the load is not sustainable, so the search stops below it."""
    def server(load: float) -> SloProbe:
        return SloProbe(load, p99_ms=20.0, throughput=min(load, 5.0), overloaded=load > 5, stable=load != 4)

    result = search_slo(server, 1000, CLOSED)
    assert result.best.load == 5 and not result.limited
    assert any(p.overloaded for p in result.probes)  # measured and kept, but never the answer
    assert result.metrics(1.0)["slo_stable_at_max"] == 1
    up_to_4 = search_slo(server, 1000, SloRange(1, 1, 4, True))
    assert up_to_4.metrics(1.0)["slo_stable_at_max"] == 0  # the best was unstable


def test_a_bound_set_where_the_client_fell_behind_is_named_the_clients() -> None:
    """From 40 req/s the client falls behind its schedule (the server would keep up): the search still stops below,
    but says its bound is the client's. A miss of the server's own, with a client that kept its schedule, is not."""
    def measured(load: float, client_from: float = 40.0) -> SloProbe:
        behind = load >= client_from
        return SloProbe(load, p99_ms=20.0, throughput=min(load, 36.0), overloaded=behind, client_behind=behind)

    result = search_slo(measured, 1000, RATES)
    assert result.best.load < 40 and result.client_bound and result.metrics(1.0)["slo_client_bound"] == 1
    server = search_slo(lambda load: SloProbe(load, 20.0, min(load, 36.0), overloaded=load > 36), 1000, RATES)
    assert server.best.load < 40 and not server.client_bound and server.metrics(1.0)["slo_client_bound"] == 0
    nothing = search_slo(lambda load: measured(load, client_from=0.0), 1000, RATES)
    assert nothing.best is None and nothing.client_bound  # even the lowest load: the client's


def test_a_goodput_rule_stops_the_search_where_a_shedding_server_answers_too_few() -> None:
    """A server that sheds past 6 loops: the requests it answers stay fast (p99 20 ms, the p99 rule alone would take
    64), but beyond 6 it answers well a falling share of what it is offered; with 99 % asked, the search stops at
    6."""
    def server(load: float) -> SloProbe:
        return SloProbe(load, p99_ms=20.0, throughput=min(load, 6.0) * 50,
                        goodput_share=1.0 if load <= 6 else 6 / load)

    assert search_slo(server, 50, CLOSED).best.load == 64
    result = search_slo(server, 50, CLOSED, min_goodput_share=0.99)
    assert result.best.load == 6
    metrics = result.metrics(1.0)
    assert metrics["slo_min_goodput_share"] == 0.99 and metrics["slo_goodput_share_at_max"] == 1.0
    # a probe that logged no goodput (no deadline) cannot meet a goodput rule
    assert not SloProbe(1, 10.0, 50.0).meets(50, min_goodput_share=0.5)

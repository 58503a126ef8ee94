"""How the compiled load engine reports what goes wrong, run as a process against loopback servers: a request that
fails is a record of its outcome and the load goes on; a failure that leaves nothing to measure (no server, answers
of another size, a schedule run out) stops the engine with its cause, keeping what it measured before. Which is which
decides whether a trial counts errors or fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments.measure.engine import records
from serving.clients.wire import grpc_wire
from tests.engine_runs import closed_port, done, http_wire, run_engine
from tests.engine_servers import MODEL_INFER, GrpcBehaviour, HttpBehaviour, grpc_server, http_server, triton_like_body

BODY = triton_like_body()

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["http 500", "grpc error", "timeout"])
def test_an_error_is_a_record_and_the_engine_goes_on(case: str) -> None:
    """A request that fails is a FAILED record (code = outcome | status << 8), its class's first message on stderr,
    and the load goes on (exit 0 at the stop), answered requests before and after it. (Shares, timeouts, resets and
    refusals: tests/test_load_engine_error_statuses.py, _timeouts.py and _connection_loss.py.)"""
    load = ["--closed", "2"]
    if case == "http 500":
        cm, code, expect = (http_server(HttpBehaviour(body=BODY, fail_after=30)), 1 | 500 << 8,
                            "[http_500] HTTP 500 from the server: model failed")
    elif case == "grpc error":
        cm, code, expect = (grpc_server(GrpcBehaviour(reply=b"ok", fail_after=30)), 2 | 13 << 8,
                            "[grpc_13] gRPC status 13: model failed")
    else:
        cm, code, expect = (http_server(HttpBehaviour(body=BODY, slow=(3,), slow_s=3)), 3,
                            "[timeout] no answer within 0.3 s")
        load = ["--closed", "1", "--timeout", "0.3"]
    with cm as srv:
        wire = (grpc_wire(f"127.0.0.1:{srv['port']}", MODEL_INFER, b"x" * 100) if case == "grpc error"
                else http_wire(srv.port))
        batch, rc, err, _ = run_engine(wire, load, 1.5)
    assert rc == 0, err
    assert expect in err and err.count("loadgen: [") == 1  # one line per class, not one per failure
    failed = batch[batch["kind"] == records.Kind.FAILED]
    assert failed.size >= (1 if case == "timeout" else 10) and np.all(failed["code"] == code)
    assert np.all(failed["sent_ns"] < failed["done_ns"])
    if case == "timeout":  # the third request, held 3 s: failed 0.3 s after it was sent, and the loop went on
        assert failed.size == 1 and 0.3e9 <= failed["done_ns"][0] - failed["sent_ns"][0] < 0.5e9
        assert np.sum(done(batch)["done_ns"] > failed["done_ns"][0]) > 5
    else:
        assert done(batch).size == 29  # the answers before the server failed every request


@pytest.mark.slow
@pytest.mark.parametrize("case", ["refused", "size changed", "schedule ran out"])
def test_a_failure_stops_the_engine_with_its_cause_and_keeps_what_it_measured(case: str, tmp_path: Path) -> None:
    """Exit code 2, an error record, the cause on stderr; the requests that completed before it are on stdout.
    (A server refusing the first connections: there is nothing to measure; errors later on are records, above.)"""
    load, expect = ["--closed", "2"], ""
    if case == "size changed":
        cm, expect = http_server(HttpBehaviour(body=BODY, vary_after=30)), "bytes where the first was"
    elif case == "schedule ran out":
        np.full(20, 0.01).astype("<f8").tofile(tmp_path / "gaps.f64")
        cm, expect = http_server(HttpBehaviour(body=BODY)), "the arrival schedule ran out after 20 arrivals"
        load = ["--open", str(tmp_path / "gaps.f64")]
    else:
        cm, expect = http_server(HttpBehaviour(body=BODY)), "cannot connect to 127.0.0.1"
    with cm as srv:
        wire = http_wire(closed_port()) if case == "refused" else http_wire(srv.port)
        batch, code, err, _ = run_engine(wire, load, 10)
    assert code == 2
    assert expect in err
    assert batch["kind"][-1] == records.Kind.ERROR
    if case == "size changed":
        assert done(batch).size >= 25  # what completed before the failure was written out


@pytest.mark.slow
def test_answers_of_text_may_vary_in_size_when_the_request_says_so() -> None:
    """JSON numbers change length with their digits (a batched forward pass): `--any-size` (WireRequest.sized=False)
    takes them; without it the same server fails the load (above)."""
    with http_server(HttpBehaviour(body=BODY, vary_after=30)) as srv:
        batch, code, err, _ = run_engine(http_wire(srv.port), ["--closed", "2"], 1.5, "--any-size")
    assert code == 0, err
    sizes = set(done(batch)["bytes"].tolist())
    assert len(sizes) == 2 and done(batch).size > 30

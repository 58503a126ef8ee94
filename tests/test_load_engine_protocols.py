"""The compiled load engine (experiments/measure/engine/loadgen.c) over each protocol against real loopback servers,
run as a process (no Ray): over HTTP/1.1 a record per request with the server's timings, on keep-alive connections,
with chunked bodies and with servers that close each connection; over gRPC (HTTP/2) calls that carry their metadata
and take the status and timings from the trailers. These records are what a trial measures: each field is checked
against what the server did."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.measure.engine import records
from serving.clients.wire import grpc_message, grpc_wire
from tests.engine_runs import done, http_wire, run_engine
from tests.engine_servers import MODEL_INFER, GrpcBehaviour, HttpBehaviour, grpc_server, http_server, triton_like_body

BODY = triton_like_body()

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


@pytest.mark.slow
def test_closed_loop_over_http_records_every_request() -> None:
    timing = "preprocess;dur=1.5, queue;dur=0.75, infer;dur=2.5, batch;desc=4"
    with http_server(HttpBehaviour(body=BODY, server_timing=timing)) as srv:
        batch, code, err, folder = run_engine(http_wire(srv.port), ["--closed", "3"], 1.5)
    assert code == 0, err
    d = done(batch)
    assert d.size > 50
    assert srv.connections == 3  # one keep-alive connection per request loop
    assert np.all(d["intended_ns"] == d["sent_ns"])  # closed loop: a loop is free when it sends
    assert np.all(d["done_ns"] > d["sent_ns"])
    assert np.all(d["bytes"] == len(BODY)) and np.all(d["code"] == 200)
    assert np.allclose(d["server_ms"], 4.75) and np.all(d["server_batch"] == 4)
    assert np.allclose(d["server_queue_ms"], 0.75)  # the wait for its forward pass, apart
    assert np.all(np.diff(d["done_ns"]) >= 0)  # written as they complete: windows are cut from the front
    beats = batch[batch["kind"] == records.Kind.HEARTBEAT]
    assert beats.size > 100 and np.all(np.diff(beats["intended_ns"]) >= 0)  # the watermark never goes back
    assert beats["bytes"].max() <= 3  # never more in flight than the loops
    assert batch["kind"][0] == records.Kind.READY
    assert (folder / "first.bin").read_bytes() == BODY


@pytest.mark.slow
def test_chunked_responses_and_servers_that_close_each_connection() -> None:
    with http_server(HttpBehaviour(body=BODY, chunked=True, close=True)) as srv:
        batch, code, err, _ = run_engine(http_wire(srv.port), ["--closed", "2"], 1.0)
    assert code == 0, err
    d = done(batch)
    assert d.size > 20 and np.all(d["bytes"] == len(BODY))
    assert srv.connections >= d.size  # every response closed its connection: the next request opened another


@pytest.mark.slow
def test_grpc_calls_carry_metadata_and_read_trailers() -> None:
    reply = b"\x0a\x01m" * 100
    behaviour = GrpcBehaviour(reply=reply, server_timing="infer;dur=3.25, batch;desc=2")
    with grpc_server(behaviour) as srv:
        wire = grpc_wire(f"127.0.0.1:{srv['port']}", MODEL_INFER, b"\x0a\x05hello" * 1000, (("application", "app1"),))
        batch, code, err, folder = run_engine(wire, ["--closed", "4"], 1.5)
    assert code == 0, err
    d = done(batch)
    assert d.size > 50 and np.all(d["code"] == 200)
    assert np.all(d["bytes"] == len(reply) + 5)  # the DATA: length prefix and message
    assert np.allclose(d["server_ms"], 3.25) and np.all(d["server_batch"] == 2)
    assert np.all(np.isnan(d["server_queue_ms"]))  # a server that says nothing of its queue
    assert srv["metadata"]["application"] == "app1"
    assert grpc_message((folder / "first.bin").read_bytes()) == reply

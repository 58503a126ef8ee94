"""The compiled load engine as a process among others: stopping leaves no engine behind, it dies with the process
that started it (a client actor Ray kills), it raises its priority above the servers' where the OS allows, and a stop
lets the requests in flight finish rather than cancel them (a cancelled gRPC call crashes Triton 2.48-2.52)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from experiments.config.choices import LoadMode
from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.engine.compiled_load import CompiledLoad
from experiments.measure.load import LoadPoint
from serving.clients.wire import grpc_wire
from tests.engine_runs import done, http_wire
from tests.engine_servers import MODEL_INFER, GrpcBehaviour, HttpBehaviour, grpc_server, http_server, triton_like_body

BODY = triton_like_body()

pytestmark = pytest.mark.usefixtures("engine_folders_in_tmp_path")


def test_stopping_leaves_no_engine_behind() -> None:
    with http_server(HttpBehaviour(body=BODY, delay_s=0.05)) as srv:
        load = CompiledLoad(http_wire(srv.port), LoadPoint(LoadMode.CLOSED, 8), 5, 1)

        async def run() -> int:
            await load.open()
            load.start()
            await asyncio.sleep(0.3)
            pid = load._proc.pid
            await load.stop()
            return pid

        pid = asyncio.run(run())
    time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.slow
def test_the_engine_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A client actor killed by Ray (SIGKILL) takes its engine with it (PR_SET_PDEATHSIG)."""
    with http_server(HttpBehaviour(body=BODY, delay_s=0.01)) as srv:
        wire = http_wire(srv.port)
        (tmp_path / "request.bin").write_bytes(wire.payload)
        script = (f"import subprocess, time; p = subprocess.Popen([{str(engine_binary())!r}, '--http1', '127.0.0.1', "
                  f"'{srv.port}', '--request', {str(tmp_path / 'request.bin')!r}, '--closed', '1'], "
                  "stdout=subprocess.DEVNULL); print(p.pid, flush=True); time.sleep(60)")
        parent = subprocess.Popen(["python3", "-c", script], stdout=subprocess.PIPE, text=True)
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while srv.requests == 0:  # loading: past its start, where it asks to die with its parent
            assert time.monotonic() < deadline, "the engine sent nothing in 30 s"
            time.sleep(0.01)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            try:
                os.waitpid(child, os.WNOHANG)  # not our child: only the init reaper collects it
            except ChildProcessError:
                pass
            time.sleep(0.05)
    gone = not Path(f"/proc/{child}").exists() or "Z (zombie)" in Path(f"/proc/{child}/status").read_text()
    assert gone, "the engine outlived the process that started it"


@pytest.mark.slow
def test_the_engine_runs_ahead_of_servers_at_rays_worker_niceness_where_the_os_allows() -> None:
    """Started at nice 15 (as Ray starts its workers, the servers among them) and asked for 0, it gets 0 where it
    may raise its priority (root here and in CI), and says which niceness it got in its ready record."""
    may_raise = os.geteuid() == 0
    with http_server(HttpBehaviour(body=BODY)) as srv:
        wire = http_wire(srv.port)
        folder = Path(tempfile.mkdtemp(prefix="engine-test-"))
        (folder / "request.bin").write_bytes(wire.payload)
        proc = subprocess.Popen(["nice", "-n", "15", str(engine_binary()), "--http1", wire.host, str(wire.port),
                                 "--request", str(folder / "request.bin"), "--closed", "1", "--nice", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.read(records.RECORD.itemsize)  # its first record, once it runs (not a fixed sleep)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    (ready,) = records.parse(bytearray(first))
    assert ready["kind"] == records.Kind.READY
    assert int(ready["code"]) - 20 == (0 if may_raise else 15)


@pytest.mark.slow
def test_a_stop_lets_the_requests_in_flight_finish_instead_of_cancelling_them() -> None:
    """SIGTERM mid-request: nothing new is sent, the 4 calls in flight complete and are recorded, none is cancelled
    on the server (a cancelled gRPC call crashes Triton 2.48-2.52), and the engine exits 0 once they are back, not
    at its drain limit (30 s here: past communicate's 10 s, so an engine waiting it out fails the test).

    No wall-clock band: the stop is sent once the server has seen the second round of calls (polled, not slept for:
    a slow start on a busy machine only delays it), and what is checked is counts and the order of events."""
    with grpc_server(GrpcBehaviour(reply=b"ok", delay_s=0.4)) as srv:
        wire = grpc_wire(f"127.0.0.1:{srv['port']}", MODEL_INFER, b"x" * 1000)
        folder = Path(tempfile.mkdtemp(prefix="engine-test-"))
        (folder / "request.bin").write_bytes(wire.payload)
        (folder / "headers.txt").write_text("".join(f"{k}: {v}\n" for k, v in wire.headers))
        proc = subprocess.Popen([str(engine_binary()), "--h2", wire.host, str(wire.port), "--request",
                                 str(folder / "request.bin"), "--headers", str(folder / "headers.txt"),
                                 "--closed", "4", "--drain", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while srv["calls"] < 8:  # the first 4 calls are done, the next 4 are being served (for 0.4 s)
                assert proc.poll() is None, proc.communicate()[1].decode()
                assert time.monotonic() < deadline, f"the server saw {srv['calls']} calls in 30 s"
                time.sleep(0.005)
            calls_at_stop = srv["calls"]
            stopped_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC, the engine's clock
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:  # failed: nothing left running
                proc.kill()
                proc.communicate()
        time.sleep(0.5)  # past the server's 0.4 s: a call the engine dropped would be seen cancelled by now
        assert proc.returncode == 0, err
        calls, cancelled = srv["calls"], srv["cancelled"]
    d = done(records.parse(bytearray(out)))
    assert cancelled == 0
    # Nothing new after the stop: a round of calls arriving as the stop is sent may add to the count read just
    # before it, a new round (one call per loop) would add 4.
    assert calls_at_stop <= calls < calls_at_stop + 4, (calls_at_stop, calls)
    assert d.size == calls >= 8, "every call the server got was answered and recorded"
    assert np.all(d["sent_ns"] < d["done_ns"])
    assert np.sum(d["done_ns"] > stopped_ns) >= 1, "the calls in flight at the stop finished after it"

"""Running the compiled load engine (experiments/measure/engine/loadgen.c) in its tests: an HTTP/1.1 request for a
loopback server, the engine run as a process for a while (`run_engine`: its records, exit code, stderr and folder),
windows cut from `CompiledLoad`'s stream (`cut_windows`), a port nothing listens on, and `RunQueueWait`, which tells
how late the machine (not the engine) made the engine's sends. The servers are in tests/engine_servers.py; the
fixture that keeps the engine's files under pytest's tmp_path is in tests/conftest.py."""

from __future__ import annotations

import math
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.engine.compiled_load import CompiledLoad, wire_arguments
from serving.clients.http1 import build_request
from serving.clients.wire import WireRequest, http1_wire


def http_wire(port: int, payload: bytes = b"x" * 5000) -> WireRequest:
    url = f"http://127.0.0.1:{port}/v2/models/m/infer"
    return http1_wire(url, build_request("POST", url, payload, {"Content-Type": "application/octet-stream"}))


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunQueueWait:
    """How long a process has waited for a CPU while it could run, as the kernel counts it (/proc/<pid>/schedstat,
    its second field), sampled every 2 ms on a thread, on CLOCK_MONOTONIC (the engine's clock). On a machine shared
    with other work (2 cores, two test workers, other users) a runnable engine waits, and the sends due meanwhile go
    out late by as long: that lateness is the machine's, what is left is the engine's own (its timer, its queue, its
    work: an engine that sleeps or computes is not waiting for a CPU)."""

    def __init__(self) -> None:
        self._samples: list[tuple[int, int, int]] = []  # (time before the read, waited ns, time after it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._sample, args=(Path(f"/proc/{pid}/schedstat"),), daemon=True)
        self._thread.start()

    def _sample(self, path: Path) -> None:
        while not self._stop.is_set():
            before = time.perf_counter_ns()
            try:
                waited = int(path.read_text().split()[1])
            except (OSError, ValueError, IndexError):  # gone, or a kernel without scheduler statistics
                pass
            else:
                self._samples.append((before, waited, time.perf_counter_ns()))
            self._stop.wait(0.002)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def during(self, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
        """The wait between each start and end: from the last sample read before the start to the first read after
        the end (none, 0, where the samples do not bracket them: lateness then counts as the engine's)."""
        if not self._samples:
            return np.zeros(np.shape(start_ns), dtype=np.int64)
        before, waited, after = np.array(self._samples, dtype=np.int64).T
        lo = np.searchsorted(after, start_ns, side="right") - 1
        hi = np.searchsorted(before, end_ns, side="left")
        bracketed = (lo >= 0) & (hi < before.size)
        return np.where(bracketed, waited[np.clip(hi, 0, before.size - 1)] - waited[np.clip(lo, 0, before.size - 1)], 0)


def run_engine(wire: WireRequest, load: list[str], seconds: float, *extra: str,
               run_queue: RunQueueWait | None = None) -> tuple[np.ndarray, int, str, Path]:
    """Run the engine for `seconds` (then SIGTERM) or until it exits; its records, exit code, stderr, folder. With
    `run_queue`, that watches the engine's waits for a CPU meanwhile. A wire of several bodies: all of them, with
    their `--lengths`."""
    folder = Path(tempfile.mkdtemp(prefix="engine-test-"))
    args = [str(engine_binary()), *wire_arguments(wire, folder), "--first-response", str(folder / "first.bin"),
            *load, *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if run_queue is not None:
        run_queue.watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if run_queue is not None:
            run_queue.stop()
    return records.parse(bytearray(out)), proc.returncode, err.decode(), folder


def done(batch: np.ndarray) -> np.ndarray:
    return batch[batch["kind"] == records.Kind.DONE]


async def cut_windows(load: CompiledLoad, count: int, window_s: float = 0.5,
                      run_queue: RunQueueWait | None = None, on_grid: bool = False) -> list:
    """Open and start the load, wait for it to warm up, then cut `count` windows of `window_s` from its stream (with
    `on_grid`, from a multiple of `window_s` since the epoch, as a sweep cuts a gamma load's); the load is stopped
    whatever happens."""
    await load.open()
    if run_queue is not None:
        run_queue.watch(load._proc.pid)
    load.start()
    try:
        await load.wait_warm(5, 0.2, 10)
        start = load.now()
        if on_grid:
            start = math.ceil(start / window_s) * window_s
        parts = []
        for i in range(count):
            parts.append(await load.collect(start + i * window_s, start + (i + 1) * window_s))
        return parts
    finally:
        await load.stop()
        if run_queue is not None:
            run_queue.stop()

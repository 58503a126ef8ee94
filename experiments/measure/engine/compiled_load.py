"""The compiled engine as a load generator: one `loadgen` process per client actor, its records read as they come,
so windows are cut from its stream exactly as from the Python client's (`LoadGenerator`).

The engine sends a `WireRequest` (the bytes a client would send, built once by that client's own code: one request, or
a pool of distinct ones that it sends in turn, the n-th request sent carrying body n modulo their count); the first
response it gets is handed back to the same client to check (`InferenceClient.check_wire_response`): the outputs
have the shape the model promises. A request that fails (an error status, a timeout, a lost or refused connection)
is a record of its own: it is kept as the Python client's failures are (`LoadGenerator._record_failure`), with the
engine's first message of its class, and the load goes on. Its CPU is read from /proc (scheduler nanoseconds of the
engine process), so `client_cpu_us_per_request` is the engine's own, as perf_analyzer's would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from experiments.measure.engine import records
from experiments.measure.engine.build import engine_binary
from experiments.measure.load import (
    CLIENT_NICENESS,
    DRAIN_S,
    LATE_AFTER_S,
    TICK_S,
    LoadGenerator,
    LoadPoint,
    WarmupStats,
)
from serving.clients.outcomes import Outcome, error_class
from serving.clients.wire import WireRequest
from serving.paths import scratch_dir

STDERR_TAIL = 1500
# The engine asks for the load generators' priority itself (CLIENT_NICENESS): at the servers' own (15), 0.9-5.4 % of a
# 2-core VM's open-loop requests went > 5 ms late, at 0 0-0.6 % did (docs/benchmarks.md). Where the OS refuses (no
# root, no CAP_SYS_NICE) it keeps the actor's.
# The schedule covers the longest a trial may run; an engine that reaches its end fails the trial.
SCHEDULE_MARGIN = 1.2
# An open loop's schedule starts this long after its gaps are written, at a time the engine waits for (--open-at): the
# engine's own start (its connections opened) comes well before it; a later one sends the first arrivals late.
OPEN_LEAD_S = 0.5
# The engine's first message of each error class, on its stderr: `loadgen: [http_503] HTTP 503 from the server: ...`
CLASS_LINE = re.compile(r"^loadgen: \[(?P<cls>[a-z0-9_]+)\] (?P<text>.*)$", re.MULTILINE)


def wire_arguments(wire: WireRequest, folder: Path) -> list[str]:
    """The engine's arguments for `wire` (its server, bodies and HEADERS), their files written into `folder`: the
    bodies one after another into request.bin (each in turn: a pool of distinct inputs may total tens of MiB, so no
    joined copy), with several their byte lengths (uint64, little-endian) into lengths.bin for `--lengths`."""
    with open(folder / "request.bin", "wb") as out:
        for payload in wire.payloads:
            out.write(payload)
    args = [f"--{wire.protocol}", wire.host, str(wire.port), "--request", str(folder / "request.bin")]
    if len(wire.payloads) > 1:
        np.fromiter((len(p) for p in wire.payloads), dtype="<u8", count=len(wire.payloads)).tofile(
            folder / "lengths.bin")
        args += ["--lengths", str(folder / "lengths.bin")]
    if wire.headers:
        (folder / "headers.txt").write_text("".join(f"{k}: {v}\n" for k, v in wire.headers))
        args += ["--headers", str(folder / "headers.txt")]
    return args


class CompiledLoad(LoadGenerator):
    """`load` (closed: request loops; open: arrivals/s) sent by the compiled engine: the wire's request, or its
    distinct requests in turn."""

    def __init__(self, wire: WireRequest, load: LoadPoint, timeout_s: float, images_per_request: int,
                 actor_index: int = 0, max_in_flight: int = 1024, horizon_s: float = 600.0,
                 check_response: Callable[[bytes], None] | None = None, seed: int = 0) -> None:
        super().__init__(timeout_s, images_per_request, actor_index)
        self.wire = wire
        self.load = load
        self.max_in_flight = max_in_flight
        self.horizon_s = horizon_s
        self.check_response = check_response
        self.seed = seed
        self._folder = scratch_dir("loadgen")
        self._proc: asyncio.subprocess.Process | None = None
        self._buffer = bytearray()
        self._watermark = -math.inf  # every request scheduled before it has completed
        self._checked = False
        self._offset = self._epoch_offset * 1e9  # engine ns (CLOCK_MONOTONIC) -> epoch s: (ns + offset) / 1e9

    def _arguments(self) -> list[str]:
        folder, wire = self._folder, self.wire
        args = [*wire_arguments(wire, folder),
                "--timeout", f"{self.timeout_s:g}", "--max-in-flight", str(self.max_in_flight),
                "--nice", str(CLIENT_NICENESS), "--drain", f"{DRAIN_S:g}",
                "--first-response", str(folder / "first-response.bin")]
        if not wire.sized:
            args.append("--any-size")
        if self.load.mode.open_loop:
            rate = self.load.load
            rng = np.random.default_rng(self.seed + self.actor_index)
            count = max(1000, math.ceil(rate * self.horizon_s * SCHEDULE_MARGIN))
            shape = self.load.shape
            # the schedule starts a little ahead, at a time the engine waits for: a shape on the epoch's grid (gamma's
            # periods, the measurement windows) is lined up on it as the Python client's is on its own start
            begin = time.time() + OPEN_LEAD_S
            gaps = (shape.arrivals(rate, rng, start=begin).take(count) if shape is not None
                    else self.load.mode.gaps(rate, rng, count))
            gaps.astype("<f8").tofile(folder / "gaps.f64")
            args += ["--open", str(folder / "gaps.f64"), "--open-at", str(int(begin * 1e9 - self._offset))]
        else:
            args += ["--closed", str(int(self.load.load))]
        return args

    async def open(self) -> None:
        """Start the engine and wait until its connections are open and the load has started."""
        self._stderr = open(self._folder / "stderr.txt", "wb")  # noqa: SIM115 - closed in stop()
        self._proc = await asyncio.create_subprocess_exec(
            str(engine_binary()), *self._arguments(), stdout=asyncio.subprocess.PIPE, stderr=self._stderr)
        deadline = time.monotonic() + self.timeout_s
        while True:
            chunk = await asyncio.wait_for(self._proc.stdout.read(1 << 16), max(0.1, deadline - time.monotonic()))
            if not chunk:
                await self._proc.wait()
                raise RuntimeError(f"the load engine stopped before the load started: {self._engine_said()}")
            self._buffer += chunk
            batch = records.parse(self._buffer)
            ready = batch[batch["kind"] == records.Kind.READY]
            if ready.size:
                self._ready_at = self._epoch(ready["intended_ns"][0])
                self.niceness = int(ready["code"][0]) - 20
                self._ingest(batch[batch["kind"] != records.Kind.READY])
                return

    def start(self) -> None:
        super().start()
        self.started_at = self._ready_at

    def _epoch(self, ns: np.ndarray | int) -> np.ndarray | float:
        return (np.asarray(ns, dtype=np.float64) + self._offset) / 1e9

    def _start_tasks(self) -> list[asyncio.Task]:
        return [asyncio.create_task(self._read())]

    async def _read(self) -> None:
        """Take the engine's records as they come, until it exits."""
        while True:
            chunk = await self._proc.stdout.read(1 << 16)
            if not chunk:
                break
            self._buffer += chunk
            self._ingest(records.parse(self._buffer))
        code = await self._proc.wait()
        if not self._stopping:
            self._fail(f"the load engine exited ({code}) during the trial: {self._engine_said()}")

    def _ingest(self, batch: np.ndarray) -> None:
        kinds = batch["kind"]
        if self._recent_gone or np.any(kinds == records.Kind.FAILED):
            self._ingest_failures(batch[(kinds == records.Kind.DONE) | (kinds == records.Kind.FAILED)])
        done = batch[kinds == records.Kind.DONE]
        if done.size:
            intended, sent, finished = (self._epoch(done[k]) for k in ("intended_ns", "sent_ns", "done_ns"))
            self._intended.extend(intended.tolist())
            self._sent.extend(sent.tolist())
            self._done.extend(finished.tolist())
            self._server_ms.extend(done["server_ms"].astype(np.float64).tolist())
            self._server_batch.extend(done["server_batch"].astype(np.float64).tolist())
            self._server_queue_ms.extend(done["server_queue_ms"].astype(np.float64).tolist())
            self._detail.extend([None] * done.size)  # the engine records no more than times
            self._late.extend(intended[sent - intended > LATE_AFTER_S].tolist())
        beats = batch[batch["kind"] == records.Kind.HEARTBEAT]
        if beats.size:
            self._watermark = float(self._epoch(beats["intended_ns"][-1]))
            self._lags.extend(zip(self._epoch(beats["sent_ns"]).tolist(), (beats["done_ns"] / 1e9).tolist(),
                                  strict=True))

    def _ingest_failures(self, ended: np.ndarray) -> None:
        """FAILED records, each kept as a failure of its window; with the answers between them, in the engine's
        order, for the count of requests that could not reach the server (a run of answers counts once: all that
        matters is whether the last few all failed)."""
        kinds = ended["kind"]
        first_of_run = np.ones(kinds.size, dtype=bool)
        first_of_run[1:] = kinds[1:] != kinds[:-1]
        picked = ended[(kinds == records.Kind.FAILED) | first_of_run]
        outcomes, statuses = records.outcome_status(picked["code"])
        intended, sent, finished = (self._epoch(picked[k]) for k in ("intended_ns", "sent_ns", "done_ns"))
        known = {int(o) for o in Outcome}
        for i, kind in enumerate(picked["kind"].tolist()):
            if kind == records.Kind.DONE:
                if self._recent_gone:
                    self._note_outcome(Outcome.OK)
                continue
            code = int(outcomes[i])
            outcome = Outcome(code) if code in known else Outcome.OTHER
            status = int(statuses[i])
            name = error_class(outcome, status)
            message = "" if name in self.error_messages else self._failure_message(outcome, status, name)
            self._record_failure(float(intended[i]), float(sent[i]), float(finished[i]), outcome, status, message)

    def _failure_message(self, outcome: Outcome, status: int, name: str) -> str:
        """The engine's first message of the class (its stderr), else one made here; either says who saw it."""
        with contextlib.suppress(OSError):
            text = (self._folder / "stderr.txt").read_text(errors="replace")
            for line in CLASS_LINE.finditer(text):
                if line["cls"] == name:
                    return f"{line['text']} (compiled engine)"
        where = f"{self.wire.host}:{self.wire.port}"
        return {
            Outcome.HTTP_STATUS: f"HTTP {status} from the server (compiled engine)",
            Outcome.GRPC_STATUS: f"gRPC status {status} (compiled engine)",
            Outcome.TIMEOUT: f"no answer within {self.timeout_s:g} s (experiment.request_timeout_s), compiled engine",
            Outcome.RESET: f"{where} reset or closed the connection with the request in flight (compiled engine)",
            Outcome.REFUSED: f"cannot connect to {where} (compiled engine)",
        }.get(outcome, f"{name} (compiled engine)")

    def _fail(self, message: str) -> None:
        """As for any load, and the engine stops (SIGTERM: it lets what is in flight finish): a load that fails,
        the server gone among other causes, stops loading."""
        super()._fail(message)
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()

    def _launched_through(self) -> float:
        return self._watermark

    def _cpu_seconds(self) -> float:
        """The engine's CPU time (it has one thread): the scheduler's nanoseconds, else user + system clock ticks."""
        pid = self._proc.pid
        try:
            return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
        try:  # fields 14 and 15 of /proc/<pid>/stat, after the command name in parentheses
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return self._cpu_marks[-1][1] if self._cpu_marks else 0.0

    async def _monitor(self) -> None:
        """CPU marks of the engine; its lag comes from its own heartbeats, not this process's event loop."""
        while not self._stopping:
            self._cpu_marks.append((self.now(), self._cpu_seconds()))
            await asyncio.sleep(TICK_S)

    async def wait_warm(self, min_requests: int, min_seconds: float, timeout_s: float) -> WarmupStats:
        """Warm-up as for any engine, then the first response's check (by the client that built the request)."""
        stats = await super().wait_warm(min_requests, min_seconds, timeout_s)
        self._check_first_response()
        return stats

    def _check_first_response(self) -> None:
        if self._checked or self.check_response is None:
            return
        self._checked = True
        try:
            self.check_response((self._folder / "first-response.bin").read_bytes())
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with it fails the trial
            self._fail(f"the load engine's first response does not check out: {type(exc).__name__}: {exc}")
            self._raise_if_failed()

    def _engine_said(self) -> str:
        with contextlib.suppress(OSError):
            self._stderr.flush()
            text = (self._folder / "stderr.txt").read_text(errors="replace").strip()
            if text:
                return text[-STDERR_TAIL:]
        return "(nothing on its stderr)"

    async def stop(self) -> None:
        """Stop the engine (SIGTERM: it lets the requests in flight finish, at most DRAIN_S; killed if it lingers
        past that), then the reader; the records read so far stay."""
        self._stopping = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), DRAIN_S + 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await super().stop()
        if hasattr(self, "_stderr"):
            self._stderr.close()
        shutil.rmtree(self._folder, ignore_errors=True)

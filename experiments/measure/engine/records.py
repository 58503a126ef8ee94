"""What the compiled engine writes on stdout: fixed 56-byte records (`struct record` in loadgen.c), one per
request (answered or failed), plus heartbeats, an error marker and a ready marker. Times are CLOCK_MONOTONIC
nanoseconds, the clock of `time.perf_counter` on Linux, so they join the Python engine's records after the same
epoch shift."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

RECORD = np.dtype([("kind", "<u4"), ("code", "<u4"), ("intended_ns", "<i8"), ("sent_ns", "<i8"), ("done_ns", "<i8"),
                   ("server_ms", "<f4"), ("server_batch", "<f4"), ("bytes", "<i8"), ("server_queue_ms", "<f4"),
                   ("unused", "<u4")])
assert RECORD.itemsize == 56


class Kind(IntEnum):
    """`kind` of a record. DONE: a request answered (intended, sent, done; `code` its HTTP status, 200; the server's
    Server-Timing; response bytes). FAILED: a request that ended in an error, as DONE but `done_ns` is when the failure
    was seen, `bytes` what came of a response, and `code` = outcome | (status << 8): the outcome
    (serving.clients.outcomes.Outcome: HTTP_STATUS, GRPC_STATUS, TIMEOUT, RESET, REFUSED, OTHER) in the low byte, the
    status (HTTP_STATUS: the HTTP status; GRPC_STATUS: the grpc-status; else 0) above it (`outcome_status`); the
    load goes on. HEARTBEAT: every request scheduled before `intended_ns` has ended, answered or failed (the
    watermark), at `sent_ns`, with the timer's worst lateness since the last one in `done_ns` and the requests in
    flight in `bytes`. ERROR: the engine failed (the message is on its stderr). READY: connections are open and the
    load starts at `intended_ns`; the engine runs at niceness `code` - 20."""

    DONE = 1
    HEARTBEAT = 2
    ERROR = 3
    READY = 4
    FAILED = 5


def outcome_status(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A FAILED record's `code` split into its outcome and its status."""
    code = np.asarray(code, dtype=np.uint32)
    return (code & 0xFF).astype(np.int64), (code >> 8).astype(np.int64)


def parse(buffer: bytearray) -> np.ndarray:
    """The complete records at the front of `buffer` (consumed from it)."""
    whole = len(buffer) // RECORD.itemsize * RECORD.itemsize
    records = np.frombuffer(bytes(buffer[:whole]), RECORD)
    del buffer[:whole]
    return records

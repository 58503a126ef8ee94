"""Raw per-request samples of one measurement window, as returned by client actors and merged exactly."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ClientHealth:
    """How busy one client actor was during a window: a busy client measures itself, not the server."""

    actor: int
    cpu_util: float  # process CPU seconds / wall seconds (1.0 = one core saturated)
    loop_lag_p99_ms: float  # how late the event loop ran a 10 ms ticker
    late_sends: int = 0  # open loop: requests sent later than scheduled
    cpu_s: float = 0.0  # process CPU seconds spent over the window (cpu_util x the window's length)
    completed: int = 0  # requests this actor completed inside the window: cpu_s / completed is its cost per request


@dataclass
class Failures:
    """The requests of a window that ended in an error (serving.clients.outcomes): when each was scheduled, sent and
    ended, its outcome and status; `ended`: failures that ended inside the window, whenever scheduled."""

    FIELDS = ("intended_s", "send_s", "done_s", "outcome", "status")

    intended_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    send_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    done_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    outcome: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    status: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ended: int = 0

    @property
    def count(self) -> int:
        return int(self.intended_s.size)

    def by_class(self) -> dict[str, int]:
        """How many failed, by error class (`http_503`, `timeout`, ...)."""
        from serving.clients.outcomes import error_class

        out: dict[str, int] = {}
        for outcome, status in zip(self.outcome.tolist(), self.status.tolist(), strict=True):
            name = error_class(int(outcome), int(status))
            out[name] = out.get(name, 0) + 1
        return out

    @staticmethod
    def merge(parts: list[Failures]) -> Failures:
        return Failures(*(np.concatenate([getattr(p, key) for p in parts]) for key in Failures.FIELDS),
                        ended=sum(p.ended for p in parts))


@dataclass
class WindowSamples:
    """Requests *scheduled* inside [window_start, window_end) (epoch seconds), from one or more actors, and
    how many requests *completed* and were *sent* inside it, whenever they were scheduled.

    The scheduled requests are the latency samples; the completed ones are the throughput (what the server
    served: in an open loop past the server's capacity, far fewer than were scheduled). Both counts are exact
    sums over actors and consecutive windows.

    `intended_s` is when a request should have gone out: in closed loop the moment its loop was free (= the
    send time), in open loop its arrival time in the schedule. Latency from the intended time includes any
    wait on the client side, so coordinated omission can't hide queueing; latency from the send time is
    kept beside it to show what it would have hidden.
    """

    window_start: float
    window_end: float
    images_per_request: int
    intended_s: np.ndarray
    send_s: np.ndarray
    done_s: np.ndarray
    server_ms: np.ndarray  # server-reported processing time per request (NaN when the server says nothing)
    actor: np.ndarray  # index of the client actor that sent it
    completed: int  # requests that completed inside the window (whenever scheduled)
    sent: int  # requests sent inside the window (whenever scheduled), answered or failed
    # images of the forward pass the request rode in, as the server reported it (NaN when it says nothing)
    server_batch: np.ndarray | None = None
    # how long the request waited in the server for its forward pass, as the server reported it (NaN: it says nothing)
    server_queue_ms: np.ndarray | None = None
    errors: list[str] = field(default_factory=list)
    clients: list[ClientHealth] = field(default_factory=list)
    # The requests scheduled inside the window that failed: everything above is of those answered well.
    failures: Failures = field(default_factory=Failures)
    error_messages: dict[str, str] = field(default_factory=dict)  # the first message of each error class
    # What the workload records of each request beyond its times (a generative request's TokenTrace), in the order of
    # `intended_s` (None: the requests record nothing more); and of the requests that completed inside the window,
    # whenever scheduled, the same records: what is counted by completion (tokens served) is summed over them.
    detail: list | None = None
    completed_detail: list = field(default_factory=list)
    # The requests that completed inside the window (whenever scheduled), answered well: when each was due, sent and
    # done. What is counted by completion (throughput, and goodput: those answered within a deadline) reads them, so a
    # rate of good answers never exceeds the rate of answers.
    completed_intended_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    completed_send_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    completed_done_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def completed_latency_s(self) -> np.ndarray:
        """The latency of each request that completed inside the window, from when it was due."""
        return self.completed_done_s - self.completed_intended_s

    @property
    def duration_s(self) -> float:
        return self.window_end - self.window_start

    @property
    def requests(self) -> int:
        """Requests scheduled inside the window and answered well: the latency samples (`arrivals` adds the failed)."""
        return int(self.done_s.size)

    @property
    def arrivals(self) -> int:
        """Every request scheduled inside the window, answered or failed: the load an open loop offered."""
        return self.requests + self.failures.count

    @property
    def ended(self) -> int:
        """Every request that ended inside the window, answered or failed (whenever scheduled)."""
        return self.completed + self.failures.ended

    @property
    def latency_s(self) -> np.ndarray:
        """From the intended send time (what a user waiting on the request experiences)."""
        return self.done_s - self.intended_s

    @property
    def send_latency_s(self) -> np.ndarray:
        """From the actual send time (what a client that blocks before sending would report)."""
        return self.done_s - self.send_s

    @staticmethod
    def merge(parts: list[WindowSamples]) -> WindowSamples:
        """Concatenate raw samples (never average percentiles): several actors over the same window, or
        consecutive windows of the same load into one longer window."""
        if not parts:
            raise ValueError("nothing to merge")
        if len({p.images_per_request for p in parts}) != 1:
            raise ValueError("cannot merge windows of different batch sizes")
        spans = sorted({(p.window_start, p.window_end) for p in parts})
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            if start != end:
                raise ValueError("windows to merge must be the same window or consecutive ones")
        intended = np.concatenate([p.intended_s for p in parts])
        order = np.argsort(intended, kind="stable")

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts])[order]

        detail = None
        if all(p.detail is not None for p in parts):
            every = [d for p in parts for d in p.detail]
            detail = [every[i] for i in order]
        return WindowSamples(
            window_start=spans[0][0],
            window_end=spans[-1][1],
            images_per_request=parts[0].images_per_request,
            intended_s=intended[order],
            send_s=cat("send_s"),
            done_s=cat("done_s"),
            server_ms=cat("server_ms"),
            server_batch=None if any(p.server_batch is None for p in parts) else cat("server_batch"),
            server_queue_ms=None if any(p.server_queue_ms is None for p in parts) else cat("server_queue_ms"),
            actor=cat("actor"),
            completed=sum(p.completed for p in parts),
            sent=sum(p.sent for p in parts),
            errors=[e for p in parts for e in p.errors],
            clients=[c for p in parts for c in p.clients],
            failures=Failures.merge([p.failures for p in parts]),
            error_messages={k: v for p in reversed(parts) for k, v in p.error_messages.items()},
            detail=detail,
            completed_detail=[d for p in parts for d in p.completed_detail],
            **{key: np.concatenate([getattr(p, key) for p in parts])
               for key in ("completed_intended_s", "completed_send_s", "completed_done_s")},
        )

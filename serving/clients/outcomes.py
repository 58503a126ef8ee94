"""What became of one request: answered well, or the class of its error. Both load engines record one outcome per
request (the Python client from its exception, the compiled engine in its records), so an error is a result of the
trial (its rate by class, the goodput) rather than the end of it.

    ok           a 200 (gRPC: status OK) whose outputs check out
    http_<code>  the server answered with another HTTP status (a 503 from a shedding server or a load balancer)
    grpc_<code>  a gRPC status other than OK (8 RESOURCE_EXHAUSTED, 14 UNAVAILABLE, ...)
    timeout      no answer within the per-request deadline (experiment.request_timeout_s)
    reset        the connection was reset or closed with the request in flight
    refused      no connection could be opened (gRPC: UNAVAILABLE because no address could be connected to)
    invalid      an answer whose outputs do not check out (wrong size or shape)
    other        anything else (the message is kept)
    truncated    a streamed answer cut mid-way: the stream ended (the connection closed, or the body ended) before the
                 answer said it was finished
    stream_error a streamed answer that carried an error event in place of its next tokens
"""

from __future__ import annotations

import asyncio
from enum import IntEnum

# What a server that sheds load answers a request it refuses (Triton's queue limit, Ray Serve's max_queued_requests,
# TorchServe's job queue, a load balancer): 503 or 429, gRPC RESOURCE_EXHAUSTED or UNAVAILABLE.
SHED_CLASSES = frozenset({"http_503", "http_429", "grpc_8", "grpc_14"})
# How gRPC words UNAVAILABLE when it found no server to connect to (a refused or unreachable address), as opposed to a
# server answering UNAVAILABLE ("Exceeds maximum queue size"): the first counts as `refused`, like a refused socket.
GRPC_NO_CONNECTION = "failed to connect to all addresses"


class Outcome(IntEnum):
    OK = 0
    HTTP_STATUS = 1  # `status`: the HTTP status
    GRPC_STATUS = 2  # `status`: the gRPC status code
    TIMEOUT = 3
    RESET = 4
    REFUSED = 5
    INVALID = 6
    OTHER = 7
    TRUNCATED = 8
    STREAM_ERROR = 9


class RequestError(RuntimeError):
    """A request the server answered with an error status (clients raise it, so the outcome is not guessed from a
    message)."""

    def __init__(self, outcome: Outcome, status: int, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status

    def __reduce__(self) -> tuple:
        """Raised in a Ray task or actor and read in the driver: pickled with the three arguments it is made with."""
        return type(self), (self.outcome, self.status, str(self))


def error_class(outcome: int, status: int = 0) -> str:
    """The name an outcome is counted under (`http_503`, `grpc_14`, `timeout`, ...)."""
    outcome = Outcome(outcome)
    if outcome is Outcome.HTTP_STATUS:
        return f"http_{status}"
    if outcome is Outcome.GRPC_STATUS:
        return f"grpc_{status}"
    return outcome.name.lower()


def classify(exc: BaseException) -> tuple[Outcome, int]:
    """The outcome of a request that raised `exc` in a Python client, and its status (0 when none)."""
    if isinstance(exc, RequestError):
        return exc.outcome, exc.status
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return Outcome.TIMEOUT, 0
    if isinstance(exc, ConnectionRefusedError):
        return Outcome.REFUSED, 0
    if isinstance(exc, ConnectionError | EOFError | BrokenPipeError):
        return Outcome.RESET, 0
    try:
        import grpc

        if isinstance(exc, grpc.aio.AioRpcError):
            code = exc.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome.TIMEOUT, 0
            if code == grpc.StatusCode.UNAVAILABLE and GRPC_NO_CONNECTION in (exc.details() or ""):
                return Outcome.REFUSED, 0  # no server to answer, not a server refusing: the load stops on it
            return Outcome.GRPC_STATUS, int(code.value[0])
    except ImportError:  # pragma: no cover - grpc is a dependency
        pass
    if isinstance(exc, ValueError):  # an answer of the wrong shape (check_logits) or one that does not parse
        return Outcome.INVALID, 0
    return Outcome.OTHER, 0

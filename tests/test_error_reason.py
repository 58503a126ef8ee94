"""A failed trial's `reason` is the error its server or task raised, unwrapped from Ray's traceback, and a long one
keeps its end: a server that would not start says why in the last lines of its log."""

from __future__ import annotations

import ray.exceptions

from experiments.results.records import REASON_CHARS, error_reason, root_cause

LOG_TAIL = "\n".join([f'I1128 11:18:40.{n:06d} 27832 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize"'
                      for n in range(60)] + ["terminate called after throwing an instance of "
                                             "'boost::interprocess::lock_exception'"])


def ray_wrapped(cause: BaseException) -> BaseException:
    """What `ray.get` raises when an actor method raised `cause`."""
    return ray.exceptions.RayTaskError("TritonServerHost.start", "Traceback (most recent call last):\n" * 40,
                                       cause).as_instanceof_cause()


def test_a_ray_wrapped_error_reads_as_the_error_its_task_raised() -> None:
    cause = RuntimeError("tritonserver (resnet18) exited before it was ready")
    wrapped = ray_wrapped(cause)
    assert root_cause(wrapped) is cause
    assert error_reason(wrapped) == "tritonserver (resnet18) exited before it was ready"
    assert root_cause(cause) is cause  # not wrapped: itself


def test_a_long_reason_keeps_its_start_and_the_log_tails_last_line() -> None:
    reason = error_reason(ray_wrapped(RuntimeError(f"tritonserver (resnet18) exited before it was ready; last lines "
                                                   f"of its log:\n{LOG_TAIL}")))
    assert len(reason) <= REASON_CHARS < len(LOG_TAIL)
    assert reason.startswith("tritonserver (resnet18) exited before it was ready")
    assert reason.endswith("'boost::interprocess::lock_exception'") and "\n…\n" in reason


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert error_reason(TimeoutError()) == "TimeoutError"

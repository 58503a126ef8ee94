"""A server that aborted says so in its failed trial's reason, read from its log: the trial's own error ("the last 20
requests could not reach the server") reads like a network fault, and the cause is in the log the trial keeps."""

from __future__ import annotations

from serving.triton.server import LOCK_EXCEPTION_DOCS, abort_cause
from tests.stand_in_group import UNHEALTHY, run_stand_in_group

# The end of a bundled Triton's log as the Python backend aborted it under load (2.51, ResNet-18 at concurrency 1 on
# two busy cores), backtrace shortened.
ABORTED = """I1203 08:39:31.444957 22478 http_server.cc:4713] "Started HTTPService at 127.0.0.1:57825"
I1203 08:39:31.487837 22478 http_server.cc:362] "Started Metrics Service at 127.0.0.1:47965"
Signal (11) received.
 0# 0x00005649D2CB052D in /root/.cache/tierbench/tritonserver-pytriton0.7.0-py3.11/bin/tritonserver
 5# TRITONBACKEND_ModelInstanceExecute in /root/.cache/tierbench/backends/python/libtriton_python.so

terminate called after throwing an instance of 'boost::interprocess::lock_exception'
  what():  boost::interprocess::lock_exception
"""
RUNNING = """I1203 08:39:48.708467 22926 http_server.cc:4713] "Started HTTPService at 127.0.0.1:36505"
I1203 08:39:48.751692 22926 http_server.cc:362] "Started Metrics Service at 127.0.0.1:57253"
"""


def test_the_python_backends_abort_is_named_with_its_signal_exception_and_the_page_on_it() -> None:
    assert abort_cause(ABORTED) == (
        "tritonserver aborted (SIGSEGV, uncaught boost::interprocess::lock_exception; see its log): the Python "
        f"backend's known abort under load ({LOCK_EXCEPTION_DOCS})")


def test_other_aborts_are_named_without_the_page_and_a_log_without_one_names_none() -> None:
    assert abort_cause("Signal (6) received.\n 0# 0x0 in tritonserver\n") \
        == "tritonserver aborted (SIGABRT; see its log)"
    assert abort_cause("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n") \
        == "tritonserver aborted (uncaught std::bad_alloc; see its log)"
    assert abort_cause("Signal (99) received.\n") == "tritonserver aborted (signal 99; see its log)"
    # Killed from outside (SIGKILL, the OOM killer), a server writes nothing: the trial's own reason stands alone.
    assert abort_cause(RUNNING) is None and abort_cause("") is None


def test_a_failed_trial_whose_server_aborted_gives_the_cause_after_its_own_reason(monkeypatch) -> None:
    sweep, _ = run_stand_in_group(monkeypatch, ["experiment.trial_retries=0"], failing={1},
                                  server_logs={"tritonserver.log": ABORTED})
    (record,) = sweep.records
    assert record.status == "failed"
    assert record.reason == f"{UNHEALTHY}; {abort_cause(ABORTED)}"
    assert sweep.logs == [{"tritonserver.log": ABORTED}], "the log it was read from is kept with the trial"


def test_a_failed_trial_whose_server_log_shows_no_abort_keeps_its_reason(monkeypatch) -> None:
    sweep, _ = run_stand_in_group(monkeypatch, ["experiment.trial_retries=0"], failing={1},
                                  server_logs={"tritonserver.log": RUNNING})
    (record,) = sweep.records
    assert record.status == "failed" and record.reason == UNHEALTHY

"""Ctrl-C (SIGINT) or SIGTERM in the middle of a sweep stops Triton, its stubs, the Ray Serve app, the client
actors and the Ray the sweep started: nothing of it is left in the process table."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.processes import server_processes, wait_for_no_new_processes, wait_for_process
from tests.sweep_process import SweepProcess

pytestmark = pytest.mark.slow

MATRIX = ["experiment.backends=[triton_onnx,pytorch]", "experiment.protocols=[http]",
          "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1,2]",
          "experiment.window_s=2", "experiment.stability.windows=1", "experiment.warmup_s=0.3",
          "experiment.warmup_requests=2"]


@pytest.mark.parametrize("signum,while_running", [(signal.SIGINT, "tritonserver"), (signal.SIGTERM, "ServeReplica")])
def test_signal_mid_sweep_leaves_nothing_running(tmp_path: Path, signum: int, while_running: str) -> None:
    before = server_processes()
    sweep = SweepProcess(tmp_path, "sweep_id=interrupted", *MATRIX)
    try:
        # Interrupt during the first trial of the group whose server we want to catch running.
        sweep.wait_for(r"\[1/4\]" if while_running == "tritonserver" else r"\[3/4\]")
        wait_for_process(while_running, before)  # the server is running when the signal arrives
        sweep.proc.send_signal(signum)
        code = sweep.wait(timeout_s=120)
    finally:
        sweep.kill()
    assert code == 130, sweep.output[-3000:]
    assert "interrupted" in sweep.output and "sweep_id=interrupted" in sweep.output
    left = wait_for_no_new_processes(before, timeout_s=30)
    assert not left, f"left running after the signal: {left}"

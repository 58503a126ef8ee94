"""Ctrl-C (SIGINT) or SIGTERM in the middle of a sweep stops Triton, its stubs, the Ray Serve app, TorchServe (its
Java frontend and Python workers), the FastAPI service, the client actors and the Ray the sweep started: nothing of
it is left in the process table."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.processes import server_processes, wait_for_no_new_processes, wait_for_process
from tests.sweep_process import SweepProcess

pytestmark = pytest.mark.slow

MATRIX = ["model=tiny",
          "experiment.protocols=[http]", "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]",
          "experiment.concurrency=[1,2]", "experiment.window_s=2", "experiment.stability.windows=1",
          "experiment.warmup_s=0.3", "experiment.warmup_requests=2"]
# (signal, backends, the trial during which it arrives, the server process that must be running then): Triton and
# its stubs, TorchServe's Java frontend (its launcher and Python workers with it), uvicorn. A Ray Serve replica
# interrupted mid-trial: tests/test_autoscaling.py (its node goes idle only once the app is deleted).
CASES = [(signal.SIGINT, "triton_onnx,pytorch", 1, "tritonserver"),
         (signal.SIGTERM, "torchserve,fastapi", 1, "org.pytorch.serve"),
         (signal.SIGINT, "fastapi,torchserve", 1, "serving.fastapi.app")]


@pytest.mark.parametrize("signum,backends,trial,while_running", CASES, ids=[case[3] for case in CASES])
def test_signal_mid_sweep_leaves_nothing_running(tmp_path: Path, signum: int, backends: str, trial: int,
                                                 while_running: str) -> None:
    before = server_processes()
    sweep = SweepProcess(tmp_path, "sweep_id=interrupted", f"experiment.backends=[{backends}]", *MATRIX)
    try:
        # Interrupt during the first trial of the group whose server we want to catch running.
        sweep.wait_for(rf"\[{trial}/4\]")
        wait_for_process(while_running, before)  # the server is running when the signal arrives
        sweep.proc.send_signal(signum)
        code = sweep.wait(timeout_s=120)
    finally:
        sweep.kill()
    assert code == 130, sweep.output[-3000:]
    assert "interrupted" in sweep.output and "sweep_id=interrupted" in sweep.output
    left = wait_for_no_new_processes(before, timeout_s=30)
    assert not left, f"left running after the signal: {left}"

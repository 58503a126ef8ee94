"""Every row of the validation list, from the command line: non-zero exit, one line naming the key and the
bad value, within seconds, nothing started (no Ray, no server, no MLflow store)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.paths import REPO_ROOT
from tests.conftest import server_processes

ROWS = [
    ("unknown tier", ["gpu=tpu"], "gpu='tpu' is not allowed"),
    ("unknown tier in a sweep", ["gpu=a100,tpu", "-m"], "gpu='tpu' is not allowed"),
    ("unknown backend", ["experiment.backends=[tensorflow]"], "experiment.backends='tensorflow'"),
    ("unknown protocol", ["experiment.protocols=[websocket]"], "experiment.protocols='websocket'"),
    ("unknown input format", ["experiment.input_formats=[png]"], "experiment.input_formats='png'"),
    ("batch <= 0", ["experiment.batch_sizes=[0]"], "experiment.batch_sizes=0"),
    ("batch above the model's max", ["experiment.batch_sizes=[1,64]"], "experiment.batch_sizes=64"),
    ("concurrency <= 0", ["experiment.concurrency=[0]"], "experiment.concurrency=0"),
    ("rate <= 0", ["experiment.load_mode=poisson", "experiment.request_rates=[-5]"], "experiment.request_rates=-5"),
    ("unknown backend setting", ["+backends.pytorch.num_replica=2"], "backends.pytorch.num_replica=2"),
    ("misspelt backend setting", ["backends.pytorch.num_replica=2"], "backends.pytorch.num_replica=2"),
    ("backend setting of the wrong type", ["backends.pytorch.half=maybe"], "backends.pytorch.half='maybe'"),
    ("unknown accelerator", ["backends.triton_onnx.accelerator=rocm"], "backends.triton_onnx.accelerator='rocm'"),
    ("negative price", ["gpu.price_per_hour_usd=-0.5"], "gpu.price_per_hour_usd=-0.5"),
    ("missing price", ["gpu.price_per_hour_usd=???"], "gpu.price_per_hour_usd=None"),
    ("window <= 0", ["experiment.window_s=0"], "experiment.window_s=0"),
    ("warm-up <= 0", ["experiment.warmup_s=-1"], "experiment.warmup_s=-1"),
    ("malformed override", ["experiment.batch_sizes=[1,"], "override 'experiment.batch_sizes=[1,' is malformed"),
]


@pytest.mark.parametrize("overrides,fragment", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, overrides: list[str], fragment: str) -> None:
    before = server_processes()
    start = time.monotonic()
    # `-m` must come last for Hydra; keep the row's own order otherwise.
    flags = [o for o in overrides if o.startswith("-")]
    args = [*(o for o in overrides if not o.startswith("-")), f"results_dir={tmp_path / 'runs'}",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *flags]
    proc = subprocess.run([sys.executable, "-m", "runners.sweep", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    seconds = time.monotonic() - start
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert fragment in output
    error_lines = [line for line in output.splitlines() if fragment in line]
    assert len(error_lines) == 1 and ("not allowed" in error_lines[0] or "malformed" in error_lines[0])
    assert seconds < 15
    assert not (tmp_path / "mlflow.db").exists(), "no MLflow run may start"
    assert not list((tmp_path / "runs").glob("*/*/trials")), "no trial may start"
    assert not server_processes() - before

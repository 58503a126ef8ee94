"""The command line as a user meets it: errors before anything starts, missing tiers named."""

from __future__ import annotations

import subprocess
import sys
import time

from serving.paths import REPO_ROOT
from tests.conftest import server_processes


def _sweep(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runners.sweep", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)
    return proc, time.monotonic() - start


def test_missing_tiers_fail_fast_and_are_named(tmp_path) -> None:
    before = server_processes()
    proc, seconds = _sweep("gpu=a100,rtx4090", f"results_dir={tmp_path}",
                           f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "-m")
    assert proc.returncode != 0
    assert seconds < 60
    assert "no live node of tier 'a100'" in proc.stderr + proc.stdout
    assert not server_processes() - before

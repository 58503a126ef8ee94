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
    """cluster=local is this machine: a GPU tier its GPU does not match is refused, naming the GPU found and the
    tier asked, before Ray starts. Overrides after -m count like those before it."""
    before = server_processes()
    proc, seconds = _sweep("gpu=a100,rtx4090", "-m", f"results_dir={tmp_path}",
                           f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}")
    output = proc.stderr + proc.stdout
    assert proc.returncode == 2, output
    assert seconds < 60
    assert "unrecognized arguments" not in output
    for tier, pattern in (("a100", "['A100']"), ("rtx4090", "['RTX 4090']")):
        assert f"gpu={tier} with cluster=local: tier {tier}" in output and f"needs a GPU matching {pattern}" in output
    assert "this node has no NVIDIA GPU" in output and "declares only this machine's tiers ['local']" in output
    assert not (tmp_path / "mlflow.db").exists(), "refused before the MLflow sweep run"
    assert not server_processes() - before

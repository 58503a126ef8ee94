"""The command line as a user meets it: errors before anything starts, missing tiers named."""

from __future__ import annotations

import pytest

from tests.helpers import store_overrides
from tests.processes import server_processes
from tests.sweep_process import run_sweep_command


@pytest.mark.slow
def test_missing_tiers_fail_fast_and_are_named(tmp_path) -> None:
    """cluster=local is this machine: a GPU tier its GPU does not match is refused, naming the GPU found and the
    tier asked, before Ray starts. Overrides after -m count like those before it."""
    before = server_processes()
    proc, _ = run_sweep_command(["gpu=a100,rtx4090", "-m", *store_overrides(tmp_path)])
    output = proc.stderr + proc.stdout
    assert proc.returncode == 2, output
    assert "stopped the local Ray this sweep started" not in output, "refused before Ray started"
    assert "unrecognized arguments" not in output
    for tier, name in (("a100", "'NVIDIA A100-SXM4-80GB'"), ("rtx4090", "'NVIDIA GeForce RTX 4090'")):
        assert f"gpu={tier} with cluster=local: tier {tier}" in output and f"needs a GPU named {name}" in output
    assert "this node has no NVIDIA GPU" in output
    assert "declares only this machine's tiers ['local', 'local_shared2']" in output
    assert not (tmp_path / "mlflow.db").exists(), "refused before the MLflow sweep run"
    assert not server_processes() - before

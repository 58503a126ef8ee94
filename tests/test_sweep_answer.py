"""The first command ends with the answer: a sweep (`report=true`, the default) writes its report and prints the
answer block and the report's path, as `runners.report` does; with `report=false` it prints neither
(tests/test_foreign_ray.py's sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import store_overrides
from tests.sweep_process import run_sweep_command

pytestmark = pytest.mark.slow

TINY = ["model=tiny", "experiment.backends=[fastapi]", "experiment.protocols=[http]",
        "experiment.input_formats=[tensor]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1,2]",
        "experiment.window_s=1", "experiment.warmup_s=0.3", "experiment.stability.windows=1",
        "experiment.warmup_requests=2"]


def test_a_sweep_ends_with_the_answer_and_the_reports_path(tmp_path: Path) -> None:
    proc, _ = run_sweep_command([*store_overrides(tmp_path, "answered", premigrated=True), *TINY, "report=true"],
                                timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "tierbench report, sweep answered: 2 trials (2 ok, 0 failed, 0 skipped) on local" in out
    assert "Cheapest operating point" in out and "Lowest p99: local · fastapi/http/tensor" in out
    html = tmp_path / "runs" / "answered" / "report" / "report.html"
    assert f"report: {html}" in out and html.exists()
    assert out.rstrip().splitlines()[-1].startswith("MLflow: attached to the sweep run")

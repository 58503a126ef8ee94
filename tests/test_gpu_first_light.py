"""benchmarks/gpu_first_light.sh's budget: a lent GPU's time is counted from outside, so a step that cannot finish
within what is left is skipped, saying so, instead of being killed with the whole command (and its bundle)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from serving.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_first_light.sh"


def run_script(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


def test_a_step_the_budget_cannot_fit_is_skipped_and_said(tmp_path: Path) -> None:
    done = run_script("--steps", "imports,doctor", "--budget", "30", out=tmp_path)
    summary = (tmp_path / "SUMMARY.txt").read_text()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "== imports: skipped, " in summary and "of the 30s budget left (a step needs 60s)" in summary
    assert "== doctor: skipped, " in summary
    assert not (tmp_path / "imports.txt").exists()


def test_a_step_within_the_budget_runs_under_its_share(tmp_path: Path) -> None:
    done = run_script("--steps", "imports", "--budget", "200", "--step-limit", "100", out=tmp_path)
    summary = (tmp_path / "SUMMARY.txt").read_text()
    assert done.returncode == 0, summary + done.stderr
    assert "== imports: " in summary and "exit 0 after" in summary
    assert "skipped" not in summary


def test_a_budget_that_is_not_whole_seconds_is_refused(tmp_path: Path) -> None:
    done = run_script("--budget", "7.5", out=tmp_path)
    assert done.returncode == 2
    assert "--budget take whole seconds, got '7.5'" in done.stderr

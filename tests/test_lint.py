"""The linter, in the test suite: CI runs the README's second command (`python -m pytest`, .ci/run), so `ruff check`
runs there through this test, with the settings in pyproject.toml ([tool.ruff]) and its findings as the failure.
(Not `ruff format --check`: the tree is not formatted by ruff's formatter, and is not meant to be.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff (a dev dependency: pip install -e '.[dev]') lints the repository")
    # --no-cache: nothing written into the tree; the whole repository takes well under a second.
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise", "."],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"ruff check found (`ruff check --fix .` fixes some):\n{proc.stdout}{proc.stderr}"

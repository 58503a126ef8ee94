"""Doc pages that must keep up with the code: docs/configuration/reference.md is what the schemas render now, and
docs/report.md's "Comparing sweeps" snippet runs as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serving.paths import REPO_ROOT


def test_the_committed_configuration_reference_is_what_the_schemas_render() -> None:
    """docs/configuration/reference.md is committed (links to it work on GitHub too) and rendered from the schemas:
    a schema or conf/ change needs it rendered again."""
    from experiments.config.reference import PAGE, render

    path = REPO_ROOT / "docs" / PAGE
    assert path.read_text() == render(), (
        f"{path.relative_to(REPO_ROOT)} is out of date; render it again: python -m experiments.config.reference > "
        f"docs/{PAGE}")


def test_the_documented_comparison_of_two_sweeps_runs(tmp_path: Path, capsys: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/report.md's "Comparing sweeps" snippet, run as written on two synthetic sweeps of the same points. The
    snippet sets MLflow's process-wide tracking URI, as a user's script would: it is put back afterwards, or every later
    test in this worker would read this test's store."""
    import mlflow.tracking._tracking_service.utils as tracking_utils

    from tests.synthetic_trials import log_sweep

    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)

    text = (REPO_ROOT / "docs" / "report.md").read_text()
    code = text.split("<!-- docs-check: compare-sweeps -->\n```python\n", 1)[1].split("```", 1)[0]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for sweep in ("before", "after"):
        log_sweep(uri, sweep, ["local"], 3, tmp_path / "runs", requests_per_trial=20)
    assert code.count('"sqlite:///mlflow/mlflow.db"') == 1 and code.count('"20261126-101500", "20261126-143000"') == 1
    code = code.replace('"sqlite:///mlflow/mlflow.db"', repr(uri))
    code = code.replace('"20261126-101500", "20261126-143000"', '"before", "after"')
    capsys.readouterr()
    exec(compile(code, "docs/report.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "before" in printed and "after" in printed and "local" in printed, printed
    assert len(printed.strip().splitlines()) >= 5, printed  # a header and one row per operating point (3)

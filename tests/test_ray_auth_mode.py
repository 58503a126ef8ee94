"""Ray reads its authentication mode once per process: a pytest worker that starts Ray in its own process under one
mode and then another fails the second start ("Failed to start GCS", InvalidAuthToken) or has its node lease
cancelled. The tests run under one mode, set before any of them (tests/conftest.py), and none changes it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from tests.conftest import RAY_AUTH_MODE

TESTS = Path(__file__).resolve().parent
CHANGES_ENV = {"setenv", "delenv", "setitem", "pop", "__setitem__", "__delitem__"}


def test_the_worker_runs_every_test_under_one_ray_auth_mode() -> None:
    assert os.environ.get("RAY_AUTH_MODE") == RAY_AUTH_MODE == "disabled"


def test_no_test_changes_the_ray_auth_mode_of_its_process() -> None:
    """A string "RAY_AUTH_MODE" passed to monkeypatch's setenv/delenv or to os.environ's setters, or assigned as a
    key of os.environ; a subprocess's own environment (a dict built for it) is fine."""
    changed = []
    for path in TESTS.glob("*.py"):
        if path.name in {"conftest.py", Path(__file__).name}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and node.func.attr in CHANGES_ENV
                     and any(isinstance(a, ast.Constant) and a.value == "RAY_AUTH_MODE" for a in node.args))
            assigned = (isinstance(node, (ast.Assign, ast.Delete))
                        and any(isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                                and t.slice.value == "RAY_AUTH_MODE" and "environ" in ast.unparse(t.value)
                                for t in getattr(node, "targets", [])))
            if named or assigned:
                changed.append(f"{path.name}:{node.lineno}")
    assert not changed, f"tests change RAY_AUTH_MODE in their own process (Ray reads it once per process): {changed}"

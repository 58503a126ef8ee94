"""The sweep's hint when Python caches no bytecode and the heavy libraries have none (installed without it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from experiments.run import bytecode


def test_no_hint_where_python_caches_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(bytecode, "_uncached", lambda package: True)
    assert bytecode.uncached_bytecode_hint() is None


def test_hint_names_the_uncached_libraries_and_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(bytecode, "_uncached", lambda package: package != "mlflow")
    hint = bytecode.uncached_bytecode_hint()
    assert "torch, ray were installed without bytecode" in hint
    site = Path(__import__("torch").__file__).parents[1]
    assert f"python -m compileall -q -j 0 {site}" in hint
    assert "docs/troubleshooting.md#no-cached-bytecode" in hint
    monkeypatch.setattr(bytecode, "_uncached", lambda package: False)
    assert bytecode.uncached_bytecode_hint() is None, "compiled once: nothing to say"


def test_a_module_without_cached_bytecode_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fresh_pkg").mkdir()
    (tmp_path / "fresh_pkg" / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bytecode._uncached("fresh_pkg")
    import py_compile

    py_compile.compile(str(tmp_path / "fresh_pkg" / "__init__.py"))
    assert not bytecode._uncached("fresh_pkg")

"""The quick tier (`python -m pytest -m "not slow"`) starts no process, server or sweep: a test that does, itself or
through a fixture it asks for, is marked `slow` (in its module's `pytestmark` or by its own decorator). Read from
the tests' source, so a new test that starts something without the mark is found here."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# What starts a process, a server or a sweep (a call of one of these names, or of an attribute so named).
STARTERS = {"run_sweep_command", "SweepProcess", "Popen", "start_process", "StandIn", "TransformersServe",
            "OipServerProcess", "run_engine", "engine", "http_stand", "h2_stand", "TritonHost", "start_local_ray",
            "ray_cluster", "run_sweep", "subprocess_run", "check_output", "ThreadedServer", "tracking_server"}
SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}


def _marked_slow(decorators: list[ast.expr]) -> bool:
    return any("slow" in ast.unparse(d) for d in decorators)


def _starts(node: ast.AST) -> bool:
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        if name in STARTERS or (owner == "subprocess" and name in SUBPROCESS_CALLS) or (owner == "ray" and
                                                                                        name == "init"):
            return True
    return False


def _fixture_name(function: ast.FunctionDef) -> str | None:
    for decorator in function.decorator_list:
        text = ast.unparse(decorator)
        if text.startswith(("pytest.fixture", "fixture")):
            return function.name
    return None


def _arguments(function: ast.FunctionDef) -> set[str]:
    return {a.arg for a in function.args.args}


def _fixtures(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _fixture_name(fn)}


def _plugins(tree: ast.Module) -> list[str]:
    """The modules a test module takes fixtures from (`pytest_plugins = ["tests.generative_servers"]`)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytest_plugins"
                                                for t in node.targets):
            return [ast.literal_eval(e) for e in getattr(node.value, "elts", [])]
    return []


def starting_fixtures(path: Path, trees: dict[Path, ast.Module]) -> set[str]:
    """The fixtures a test module sees (its own, conftest.py's, its plugins') that start something, themselves or
    through the fixtures they ask for; a module's own fixture hides another module's of the same name."""
    seen: dict[str, ast.FunctionDef] = {}
    sources = [TESTS / "conftest.py", *(TESTS / f"{p.split('.')[-1]}.py" for p in _plugins(trees[path])), path]
    for source in sources:
        tree = trees.get(source) or (ast.parse(source.read_text()) if source.exists() else None)
        if tree is not None:
            seen.update(_fixtures(tree))
    starting = {name for name, fn in seen.items() if _starts(fn)}
    grew = True
    while grew:
        more = {name for name, fn in seen.items() if name not in starting and _arguments(fn) & starting}
        starting |= more
        grew = bool(more)
    return starting


def unmarked(trees: dict[Path, ast.Module]) -> list[str]:
    """`file::test` of each test that starts something without the `slow` mark."""
    found = []
    for path, tree in trees.items():
        module_slow = any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                             for t in n.targets) and "slow" in ast.unparse(n.value)
                          for n in tree.body)
        if module_slow:
            continue
        starting = starting_fixtures(path, trees)
        for node in tree.body:
            functions = [node] if isinstance(node, ast.FunctionDef) else [
                n for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
            for fn in functions:
                if not fn.name.startswith("test") or _marked_slow(fn.decorator_list):
                    continue
                if _starts(fn) or _arguments(fn) & starting:
                    found.append(f"{path.name}::{fn.name}")
    return found


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(TESTS.glob("*.py"))}


def test_every_test_that_starts_a_process_is_slow() -> None:
    found = unmarked(_trees())
    assert not found, f"tests that start a process, a server or a sweep without @pytest.mark.slow: {found}"


def test_the_scan_finds_what_it_is_for(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import pytest\nimport subprocess\n\n\n@pytest.fixture\ndef server():\n"
                      "    with StandIn() as s:\n        yield s\n\n\n@pytest.fixture\ndef client(server):\n"
                      "    return server.url\n\n\ndef test_a(client):\n    assert client\n\n\n"
                      "@pytest.mark.slow\ndef test_b(server):\n    assert server\n\n\n"
                      "def test_c():\n    subprocess.run(['true'])\n\n\ndef test_d():\n    assert 1\n")
    trees = {sample: ast.parse(sample.read_text())}
    assert unmarked(trees) == ["test_sample.py::test_a", "test_sample.py::test_c"]

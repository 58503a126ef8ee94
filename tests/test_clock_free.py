"""No test is decided by a clock: an assertion that compares an elapsed time with a constant fails on a busy machine
and says nothing of what the code did. "Fails fast" is checked by what the code did (Ray never started, one attempt,
no waiting logged), a measurement by bounds its own design gives. A deadline inside a poll loop, which only guards
against a hang, is fine: this scan looks at the assertions a test ends on, outside loops."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "perf_counter", "time", "process_time", "monotonic_ns", "perf_counter_ns", "now"}
# Names that hold an elapsed time in the tests' own idiom (`proc, seconds = run_sweep_command(...)`).
ELAPSED = {"seconds", "elapsed", "elapsed_s", "took", "took_s", "duration_s", "wall_s"}


def _is_time(node: ast.AST, timed: set[str]) -> bool:
    """A clock reading, an elapsed time's name, or arithmetic of them (`time.monotonic() - started`)."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
    if isinstance(node, ast.Name):
        return node.id in ELAPSED or node.id in timed
    if isinstance(node, ast.BinOp):
        sides = (node.left, node.right)
        return any(_is_time(s, timed) for s in sides) and all(
            _is_time(s, timed) or isinstance(s, ast.Constant) for s in sides)
    return False


def _timed_names(function: ast.AST) -> set[str]:
    """Names a function assigns a clock reading to (`started = time.monotonic()`)."""
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and _is_time(node.value, names):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _outside_loops(function: ast.AST) -> list[ast.Assert]:
    found: list[ast.Assert] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.While | ast.For | ast.AsyncFor):
                continue  # a poll loop's deadline guards a hang
            if isinstance(child, ast.Assert):
                found.append(child)
            visit(child)

    visit(function)
    return found


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def _caps_a_time(compare: ast.Compare, timed: set[str]) -> bool:
    """Some pair of the comparison bounds a time from above by a number (`took < 2.0`, `30 > seconds`); a bound
    from below (it waited at least its limit) cannot fail on a busy machine, and is not one."""
    sides = [compare.left, *compare.comparators]
    for left, op, right in zip(sides, compare.ops, sides[1:], strict=False):
        if isinstance(op, ast.Lt | ast.LtE) and _is_time(left, timed) and _number(right):
            return True
        if isinstance(op, ast.Gt | ast.GtE) and _number(left) and _is_time(right, timed):
            return True
    return False


def clock_decided(path: Path) -> list[str]:
    """`file:line` of each assertion in `path` (outside loops) that caps a clock reading or an elapsed time with a
    number."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        timed = _timed_names(function)
        for check in _outside_loops(function):
            if any(_caps_a_time(n, timed) for n in ast.walk(check.test) if isinstance(n, ast.Compare)):
                found.append(f"{path.name}:{check.lineno}")
    return found


def test_no_test_ends_on_an_elapsed_time_compared_with_a_constant() -> None:
    found = [hit for path in sorted(TESTS.glob("*.py")) for hit in clock_decided(path)]
    assert not found, ("assertions decided by a clock (check what the code did instead, or bound the figure by "
                       f"its own design): {found}")


def test_the_scan_finds_what_it_is_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import time\n\n\ndef test_a():\n    proc, seconds = run()\n    assert seconds < 60\n\n\n"
                      "def test_b():\n    started = time.monotonic()\n    go()\n"
                      "    assert time.monotonic() - started < 15\n\n\n"
                      "def test_c():\n    while not done():\n        assert time.monotonic() - t0 < 60\n"
                      "    assert result() == 3\n    took = time.monotonic() - t0\n    assert 0.5 <= took\n"
                      "    assert np.sum(d > took) >= 1\n    assert 0.5 <= took < 2.0\n")
    assert clock_decided(sample) == ["sample.py:6", "sample.py:12", "sample.py:22"]

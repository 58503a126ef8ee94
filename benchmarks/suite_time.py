"""The test suite's time, file by file: where README's second command spends its minutes.

    python benchmarks/suite_time.py [--busy] [--name suite_time] [-- PYTEST ARGS...]

Runs `python -m pytest` in this checkout (its own `addopts`: two workers, one file each at a time) with a JUnit XML
report, then prints the wall time, the tests' outcome and each file's time (its tests' setup, call and teardown
summed, module fixtures included: what the file costs a worker), longest first, and writes
`benchmarks/results/<name>.json`. `--busy` keeps one core busy with a spinning process beside the suite for its
whole run (the suite must not flake when the machine is shared). Arguments after `--` go to pytest
(`-- -m "not slow"`: the quick tier). Goal: the whole suite in 12 minutes, the quick tier in 2, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from serving.paths import REPO_ROOT  # noqa: E402

GOAL_S = {"suite": 720.0, "quick": 120.0}
SPIN = "while True: pass"


def slowest_tests(cases: list[ElementTree.Element], count: int = 25) -> list[dict[str, object]]:
    """The `count` longest tests (setup, call and teardown together): where a file's time goes."""
    timed = [(float(case.get("time", 0.0)), f"{case.get('classname', '')}::{case.get('name', '')}") for case in cases]
    return [{"test": name, "seconds": round(seconds, 1)} for seconds, name in sorted(timed, reverse=True)[:count]]


def file_times(cases: list[ElementTree.Element]) -> dict[str, dict[str, float]]:
    """Per test file: tests, failures and seconds (the JUnit report's test times summed)."""
    files: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "failed": 0, "skipped": 0, "seconds": 0.0})
    for case in cases:
        module = case.get("classname", "").split(".")  # tests.test_x (or tests.test_x.TestClass)
        name = f"{module[0]}/{module[1]}.py" if len(module) > 1 else "?"
        entry = files[name]
        entry["tests"] += 1
        entry["seconds"] += float(case.get("time", 0.0))
        entry["failed"] += any(case.find(tag) is not None for tag in ("failure", "error"))
        entry["skipped"] += case.find("skipped") is not None
    return dict(files)


def venv_environment() -> dict[str, str]:
    """This environment with the interpreter's own bin folder first on PATH, as an activated venv has it: the
    multi-node tests start nodes with the `ray` command of the Ray they import."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", action="store_true", help="keep one core busy beside the suite")
    parser.add_argument("--name", default="suite_time", help="benchmarks/results/<name>.json")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest")
    args = parser.parse_args()
    quick = any("not slow" in arg for arg in args.pytest_args)
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if args.busy else None
    try:
        with tempfile.TemporaryDirectory() as work:
            junit = Path(work) / "junit.xml"
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   f"--junitxml={junit}", *args.pytest_args], cwd=REPO_ROOT, env=venv_environment())
            wall_s = time.monotonic() - started
            cases = list(ElementTree.parse(junit).getroot().iter("testcase")) if junit.exists() else []
            files, slowest = file_times(cases), slowest_tests(cases)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    longest_first = sorted(files.items(), key=lambda kv: -kv[1]["seconds"])
    rows = [{"file": name, "tests": int(f["tests"]), "failed": int(f["failed"]), "skipped": int(f["skipped"]),
             "seconds": int(round(f["seconds"]))} for name, f in longest_first]
    goal = GOAL_S["quick" if quick else "suite"]
    extra = {"pytest_args": args.pytest_args, "busy_core": args.busy, "exit_code": done.returncode,
             "wall_s": round(wall_s, 1), "goal_s": goal, "tests": sum(r["tests"] for r in rows),
             "failed": sum(r["failed"] for r in rows), "worker_seconds": round(sum(r["seconds"] for r in rows), 1),
             "slowest_tests": slowest}
    report(args.name, ["file", "tests", "failed", "skipped", "seconds"], rows, extra)
    print(f"\nwall {wall_s:.0f} s (goal {goal:.0f} s), {extra['tests']} tests, {extra['failed']} failed, "
          f"{extra['worker_seconds']:.0f} s of worker time; exit {done.returncode}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Run `python -m runners.sweep` as a user would: to its end (`run_sweep_command`), or in a subprocess whose
output a test can wait on (`SweepProcess`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from serving.paths import REPO_ROOT
from tests.helpers import HANG_GUARD, premigrated_store, store_overrides, store_uri


def run_sweep_command(args: list[str], env: dict[str, str] | None = None,
                      timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m runners.sweep ARGS` to its end (extra `env` variables on top of this one's); it and its seconds."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runners.sweep", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return proc, time.monotonic() - started


# A shell that starts a job in the background (nohup, `cmd &`, some CI runners) ignores SIGINT in it and its children,
# and Python then installs no Ctrl-C handler: the sweep is started as `python -m` would, with Ctrl-C restored.
INTERRUPTIBLE_SWEEP = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                       "runpy.run_module('runners.sweep', run_name='__main__', alter_sys=True)")


class SweepProcess:
    def __init__(self, tmp: Path, *overrides: str, store: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        if store is None:
            premigrated_store(tmp)
        self.store = store or store_uri(tmp)
        args = [*store_overrides(tmp)[:1], f"mlflow.tracking_uri={self.store}", "report=false", HANG_GUARD, *overrides]
        self.proc = subprocess.Popen([sys.executable, "-c", INTERRUPTIBLE_SWEEP, *args], cwd=REPO_ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout_s: float = 180) -> str:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if regex.search(line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s; output:\n{self.output[-5000:]}")

    def wait(self, timeout_s: float = 300) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

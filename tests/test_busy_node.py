"""Whether a node is busy with other work before a sweep starts anything on it: its CPU measured over half a second,
and the rule that calls it busy (at least half a core, and a quarter of the node's cores)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from serving.node import busy_cores, busy_elsewhere


@pytest.mark.slow
def test_a_spinning_process_shows_as_a_busy_core() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = busy_cores(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.7  # a whole core spins, whatever else the machine does


def test_busy_takes_half_a_core_and_a_quarter_of_the_node() -> None:
    assert not busy_elsewhere(0.1, 2)  # Ray's own daemons
    assert busy_elsewhere(0.5, 2) and not busy_elsewhere(0.49, 2)
    assert not busy_elsewhere(3.9, 16) and busy_elsewhere(4.0, 16)  # a quarter of a 16-core node
    assert not busy_elsewhere(None, 2)  # not measured (no /proc/stat): nothing said

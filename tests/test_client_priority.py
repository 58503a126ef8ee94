"""The Python load generator's priority: every thread of the client's process asks for the load generators'
niceness, so a client is not starved by the servers it measures (Ray starts both at niceness 15)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Asking for a lower priority (a higher niceness) needs no privilege, so the test holds as any user; a thread started
# before the call is reniced too (Linux keeps a niceness per thread), and one started after inherits it.
SCRIPT = textwrap.dedent("""
    import os, threading
    from experiments.measure.load import take_client_priority

    def niceness_of_every_thread():
        return sorted({os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir("/proc/self/task")})

    stop = threading.Event()
    before = threading.Thread(target=stop.wait)
    before.start()
    asked = os.getpriority(os.PRIO_PROCESS, 0) + 3
    got = take_client_priority(asked)
    after = threading.Thread(target=stop.wait)
    after.start()
    print(asked, got, niceness_of_every_thread())
    stop.set()
""")


@pytest.mark.slow
def test_every_thread_of_the_client_takes_the_niceness_asked_for() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    asked, got, every = out.stdout.split(maxsplit=2)
    assert got == asked and every.strip() == f"[{asked}]", out.stdout

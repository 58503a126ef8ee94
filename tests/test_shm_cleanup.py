"""The Python backend's /dev/shm regions of a Triton killed before `stop` (a lost node's Ray workers, say) are
removed when the next Triton starts on that machine; a live server's regions are never touched."""

from __future__ import annotations

import mmap
import os
import time
import uuid
from pathlib import Path

from serving.process import unmapped_shm
from serving.triton.server import SHM_PREFIX, remove_orphan_regions

SHM = Path("/dev/shm")


def test_only_regions_no_live_process_maps_are_removed() -> None:
    tag = uuid.uuid4().hex[:8]
    live, orphan = SHM / f"{SHM_PREFIX}test{tag}_live", SHM / f"{SHM_PREFIX}test{tag}_orphan"
    young = SHM / f"{SHM_PREFIX}test{tag}_young"
    for path in (live, orphan, young):
        path.write_bytes(b"\0" * mmap.PAGESIZE)
    an_hour_ago = time.time() - 3600
    os.utime(live, (an_hour_ago, an_hour_ago))
    os.utime(orphan, (an_hour_ago, an_hour_ago))
    try:
        with live.open("r+b") as file, mmap.mmap(file.fileno(), mmap.PAGESIZE):  # as a running server maps it
            assert unmapped_shm([live.name, orphan.name]) == {orphan.name}
            remove_orphan_regions()
            assert live.exists() and not orphan.exists()
            assert young.exists(), "a region created a moment ago may belong to a server still starting"
    finally:
        for path in (live, orphan, young):
            path.unlink(missing_ok=True)

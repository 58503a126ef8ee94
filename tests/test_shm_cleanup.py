"""The Python backend's /dev/shm regions of a Triton killed before `stop` (a lost node's Ray workers, say) are
removed when the next Triton starts on that machine; a live server's regions are never touched."""

from __future__ import annotations

import mmap
import uuid
from pathlib import Path

from serving.process import unmapped_shm
from serving.triton.server import SHM_PREFIX, remove_orphan_regions

SHM = Path("/dev/shm")


def test_only_regions_no_live_process_maps_are_removed() -> None:
    tag = uuid.uuid4().hex[:8]
    live, orphan = SHM / f"{SHM_PREFIX}test{tag}_live", SHM / f"{SHM_PREFIX}test{tag}_orphan"
    live.write_bytes(b"\0" * mmap.PAGESIZE)
    orphan.write_bytes(b"\0" * mmap.PAGESIZE)
    try:
        with live.open("r+b") as file, mmap.mmap(file.fileno(), mmap.PAGESIZE):  # as a running server maps it
            assert unmapped_shm([live.name, orphan.name]) == {orphan.name}
            remove_orphan_regions()
            assert live.exists() and not orphan.exists()
    finally:
        live.unlink(missing_ok=True)
        orphan.unlink(missing_ok=True)

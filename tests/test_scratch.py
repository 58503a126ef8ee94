"""Scratch folders of servers and load engines: one left behind by a process that died (an actor killed, its node
lost) is removed by the next one made on the same host; those of live processes and of other hosts are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from serving import paths


@pytest.mark.slow
def test_a_folder_whose_process_died_is_removed_by_the_next_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid, host = int(dead.stdout), paths._host()
    orphan = tmp_path / f"tierbench-loadgen.{host}.p{dead_pid}.abc123"
    elsewhere = tmp_path / f"tierbench-loadgen.another-host.p{dead_pid}.abc123"  # a temp dir other hosts share
    live = tmp_path / f"tierbench-fastapi-resnet18.{host}.p{os.getpid()}.def456"
    foreign = tmp_path / "tierbench-ci-apt.log"
    for folder in (orphan, elsewhere, live):
        folder.mkdir()
        (folder / "stderr.txt").write_text("left behind")
    foreign.write_text("not a scratch folder")
    made = paths.scratch_dir("triton-tiny")
    assert made.is_dir() and made.name.startswith(f"tierbench-triton-tiny.{host}.p{os.getpid()}.")
    assert not orphan.exists(), "its process is gone: removed"
    assert elsewhere.exists() and live.exists() and foreign.exists()
    assert paths.remove_orphaned_scratch() == []

"""Build the compiled load engine on this node, once per source version: `cc -O2 loadgen.c` into a cache folder
(`$TIERBENCH_CACHE`, else `$XDG_CACHE_HOME/tierbench`, else ~/.cache/tierbench), named by the source's hash, so a
changed source builds anew and a node's actors share one binary. It needs a C compiler (`$CC`, cc, gcc or clang) and
libc; gRPC needs libnghttp2.so.14 at run time (loaded by the engine, so HTTP/1.1 runs without it)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from serving.paths import cache_root

SOURCE = Path(__file__).with_name("loadgen.c")
CFLAGS = ("-O2", "-std=gnu11", "-Wall")
LIBS = ("-ldl", "-lm")


class EngineUnavailable(RuntimeError):
    """The compiled engine cannot run on this node (no compiler, a failed build); the message says why and what to
    do."""


@dataclass(frozen=True)
class EngineStatus:
    """What `runners.doctor` shows and the sweep decides by: the engine's binary and version, whether it speaks
    HTTP/2 (gRPC) here, or why it cannot run at all."""

    binary: str | None
    version: str = ""
    http2: bool = False
    problem: str | None = None

    @property
    def available(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        if self.problem:
            return self.problem
        return f"{self.version} ({'HTTP/1.1 and gRPC' if self.http2 else 'HTTP/1.1 only: no libnghttp2.so.14'})"


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@functools.cache
def engine_binary() -> Path:
    """The engine for this node, built if missing. Raises EngineUnavailable with the reason."""
    source = SOURCE.read_bytes()
    cc = compiler()
    digest = hashlib.sha256(source + " ".join((*CFLAGS, *LIBS)).encode()).hexdigest()[:12]
    for folder in (cache_root(), Path(tempfile.gettempdir()) / "tierbench-cache"):
        binary = folder / f"loadgen-{digest}"
        if binary.exists():
            return binary
        if cc is None:
            raise EngineUnavailable("no C compiler on this node (set $CC, or install gcc) to build the compiled load "
                                    "engine; experiment.load_engine=python measures with the Python client instead")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue  # not writable: the next folder
        # Built under a temporary name and renamed: actors starting together never run a half-written file.
        partial = folder / f".loadgen-{digest}-{os.getpid()}"
        proc = subprocess.run([cc, *CFLAGS, "-o", str(partial), str(SOURCE), *LIBS], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            raise EngineUnavailable(f"building the compiled load engine with {cc} failed: "
                                    f"{(proc.stderr or proc.stdout).strip()[-600:]}")
        os.replace(partial, binary)
        return binary
    raise EngineUnavailable(f"no writable folder for the compiled load engine (tried {cache_root()}): set "
                            "$TIERBENCH_CACHE to one")


@functools.cache
def engine_status() -> EngineStatus:
    """Build the engine (if needed) and ask it what it speaks here."""
    try:
        binary = engine_binary()
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (EngineUnavailable, OSError, subprocess.SubprocessError) as exc:
        return EngineStatus(None, problem=str(exc))
    if proc.returncode != 0:
        return EngineStatus(str(binary), problem=f"the compiled load engine does not start: {proc.stderr.strip()}")
    words = proc.stdout.split()
    version = " ".join(words[:2])
    return EngineStatus(str(binary), version, http2="h2" in words[2:])

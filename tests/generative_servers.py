"""The OpenAI-compatible servers the generative tests measure against: the stand-in with set TTFT and ITL
(`serving.workloads.generative.standin`), and `transformers serve` on the tiny random-weight Llama, each an owned child
process on a free loopback port, stopped (with its children) when its fixture ends. A test module takes the fixtures
with `pytest_plugins = ["tests.generative_servers"]` (importing them by name trips ruff's F811).

Both servers' command lines carry names the leak checks look for (tests/processes.py, `WORKLOAD_PROCESS_NAMES`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from serving.workloads.generative.standin import StandIn

STANDIN_TTFT_MS = 40.0
STANDIN_ITL_MS = 8.0
SERVE_READY_S = 180.0  # `transformers serve` answers /health after ~15 s on this 2-core machine, longer when loaded
SERVE_STOP_S = 20.0
NO_TRANSFORMERS = "transformers is not installed: pip install -e '.[generative]' (transformers[serving], tokenizers)"


def transformers_missing() -> str | None:
    """Why `transformers serve` cannot run here (None when it can)."""
    return NO_TRANSFORMERS if importlib.util.find_spec("transformers") is None else None


class TransformersServe:
    """`transformers serve MODEL_DIR --device cpu` on a free loopback port, offline: `.url`, `.model` (the id
    /v1/models lists: the folder as given). A context manager: on exit its process group is stopped (SIGTERM, then
    SIGKILL after `SERVE_STOP_S`), its multiprocessing children with it."""

    def __init__(self, model_dir: str | Path, log_path: Path | None = None, timeout_s: float = SERVE_READY_S,
                 extra_args: Sequence[str] = ()) -> None:
        self.model = str(model_dir)
        self.log_path, self.timeout_s, self.extra_args = log_path, timeout_s, tuple(extra_args)
        self.process = None
        self.port = 0
        self._own_log: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        beside_python = Path(sys.executable).parent / "transformers"  # the venv's, though PATH may not have it
        executable = str(beside_python) if beside_python.exists() else shutil.which("transformers")
        if executable is None:
            raise RuntimeError(f"no `transformers` command beside {sys.executable} or on PATH; {NO_TRANSFORMERS}")
        return [executable, "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
                *self.extra_args]

    def __enter__(self) -> TransformersServe:
        from serving.process import free_ports, start_process, tail, wait_until

        if self.log_path is None:
            fd, self._own_log = tempfile.mkstemp(prefix="tierbench-transformers-serve-", suffix=".log")
            os.close(fd)
            self.log_path = Path(self._own_log)
        (self.port,) = free_ports(1)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.process = start_process(self.command(), self.log_path, env)
        try:
            wait_until(self._healthy, self.timeout_s, lambda: self.process.poll() is None,
                       f"transformers serve {self.model}", interval_s=0.5)
        except Exception as exc:
            self._stop()
            raise RuntimeError(f"{exc}; its log ({self.log_path}):\n{tail(self.log_path)}") from exc
        except BaseException:
            self._stop()
            raise
        return self

    def _healthy(self) -> bool:
        with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
            return response.status == 200

    def __exit__(self, *exc_info: Any) -> None:
        self._stop()
        if self._own_log:
            Path(self._own_log).unlink(missing_ok=True)

    def _stop(self) -> None:
        from serving.process import stop_process_group

        if self.process is not None:
            stop_process_group(self.process, SERVE_STOP_S)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama and its one-character-per-token tokenizer, written once per session (~1 s, after
    torch and transformers are imported)."""
    if reason := transformers_missing():
        pytest.skip(reason)
    from serving.workloads.generative.tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def transformers_serve(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersServe]:
    """`transformers serve` on the tiny Llama, one per test module (its start takes ~15 s)."""
    log = tmp_path_factory.mktemp("transformers-serve") / "serve.log"
    with TransformersServe(tiny_llama_dir, log_path=log) as server:
        yield server
    assert server.process.poll() is not None, "transformers serve is still running after its fixture ended"


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    """The stand-in at TTFT 40 ms and ITL 8 ms, serving the model `standin`, one per test module."""
    log = tmp_path_factory.mktemp("standin") / "standin.log"
    with StandIn(ttft_ms=STANDIN_TTFT_MS, itl_ms=STANDIN_ITL_MS, log_path=log) as server:
        yield server
    assert server.process.poll() is not None, "the stand-in is still running after its fixture ended"

"""The project's own OIP service (`serving.fastapi.app.create_app`, the tiny model on the CPU) as an endpoint in a
process of its own (`python -m tests.oip_server_process`), for the endpoint tests' real sweeps
(tests/test_endpoint_sweep.py, test_endpoint_kinds.py, test_caching_audit.py): `OipServerProcess` starts it on a free
loopback port and stops it, or kills it as a server that goes away. Behind `BearerAuth` with a token; with
`compute_ms`, each inference takes that much longer (`SlowModel`: a model that takes time); with `cache`, behind
`ResponseCache` (a server that caches answers)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from serving.paths import REPO_ROOT
from tests.endpoint_stubs import BearerAuth, Receive, Scope, Send, listening_socket


def tiny_service_config() -> dict[str, Any]:
    """The FastAPI service's config for the tiny model on one CPU thread (what `create_app` takes)."""
    from experiments.config.compose import load_config

    return {"model": load_config(["model=tiny"]).model.to_dict(), "device": "cpu", "torch_threads": 1,
            "options": None, "warmup_batch_sizes": [1]}


class SlowModel:
    """ASGI middleware that spends `compute_ms` before each POST reaches the app: a model whose forward pass takes
    that long (the tiny model takes next to nothing, which no cache could save)."""

    def __init__(self, app: Any, compute_ms: float) -> None:
        self.app, self.compute_s = app, compute_ms / 1e3

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            import asyncio

            await asyncio.sleep(self.compute_s)
        await self.app(scope, receive, send)


class ResponseCache:
    """ASGI middleware answering a POST whose path and body it has seen before with the answer it gave then, without
    asking the app: the cache the caching audit must catch."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answers: dict[bytes, list[dict[str, Any]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        key = hashlib.sha256(scope["path"].encode() + b"\0" + body).digest()
        if key not in self.answers:
            sent: list[dict[str, Any]] = []

            async def replay() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def keep(message: dict[str, Any]) -> None:
                sent.append(message)

            await self.app(scope, replay, keep)
            self.answers[key] = sent
        for message in self.answers[key]:
            await send(message)


class OipServerProcess:
    """`python -m tests.oip_server_process`: the tiny model's OIP service in a process of its own on a free loopback
    port; with `token_env`, behind `BearerAuth` reading the token from that variable of `env` (the process's
    environment on top of this one's). A context manager: on exit it stops the
    process (SIGTERM, then SIGKILL)."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, token_env: str | None = None,
                 cache: bool = False, compute_ms: float = 0.0) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.env = env or {}
        self.token_env = token_env
        (folder / "config.json").write_text(json.dumps(tiny_service_config()))
        self.port_file = folder / "port"
        self.log = folder / "server.log"
        self.args = ["--config", str(folder / "config.json"), "--port-file", str(self.port_file),
                     *(["--token-env", token_env] if token_env else []), *(["--cache"] if cache else []),
                     "--compute-ms", str(compute_ms)]
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OipServerProcess:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.oip_server_process", *self.args], cwd=REPO_ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        try:
            self._wait_ready(120)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.env[self.token_env]}"} if self.token_env else {}
        while True:
            assert self.proc is not None and self.proc.poll() is None, \
                f"the stand-in exited ({self.proc and self.proc.returncode}): {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the stand-in was not ready in {timeout_s} s: {self.log.read_text()}"
            if self.port_file.exists() and self.port_file.read_text().strip():
                self.port = int(self.port_file.read_text())
                request = urllib.request.Request(f"{self.url}/v2/health/ready", headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                        if response.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.2)

    def counts(self) -> dict[str, int]:
        """`BearerAuth.counts` of the running process."""
        with urllib.request.urlopen(f"{self.url}/stub/counts", timeout=10) as response:  # noqa: S310
            return json.loads(response.read())

    def kill(self) -> None:
        """Go away at once, as a crashed server or a lost node does."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve the FastAPI OIP service for `--config` (behind a bearer token from `$TOKEN_ENV` with `--token-env`);
    write the port to `--port-file` once listening."""
    import asyncio

    import uvicorn

    from serving.fastapi.app import create_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--token-env")
    parser.add_argument("--cache", action="store_true")
    parser.add_argument("--compute-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    app: Any = create_app(json.loads(Path(args.config).read_text()))
    if args.compute_ms:
        app = SlowModel(app, args.compute_ms)
    if args.cache:
        app = ResponseCache(app)
    if args.token_env:
        app = BearerAuth(app, args.token_env)
    sock = listening_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=2))

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            Path(args.port_file).write_text(str(sock.getsockname()[1]))
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()

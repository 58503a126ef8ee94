"""Stand-ins for an endpoint tierbench did not start (tests/test_endpoint.py), on loopback and free ports:

- `StubOip`: a bare ASGI app answering an Open Inference Protocol model's metadata (`/v2/models/<m>`) and readiness
  with whatever a test sets (a status, a body), keeping the Authorization header of every request it saw; served by
  uvicorn in a thread of the test's own process (`ThreadedServer`), over TLS with `self_signed_cert`'s files;
- `StubApi`: a plain HTTP API's route (kind=http), answering a POST with whatever a test sets;
- `BearerAuth`: ASGI middleware answering 401 without `Authorization: Bearer <token>` and 403 with another token;
- `OipServerProcess`: the project's own OIP service (`serving.fastapi.app.create_app`, the tiny model on the CPU)
  behind `BearerAuth`, run by uvicorn in a process of its own (`python -m tests.endpoint_stubs`), so a test can
  kill it as a server that goes away; with `compute_ms`, each inference takes that much longer (a model that takes
  time), and with `cache`, behind `ResponseCache` (a server that caches answers);
- what the endpoint tests share: the token's variable, the sweep they refuse or accept (`refusal`, `accepted`), the
  client spec they send with (`oip_spec`), the files that hold a secret (`files_holding`)."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.clients.base import ClientSpec
from serving.paths import REPO_ROOT

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# What the endpoint tests share: the token's variable, the sweep they refuse or accept, the client spec they send with.
TOKEN_ENV = "TIERBENCH_TEST_ENDPOINT_TOKEN"
ENDPOINT = ["experiment=endpoint", "model=tiny", "gpu=a100"]  # a GPU tier on this CPU box: the server is elsewhere
HTTP_CLIENT = "serving.oip.clients.OipHttpClient"
GRPC_CLIENT = "serving.oip.clients.OipGrpcClient"
# The leanest endpoint sweep: one protocol, one batch, short windows.
LEAN = ["experiment.protocols=[http]", "experiment.batch_sizes=[1]", "experiment.window_s=0.5",
        "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "experiment.stability.windows=1",
        "experiment.stability.max_windows=1"]


def oip_spec(url: str = "http://127.0.0.1:1", model: str = "tiny", **fields) -> ClientSpec:
    return ClientSpec(HTTP_CLIENT, url, model, "tensor", 1, (3, 224, 224), (1000,), **fields)


def refusal(*overrides: str) -> str:
    """The ConfigError `validate` raises for an endpoint sweep with `overrides` (AssertionError when none)."""
    with pytest.raises(ConfigError) as info:
        validate(load_config([*ENDPOINT, *overrides]))
    return str(info.value)


def accepted(*overrides: str) -> None:
    validate(load_config([*ENDPOINT, *overrides]))


URL = "backends.endpoint.url=http://10.0.0.5:8000"


def endpoint_backend(url: str, *overrides: str):
    """The endpoint entry's backend for `url` on this CPU node, as a sweep of tier a100 builds it."""
    from experiments.run.server_group import build_backend
    from tests.helpers import CPU_NODE

    return build_backend(load_config([*ENDPOINT, f"backends.endpoint.url={url}", *overrides]), "endpoint",
                         CPU_NODE, {})


def sweep_args(tmp: Path, sweep_id: str, url: str, *overrides: str) -> list[str]:
    """A lean endpoint sweep of `url` writing under `tmp` (its results, its MLflow store)."""
    from tests.helpers import premigrated_store, store_uri

    premigrated_store(tmp)
    return [*ENDPOINT, f"backends.endpoint.url={url}", *LEAN, f"results_dir={tmp / 'runs'}",
            f"mlflow.tracking_uri={store_uri(tmp)}", f"sweep_id={sweep_id}", *overrides]


def files_holding(folder: Path, secret: bytes) -> list[Path]:
    """Every file under `folder` whose bytes hold `secret`."""
    return [path for path in folder.rglob("*") if path.is_file() and secret in path.read_bytes()]


def tiny_metadata(name: str = "tiny", datatype: str = "FP32", shape: tuple[int, ...] = (-1, 3, 224, 224)) -> dict:
    """What an OIP server says of the tiny model (`GET /v2/models/tiny`), or of one that differs from it."""
    return {"name": name, "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "input", "datatype": datatype, "shape": list(shape)}],
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 1000]}]}


async def _answer(send: Send, status: int, body: bytes, content_type: str = "application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _authorization(scope: Scope) -> str | None:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"authorization"), None)


class StubOip:
    """OIP metadata and readiness: `GET /v2/models/<model>` answers `status` with `body` (default: the tiny model's
    metadata, JSON), any other model 404, `/v2/health/ready` 200. `seen`: (path, Authorization header) per request."""

    def __init__(self, model: str = "tiny", status: int = 200, body: bytes | dict | None = None) -> None:
        self.model = model
        self.status = status
        if isinstance(body, bytes):
            self.body = body
        else:
            self.body = json.dumps(tiny_metadata(model) if body is None else body).encode()
        self.seen: list[tuple[str, str | None]] = []
        self.url = ""  # where it is served (set by whoever serves it)
        self.metrics: str | None = None  # Prometheus text `GET /metrics` answers (None: 404)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: nothing to start
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope["path"]
        self.seen.append((path, _authorization(scope)))
        if path == "/v2/health/ready":
            await _answer(send, 200, b"")
        elif path == f"/v2/models/{self.model}":
            await _answer(send, self.status, self.body)
        elif path == "/metrics" and self.metrics is not None:
            await _answer(send, 200, self.metrics.encode(), "text/plain")
        else:
            await _answer(send, 404, json.dumps({"error": f"no model at {path}"}).encode())


class StubApi:
    """A plain HTTP API's route: a POST to `path` answers `status` with `body`, any other path 404, another method
    405 (as FastAPI does). `seen`: (method, path, Authorization header) per request."""

    def __init__(self, path: str = "/predict", status: int = 422, body: bytes = b'{"detail": "no body"}') -> None:
        self.path, self.status, self.body = path, status, body
        self.seen: list[tuple[str, str, str | None]] = []
        self.url = ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await StubOip()(scope, receive, send)  # the lifespan, as the OIP stand-in answers it
        self.seen.append((scope["method"], scope["path"], _authorization(scope)))
        if scope["path"] != self.path:
            await _answer(send, 404, b'{"detail": "Not Found"}')
        elif scope["method"] != "POST":
            await _answer(send, 405, b'{"detail": "Method Not Allowed"}')
        else:
            await _answer(send, self.status, self.body)


class BearerAuth:
    """`app` behind a bearer token read from `$token_env`: 401 without an Authorization header, 403 with another
    token (the token itself is never echoed). `counts`: requests let through, refused without a token, refused
    with a wrong one; `GET /stub/counts` answers them (unguarded: the test reads them from its own process)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token_env: str) -> None:
        self.app = app
        self.expected = f"Bearer {os.environ[token_env]}"
        self.counts = {"authorized": 0, "missing": 0, "wrong": 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == "/stub/counts":
                return await _answer(send, 200, json.dumps(self.counts).encode())
            given = _authorization(scope)
            if given is None:
                self.counts["missing"] += 1
                return await _answer(send, 401, b'{"error": "missing bearer token"}')
            if given != self.expected:
                self.counts["wrong"] += 1
                return await _answer(send, 403, b'{"error": "wrong bearer token"}')
            self.counts["authorized"] += 1
        await self.app(scope, receive, send)


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for 127.0.0.1 and localhost, and its key: the `cryptography` package
    where installed, else the openssl command."""
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "2", "-subj", "/CN=tierbench-test", "-keyout", str(key_path), "-out",
                        str(cert_path), "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-addext", "basicConstraints=critical,CA:TRUE"], check=True, capture_output=True)
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tierbench-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _listening_socket() -> socket.socket:
    """A socket bound to a free loopback port (the server takes it: no race for the port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadedServer:
    """uvicorn serving `app` in a thread of this process on a free loopback port (TLS with `certfile`/`keyfile`;
    mutual TLS, a client certificate signed by `client_ca` required, with that too); a context manager that stops
    it on exit."""

    def __init__(self, app: Any, certfile: Path | None = None, keyfile: Path | None = None,
                 client_ca: Path | None = None) -> None:
        import ssl

        import uvicorn

        self._socket = _listening_socket()
        self.port = self._socket.getsockname()[1]
        self.scheme = "https" if certfile else "http"
        mutual = {"ssl_ca_certs": str(client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED} if client_ca else {}
        config = uvicorn.Config(app, log_level="critical", access_log=False, lifespan="on",
                                ssl_certfile=str(certfile) if certfile else None,
                                ssl_keyfile=str(keyfile) if keyfile else None, timeout_graceful_shutdown=2,
                                **mutual)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self._thread.is_alive(), "the stand-in's uvicorn stopped while starting"
            assert time.monotonic() < deadline, "the stand-in's uvicorn did not start within 30 s"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
        assert not self._thread.is_alive(), "the stand-in's uvicorn did not stop within 10 s"


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
    """`python -m tests.endpoint_stubs`: the tiny model's OIP service in a process of its own on a free loopback
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
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.endpoint_stubs", *self.args], cwd=REPO_ROOT,
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
    sock = _listening_socket()
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

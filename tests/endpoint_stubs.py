"""Stand-ins for an endpoint tierbench did not start (tests/test_endpoint.py, test_endpoint_kinds.py,
test_errors_sweep.py), served in the test's own process on loopback and free ports:

- `StubOip`: a bare ASGI app answering an Open Inference Protocol model's metadata (`/v2/models/<m>`) and readiness
  with whatever a test sets (a status, a body), keeping the Authorization header of every request it saw;
- `StubApi`: a plain HTTP API's route (kind=http), answering a POST with whatever a test sets;
- `BearerAuth`: ASGI middleware answering 401 without `Authorization: Bearer <token>` and 403 with another token
  (tests/oip_server_process.py puts the project's own service behind it too);
- `ThreadedServer`: uvicorn serving one of them in a thread, over TLS with `self_signed_cert`'s files; `closed_port`,
  a port nothing listens on."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


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


def listening_socket() -> socket.socket:
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

        self._socket = listening_socket()
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

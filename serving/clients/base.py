"""Async inference clients: one implementation per (server, protocol), chosen by `ClientSpec.target`, living with
its server (`serving/<backend>/`); what they all share lives here (the spec, the payloads, the Server-Timing parse).

A client actor opens one client and shares it among its concurrent request loops (one event loop: the
aio clients are safe there; they are not thread-safe). The request payload is built once, so load
generation measures the server and the transport, not payload construction.
"""

from __future__ import annotations

import base64
import os
import ssl
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from serving.clients.wire import WireRequest
from serving.images import sample_jpegs


@dataclass(frozen=True)
class ClientSpec:
    target: str  # import path of the InferenceClient subclass
    url: str
    model_name: str
    input_format: str  # InputFormat: tensor | jpeg
    batch_size: int
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]  # per image: a classifier's (num_classes,), or any other output's dims
    input_name: str = "input"
    output_name: str = "logits"
    timeout_s: float = 60.0
    # gRPC metadata every call carries (Ray Serve's proxy routes by its `application` key).
    grpc_metadata: tuple[tuple[str, str], ...] = ()
    # A server tierbench did not start (an endpoint): TLS (https, or gRPC over TLS), verified against the system's
    # CAs or `ca_file`, with a client certificate and key (`client_cert`, `client_key`: files) where it asks for
    # one; a bearer token (`token_env`) or `user:password` (`basic_auth_env`) read from an environment variable on
    # the client's node when the client opens: the spec, which is logged and shipped, holds names, never secrets.
    tls: bool = False
    ca_file: str = ""
    token_env: str = ""
    basic_auth_env: str = ""
    client_cert: str = ""
    client_key: str = ""


def _secret(variable: str, setting: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        raise RuntimeError(f"the environment variable {variable} (the endpoint's {setting}) is not set on the "
                           "client's node: export it there before the sweep starts")
    return value


def bearer_token(spec: ClientSpec) -> str | None:
    """The token in `spec.token_env` (None when the spec names none); raises naming the variable when it is unset."""
    return _secret(spec.token_env, "token_env") if spec.token_env else None


def authorization(spec: ClientSpec) -> str | None:
    """The `Authorization` value of every request (HTTP header, gRPC metadata): `Bearer <token>`, `Basic
    <base64 user:password>`, or None without credentials."""
    token = bearer_token(spec)
    if token:
        return f"Bearer {token}"
    if spec.basic_auth_env:
        user_password = _secret(spec.basic_auth_env, "basic_auth_env")
        return f"Basic {base64.b64encode(user_password.encode()).decode('ascii')}"
    return None


def auth_headers(spec: ClientSpec) -> dict[str, str]:
    """The HTTP headers that authenticate a request (empty without credentials)."""
    value = authorization(spec)
    return {"Authorization": value} if value else {}


def tls_context(spec: ClientSpec) -> ssl.SSLContext | None:
    """A verifying TLS context for `spec` (the system's CAs, or `ca_file`; the client certificate where it has
    one); None for plain TCP."""
    if not spec.tls:
        return None
    context = ssl.create_default_context(cafile=spec.ca_file or None)
    if spec.client_cert:
        context.load_cert_chain(spec.client_cert, spec.client_key or None)
    return context


def grpc_credentials(spec: ClientSpec):
    """`grpc.ssl_channel_credentials` for a TLS spec: its CA (or the system's), its client certificate and key."""
    import grpc

    def read(path: str) -> bytes | None:
        return open(path, "rb").read() if path else None  # noqa: SIM115 - a few KB, read once per channel

    return grpc.ssl_channel_credentials(read(spec.ca_file), read(spec.client_key or spec.client_cert),
                                        read(spec.client_cert))


def tensor_batch(spec: ClientSpec, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((spec.batch_size, *spec.input_shape), dtype=np.float32)


def jpeg_batch(spec: ClientSpec) -> list[bytes]:
    images = sample_jpegs()
    return [images[i % len(images)] for i in range(spec.batch_size)]


# The header (gRPC: trailing metadata, lower case) in which a server of ours reports its own time per request.
TIMING_HEADER = "Server-Timing"


class ServerReport(NamedTuple):
    """What a server said about one request: its own processing time, and the images of the forward pass the
    request rode in (more than the request's own when a server-side batcher merged it with others)."""

    ms: float
    executed_images: int | None = None


def parse_server_timing(header: str | None) -> ServerReport | None:
    """The server's own time (ms: the total of the `dur`s) and executed batch (`batch;desc=N`) from a
    `Server-Timing: preprocess;dur=1.2, infer;dur=8.5, batch;desc=8` header (Ray Serve's replica sends it, over
    gRPC as trailing metadata); None without one."""
    if not header:
        return None
    total, executed = 0.0, None
    for metric in header.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if key == "dur":
                total += float(value)
            elif key == "desc" and name == "batch":
                executed = int(value)
    return ServerReport(total, executed)


class InferenceClient(ABC):
    """Sends one request of `spec.batch_size` images per `infer()` call; the payload is the same every time
    (`tensor_batch` / `jpeg_batch`), so `predict()` output can be checked against a reference."""

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec

    @property
    @abstractmethod
    def payload_bytes(self) -> int:
        """Bytes of input data one request carries (encoded images or raw tensor)."""

    @abstractmethod
    async def open(self) -> None:
        """Create connections; called inside the event loop that will send the requests."""

    @abstractmethod
    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        """Send one request; returns the outputs [batch, *output_shape] (a classifier's logits) and what the server
        reported about it (Ray Serve's replica time and executed batch; None when it reports nothing per request).
        Raises on any error."""

    async def predict(self) -> np.ndarray:
        """The logits of one request (for the cross-check against the reference)."""
        return (await self.call())[0]

    async def infer(self) -> ServerReport | None:
        """One request of the load: checks the response's shape; returns what the server reported."""
        logits, report = await self.call()
        self.check_logits(logits)
        return report

    @abstractmethod
    async def close(self) -> None:
        """Close connections."""

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        """Why the compiled load engine cannot send this client's requests for `spec`; None when it can
        (`wire_request`, `check_wire_response`)."""
        return f"{cls.__name__} has no fixed request bytes for the compiled engine to send"

    def wire_request(self) -> WireRequest:
        """This client's request as it crosses the socket, built once by its own code (the compiled engine sends it)."""
        raise NotImplementedError(self.wire_unsupported(self.spec))

    def check_wire_response(self, body: bytes) -> None:
        """Check a response body the compiled engine received for `wire_request` (the HTTP body, or the gRPC
        call's DATA): it parses, and its outputs have the expected shape. Raises on anything else."""
        raise NotImplementedError(self.wire_unsupported(self.spec))

    def check_logits(self, logits: np.ndarray) -> None:
        expected = (self.spec.batch_size, *self.spec.output_shape)
        if tuple(logits.shape) != expected:
            raise ValueError(f"response has shape {tuple(logits.shape)}, expected {expected}")


class PrebuiltRequestClient(InferenceClient):
    """A client whose request is the same bytes on every call, built once by its own code (`_request_bytes`), as
    its transport sends them (`serving.clients.http_client`, `serving.clients.grpc_client`): the compiled load engine
    can send them too (over plain TCP: a TLS endpoint is measured by the Python client)."""

    @abstractmethod
    def _request_bytes(self) -> bytes:
        """The request as the transport sends it (HTTP: head and body; gRPC: the serialized message)."""

    @abstractmethod
    def response_outputs(self, response: Any) -> np.ndarray:
        """The outputs [batch, *output_shape] an answer carries (HTTP: a 200 response; gRPC: the response message)."""

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        if spec.tls:
            return "the compiled engine speaks plain TCP, and this endpoint TLS"
        return None


def load_client(spec: ClientSpec) -> InferenceClient:
    from hydra.utils import get_class

    return get_class(spec.target)(spec)

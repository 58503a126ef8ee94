"""Async inference clients: one implementation per (server, protocol), chosen by `ClientSpec.target`, living with
its server (`serving/<backend>/`); what they all share lives here (the spec, the payloads, the Server-Timing parse).

A client actor opens one client and shares it among its concurrent request loops (one event loop: the
aio clients are safe there; they are not thread-safe). Its requests are built once, before the load, so load
generation measures the server and the transport, not payload construction: a pool of distinct requests
(`request_pool`: consecutive images of the input corpus, `serving.workloads.image.corpus`, bounded by
`InputSource.pool_mib`), sent in turn, so that no two requests in a window carry the same bytes unless the window
sends more than the pool holds.
"""

from __future__ import annotations

import base64
import math
import os
import ssl
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from serving.clients.wire import WireRequest
from serving.workloads.image.corpus import InputSource, RequestInputs, request_pool

if TYPE_CHECKING:
    from serving.workloads.generative.prompts import PromptSource


@dataclass(frozen=True)
class ClientSpec:
    target: str  # import path of the InferenceClient subclass
    url: str
    model_name: str
    input_format: str  # InputFormat: tensor | jpeg | jpeg_base64
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
    # What the requests carry (images: serving.workloads.image.corpus; conversations: a generative workload's
    # PromptSource), and how an encoded image becomes the model's tensor (the model's
    # serving.workloads.image.preprocessing.Preprocessing as JSON; "": the default) for `tensor` requests.
    inputs: InputSource | PromptSource = field(default_factory=InputSource)
    preprocessing: str = ""


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


def tensor_batch(spec: ClientSpec) -> np.ndarray:
    """The tensor of the first request a `tensor` client of `spec` sends (the cross-check's reference is fed it)."""
    return request_pool(replace(spec, input_format="tensor"), limit=1)[0].tensor


def jpeg_batch(spec: ClientSpec) -> list[bytes]:
    """The encoded images of the first request a `jpeg` or `jpeg_base64` client of `spec` sends."""
    return list(request_pool(replace(spec, input_format="jpeg"), limit=1)[0].images)


# The header (gRPC: trailing metadata, lower case) in which a server of ours reports its own time per request.
TIMING_HEADER = "Server-Timing"


class ServerReport(NamedTuple):
    """What a server said about one request: its own processing time, the images of the forward pass the request
    rode in (more than the request's own when a server-side batcher merged it with others), and of its time, how
    long it waited for that pass (None where the server does not say).

    A client that reads its answer as it streams also says when the answer's last byte came (`answered_after_s`,
    seconds after it sent the request: the request ends there, not after the work the client does on the answer,
    such as counting its tokens) and what its workload records of the request (`detail`: a generative request's
    `TokenTrace`)."""

    ms: float
    executed_images: int | None = None
    queue_ms: float | None = None
    answered_after_s: float | None = None
    detail: Any = None


def parse_server_timing(header: str | None) -> ServerReport | None:
    """The server's own time (ms: the total of the `dur`s), its wait (`queue;dur`) and executed batch
    (`batch;desc=N`) from a `Server-Timing: preprocess;dur=1.2, queue;dur=3.0, infer;dur=8.5, batch;desc=8` header
    (Ray Serve's replica sends it, over gRPC as trailing metadata); None without one."""
    if not header:
        return None
    total, executed, queue = 0.0, None, None
    for metric in header.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if key == "dur":
                total += float(value)
                if name == "queue":
                    queue = float(value)
            elif key == "desc" and name == "batch":
                executed = int(value)
    return ServerReport(total, executed, queue)


class PoolStats(NamedTuple):
    """What a client's requests carry: its distinct requests and images, and their payload (bytes of image data:
    the tensor, the encoded files, or their base64 text) per request and per image."""

    distinct_requests: int
    distinct_images: int
    bytes_per_request: float  # the mean over the pool, sent in turn: the window's mean
    bytes_per_image: tuple[float, float, float, float]  # mean, median, least, most

    def metrics(self) -> dict[str, float]:
        mean, p50, least, most = self.bytes_per_image
        return {"distinct_requests": float(self.distinct_requests), "distinct_images": float(self.distinct_images),
                "payload_bytes": self.bytes_per_request, "payload_bytes_per_image": mean,
                "payload_image_bytes_p50": p50, "payload_image_bytes_min": least, "payload_image_bytes_max": most}


def payload_sizes(inputs: RequestInputs, input_format: str) -> list[int]:
    """Bytes each image of a request puts on the wire: its tensor, its encoded file, or that file as base64."""
    if inputs.images is None:
        return [inputs.tensor[0].nbytes] * len(inputs.tensor)
    if input_format == "jpeg_base64":
        return [4 * math.ceil(len(image) / 3) for image in inputs.images]
    return [len(image) for image in inputs.images]


class InferenceClient(ABC):
    """Sends one request of `spec.batch_size` images per `infer()` call, the requests of its pool (`request_pool`)
    in turn; `predict(index)` sends one chosen request (the cross-check compares its outputs with the reference's
    for the same inputs)."""

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        self._next = 0

    @cached_property
    def pool(self) -> list[RequestInputs]:
        """The distinct requests' inputs, built once (the corpus is read, and for tensors preprocessed, on first
        use on the node)."""
        return request_pool(self.spec)

    def start_at(self, share: float) -> None:
        """Begin the pool at `share` of its length (0..1), so that client actors sharing a load, each with the same
        pool, send different requests at the same time."""
        offset = int(share * len(self.pool)) % len(self.pool)
        self.pool[:] = self.pool[offset:] + self.pool[:offset]

    @property
    def pool_stats(self) -> PoolStats:
        sizes = [payload_sizes(inputs, self.spec.input_format) for inputs in self.pool]
        per_image = np.array([size for request in sizes for size in request], dtype=np.float64)
        images = {i for inputs in self.pool for i in inputs.indices}
        return PoolStats(len(self.pool), len(images) or len(self.pool) * self.spec.batch_size,
                         float(np.mean([sum(request) for request in sizes])),
                         (float(per_image.mean()), float(np.median(per_image)), float(per_image.min()),
                          float(per_image.max())))

    @property
    def payload_bytes(self) -> int:
        """Bytes of image data the first request carries (encoded images or raw tensor)."""
        return sum(payload_sizes(self.pool[0], self.spec.input_format))

    @abstractmethod
    async def open(self) -> None:
        """Create connections; called inside the event loop that will send the requests."""

    @abstractmethod
    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        """Send request `index` of the pool; returns the outputs [batch, *output_shape] (a classifier's logits) and
        what the server reported about it (Ray Serve's replica time and executed batch; None when it reports
        nothing per request). Raises on any error."""

    async def predict(self, index: int = 0) -> np.ndarray:
        """The outputs of request `index` (for the cross-check against the reference)."""
        return (await self.call(index))[0]

    async def infer(self) -> ServerReport | None:
        """One request of the load, the pool's next: checks the response's shape; returns what the server
        reported."""
        index, self._next = self._next, (self._next + 1) % len(self.pool)
        logits, report = await self.call(index)
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

    async def open_wire(self, max_in_flight: int) -> None:
        """Prepare on the server what the compiled engine's requests will name, before `wire_request` builds them
        (Triton's shared-memory regions, one output region for each of up to `max_in_flight` requests); most
        requests name nothing, so by default nothing. `close()` undoes it."""
        return None

    def wire_request(self) -> WireRequest:
        """This client's request as it crosses the socket, built once by its own code (the compiled engine sends it)."""
        raise NotImplementedError(self.wire_unsupported(self.spec))

    def check_wire_response(self, body: bytes) -> None:
        """Check a response body the compiled engine received for `wire_request` (the HTTP body, or the gRPC
        call's DATA): it parses, and its outputs have the expected shape. Raises on anything else."""
        raise NotImplementedError(self.wire_unsupported(self.spec))

    def check_logits(self, logits: np.ndarray) -> None:
        self.check_output_shape(tuple(logits.shape))

    def check_output_shape(self, shape: tuple[int, ...]) -> None:
        expected = (self.spec.batch_size, *self.spec.output_shape)
        if tuple(shape) != expected:
            raise ValueError(f"response has shape {tuple(shape)}, expected {expected}")


class PrebuiltRequestClient(InferenceClient):
    """A client whose requests are bytes built once by its own code (`_request_bytes`, one per request of the pool),
    as its transport sends them (`serving.clients.http_client`, `serving.clients.grpc_client`): the compiled load
    engine can send them too (over plain TCP: a TLS endpoint is measured by the Python client)."""

    @abstractmethod
    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        """The request carrying `inputs` as the transport sends it (HTTP: head and body; gRPC: the serialized
        message)."""

    def _all_request_bytes(self) -> list[bytes]:
        return [self._request_bytes(inputs) for inputs in self.pool]

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

"""What tierbench asks a running endpoint before any trial (standard library only): is it there, does it let us in,
does it serve the model we think, with which tensors, and how far away is it (the network's own round trip, so a
WAN's latency is not taken for the server's)."""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from serving.clients.base import ClientSpec, auth_headers, tls_context

RTT_REQUESTS = 20  # small requests timed for the round trip


class EndpointError(RuntimeError):
    """The endpoint cannot be measured as configured; the message names the setting and the fix."""


@dataclass(frozen=True)
class OipModel:
    """An Open Inference Protocol model's metadata: its first input and output."""

    name: str
    platform: str
    versions: tuple[str, ...]
    input_name: str
    input_datatype: str
    input_shape: tuple[int, ...]  # as the server states it: -1 for a variable dimension
    output_name: str
    output_datatype: str


def _send(url: str, spec: ClientSpec, timeout_s: float, method: str, body: bytes | None = None) -> tuple[int, bytes]:
    headers = auth_headers(spec)
    if body is not None:
        headers["Content-Type"] = "application/json"
    data = body if body is not None else (b"" if method == "POST" else None)  # empty: a route's or model's presence
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=tls_context(spec)) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def fetch(url: str, spec: ClientSpec, name: str, timeout_s: float, method: str = "GET",
          body: bytes | None = None) -> tuple[int, bytes]:
    """`method` (GET, OPTIONS, or a POST: empty, or of a JSON `body`) `url`; an unreachable host, a refused connection
    or a failed TLS handshake raise EndpointError naming `backends.<name>.url`."""
    try:
        return _send(url, spec, timeout_s, method, body)
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):  # a failed verification among them
            raise EndpointError(f"backends.{name}.url: the TLS handshake with {url} failed ({reason}): give the "
                                f"CA that signed its certificate with backends.{name}.ca_file=PATH, and where "
                                f"the server asks for a client certificate, backends.{name}.client_cert=PATH and "
                                f"backends.{name}.client_key=PATH") from None
        raise EndpointError(f"backends.{name}.url: cannot reach {url} ({reason}): check the address and port, "
                            "and that the server runs and this machine may connect to it") from None
    except (http.client.RemoteDisconnected, ssl.SSLError) as exc:
        if spec.tls and not spec.client_cert:  # TLS 1.3: a server that wants a client certificate hangs up after
            raise EndpointError(f"backends.{name}.url: {url} closed the TLS connection without answering "
                                f"({type(exc).__name__}); where the server asks for a client certificate (mutual "
                                f"TLS), give it with backends.{name}.client_cert=PATH and "
                                f"backends.{name}.client_key=PATH") from None
        raise EndpointError(f"backends.{name}.url: {url} closed the connection without answering "
                            f"({type(exc).__name__}): is it the endpoint's HTTP port (its gRPC port goes in "
                            f"backends.{name}.grpc_url)?") from None
    except http.client.HTTPException as exc:  # an answer that is not HTTP/1.x, e.g. the gRPC port's
        raise EndpointError(f"backends.{name}.url: {url} does not answer HTTP/1.1 ({type(exc).__name__}): is it "
                            f"the endpoint's HTTP port (its gRPC port goes in backends.{name}.grpc_url)?") from None
    except (TimeoutError, OSError) as exc:
        raise EndpointError(f"backends.{name}.url: {url} did not answer within {timeout_s:g} s ({exc}): check the "
                            f"address, or raise backends.{name}.probe_timeout_s") from None


def refused(status: int, name: str, spec: ClientSpec, base_url: str) -> None:
    """EndpointError saying how to authenticate when the endpoint answered 401 or 403; nothing otherwise."""
    if status not in (401, 403):
        return
    if spec.token_env:
        fix = f"check the token in ${spec.token_env} (backends.{name}.token_env)"
    elif spec.basic_auth_env:
        fix = f"check the user:password in ${spec.basic_auth_env} (backends.{name}.basic_auth_env)"
    else:
        fix = (f"put a bearer token in an environment variable and name it with backends.{name}.token_env=VARIABLE "
               f"(or user:password with backends.{name}.basic_auth_env=VARIABLE)")
    raise EndpointError(f"backends.{name}: {base_url} answered {status} "
                        f"({'unauthorized' if status == 401 else 'forbidden'}) for model {spec.model_name!r}: {fix}")


def oip_model(base_url: str, spec: ClientSpec, name: str, timeout_s: float) -> OipModel:
    """The model's metadata (`GET /v2/models/<model>`), refusing what cannot be measured with a message naming the
    setting and the fix."""
    url = f"{base_url.rstrip('/')}/v2/models/{spec.model_name}"
    status, body = fetch(url, spec, name, timeout_s)
    refused(status, name, spec, base_url)
    if status == 404:
        raise EndpointError(f"backends.{name}.model_name={spec.model_name!r}: {base_url} serves no model "
                            f"of that name (404 on /v2/models/{spec.model_name}): give its name there with "
                            f"backends.{name}.model_name=NAME")
    if status != 200:
        raise EndpointError(f"backends.{name}: {url} answered HTTP {status} "
                            f"({body[:200].decode(errors='replace')!r}): is it an Open Inference Protocol server "
                            f"(backends.{name}.kind=oip)?")
    try:
        meta: dict[str, Any] = json.loads(body)
        first_in, first_out = meta["inputs"][0], meta["outputs"][0]
        return OipModel(name=str(meta.get("name", spec.model_name)), platform=str(meta.get("platform", "")),
                        versions=tuple(str(v) for v in meta.get("versions", [])),
                        input_name=str(first_in["name"]), input_datatype=str(first_in["datatype"]),
                        input_shape=tuple(int(d) for d in first_in["shape"]),
                        output_name=str(first_out["name"]), output_datatype=str(first_out["datatype"]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EndpointError(f"backends.{name}: {url} answered 200 but not with Open Inference Protocol "
                            f"model metadata ({type(exc).__name__}: {exc}): is backends.{name}.kind right?") from None


def metadata_problem(meta: OipModel, input_shape: tuple[int, ...], name: str,
                     input_formats: tuple[str, ...] = ("tensor",)) -> str | None:
    """Why the endpoint's model does not take the sweep's requests of `input_formats` (tensor: FP32
    [batch, *input_shape]; jpeg: BYTES [batch, 1], one encoded image each); None when it does."""
    takes = {"FP32": "tensor", "BYTES": "jpeg"}.get(meta.input_datatype)
    if takes is None:
        return (f"backends.{name}: the endpoint's model {meta.name!r} takes {meta.input_datatype} input "
                f"{meta.input_name!r}; tierbench sends FP32 tensors or JPEG files as BYTES: serve a model that "
                "takes one of them")
    others = [f for f in input_formats if f != takes]
    if others:
        return (f"backends.{name}: the endpoint's model {meta.name!r} takes {meta.input_datatype} input "
                f"{meta.input_name!r}, which is input format {takes}; the sweep also sends {', '.join(others)}: "
                f"set experiment.input_formats=[{takes}], or add an entry for the model that takes the others")
    if meta.output_datatype != "FP32":
        return (f"backends.{name}: the endpoint's model {meta.name!r} answers {meta.output_datatype} output "
                f"{meta.output_name!r}; tierbench reads FP32 outputs")
    if takes == "jpeg":
        return None if meta.input_shape in ((-1, 1), (1,), (-1,)) else (
            f"backends.{name}: the endpoint's model {meta.name!r} takes BYTES input {meta.input_name!r} of shape "
            f"{list(meta.input_shape)}; tierbench sends one JPEG per image, [batch, 1]")
    dims = meta.input_shape[1:] if len(meta.input_shape) == len(input_shape) + 1 else meta.input_shape
    if len(dims) != len(input_shape) or any(d not in (-1, want) for d, want in zip(dims, input_shape, strict=True)):
        return (f"backends.{name}: the endpoint's model {meta.name!r} takes input {meta.input_name!r} of shape "
                f"{list(meta.input_shape)}, and model.input_shape is {list(input_shape)} (with a batch dimension "
                "first): choose the model config it serves (model=...), or model.input_shape=[...]")
    return None


def round_trip_ms(base_url: str, spec: ClientSpec, name: str, timeout_s: float, path: str = "/v2/health/ready",
                  requests: int = RTT_REQUESTS) -> float:
    """The p50 of `requests` small GETs of `path` under the URL (a health check; whatever its status) on one
    kept-alive connection, after a first that opens it: the network's and HTTP's own round trip to the endpoint,
    without connection setup."""
    parts = urlsplit(base_url)
    path = f"{parts.path.rstrip('/')}{path}" or "/"
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout_s, context=tls_context(spec))
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    headers = auth_headers(spec)
    times = []
    try:
        for _ in range(requests + 1):
            start = time.perf_counter()
            connection.request("GET", path, headers=headers)
            connection.getresponse().read()
            times.append((time.perf_counter() - start) * 1000.0)
    except (OSError, http.client.HTTPException) as exc:
        raise EndpointError(f"backends.{name}.url: timing the round trip to {base_url} failed ({exc})"
                            ) from None
    finally:
        connection.close()
    return statistics.median(times[1:])

"""What every inference client over HTTP/1.1 shares (the Open Inference Protocol's, TorchServe's REST one, the JSON
API's): its requests built once by its own code (one per request of its pool) and sent as those bytes by the
project's HTTP/1.1 client (`serving.clients.http1`), a 200's body read for the outputs and its `Server-Timing`
header for what the server reported."""

from __future__ import annotations

import numpy as np

from serving.clients.base import (
    TIMING_HEADER,
    PrebuiltRequestClient,
    ServerReport,
    auth_headers,
    parse_server_timing,
    tls_context,
)
from serving.clients.http1 import Http1Client, build_request
from serving.clients.outcomes import Outcome, RequestError
from serving.clients.wire import WireRequest, http1_wire


class HttpInferenceClient(PrebuiltRequestClient):
    """POSTs `_request_bytes(inputs)` (head and body, `serving.clients.http1.build_request`) to `url`; subclasses
    build the requests and read a 200 response's outputs (`response_outputs`)."""

    _http: Http1Client | None = None

    @property
    def url(self) -> str:
        """Where the requests go: `spec.url`, over http:// (https:// for a TLS spec) when it names no scheme."""
        return self.spec.url if "://" in self.spec.url else f"{'https' if self.spec.tls else 'http'}://{self.spec.url}"

    def _post(self, body: bytes, headers: dict[str, str]) -> bytes:
        """A POST of `body` to `url` with `headers` and the spec's credentials (an endpoint's), as the transport
        sends it."""
        return build_request("POST", self.url, body, {**headers, **auth_headers(self.spec)})

    def wire_request(self) -> WireRequest:
        return http1_wire(self.url, self._all_request_bytes())

    async def open(self) -> None:
        self._requests = self._all_request_bytes()
        self._http = Http1Client(self.url, self.spec.timeout_s, tls_context(self.spec))

    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._http.send(self._requests[index])
        if response.status != 200:
            raise RequestError(Outcome.HTTP_STATUS, response.status,
                               f"HTTP {response.status}: {response.body[:300].decode(errors='replace')}")
        return self.response_outputs(response), parse_server_timing(response.headers.get(TIMING_HEADER.lower()))

    async def close(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

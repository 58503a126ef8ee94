"""Triton over HTTP/REST with binary tensors: through the socket, tritonclient's request body built once and
sent as pre-built bytes by the project's HTTP/1.1 client (`http1.py`); through shared memory,
`tritonclient.http.aio`.

Binary tensors, not JSON (JSON tensors were ~50x slower and would measure the encoder). `tritonclient.http.aio`
rebuilds the ~600 KB body on every call; the prepared body comes from tritonclient's own
`generate_request_body`, the reply's binary output is read in place (`binary_output`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from serving.clients.base import ServerReport, parse_server_timing
from serving.clients.http1 import Http1Client, build_request
from serving.clients.triton_base import TritonClient
from serving.clients.wire import WireRequest, http1_wire

HEADER_LENGTH = "Inference-Header-Content-Length"
TIMING_HEADER = "server-timing"  # Ray Serve's replica answers with it; Triton does not


def binary_output(body: bytes, header_length: str | None, name: str) -> np.ndarray:
    """Output `name` of a binary-data response: its JSON header, then each output's bytes in order. ~9 µs, where
    tritonclient's `parse_response_body(...).as_numpy` takes ~75 µs (an `InferResult` per response)."""
    if header_length is None:
        raise RuntimeError(f"Triton answered without {HEADER_LENGTH}: the outputs are not binary data")
    header = json.loads(body[:int(header_length)])
    offset = int(header_length)
    for output in header["outputs"]:
        size = output.get("parameters", {}).get("binary_data_size", 0)
        if output["name"] == name:
            if output["datatype"] != "FP32":
                raise RuntimeError(f"output {name} is {output['datatype']}, expected FP32")
            return np.frombuffer(body, np.float32, size // 4, offset).reshape(output["shape"])
        offset += size
    raise RuntimeError(f"Triton's response has no output {name!r}: {[o['name'] for o in header['outputs']]}")


class TritonHttpClient(TritonClient):
    _http: Http1Client | None = None

    def _connect(self) -> Any:
        import tritonclient.http.aio as http_aio

        return http_aio.InferenceServerClient(self.spec.url, conn_timeout=self.spec.timeout_s)

    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        import tritonclient.http as http

        return http.InferInput(name, shape, datatype)

    def _set_input_data(self, infer_input: Any, data: np.ndarray) -> None:
        infer_input.set_data_from_numpy(data, binary_data=True)

    def _requested_output(self, name: str) -> Any:
        import tritonclient.http as http

        return http.InferRequestedOutput(name, binary_data=True)

    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in result.get_output(name)["shape"])

    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any:
        return await self._client.infer(self.spec.model_name, inputs, outputs=outputs)

    @property
    def _infer_url(self) -> str:
        """`spec.url` is the server's host:port (Triton), or a URL with a path the OIP lives under (Ray Serve's
        route prefix)."""
        base = self.spec.url if "://" in self.spec.url else f"http://{self.spec.url}"
        return f"{base.rstrip('/')}/v2/models/{self.spec.model_name}/infer"

    def _request_bytes(self) -> bytes:
        """The request, head and body: tritonclient's own body with the binary tensor extension."""
        import tritonclient.http as http

        body, json_size = http.InferenceServerClient.generate_request_body(self._inputs, outputs=self._outputs)
        headers = {"Content-Type": "application/octet-stream"}
        if json_size is not None:
            headers[HEADER_LENGTH] = str(json_size)
        return build_request("POST", self._infer_url, body, headers)

    async def _open_prepared(self) -> None:
        self._request = self._request_bytes()
        self._http = Http1Client(self._infer_url, self.spec.timeout_s)

    def wire_request(self) -> WireRequest:
        self._prepare_inputs()
        return http1_wire(self._infer_url, self._request_bytes())

    def check_wire_response(self, body: bytes) -> None:
        """A binary-data response's body starts with its JSON header; its length is where the JSON ends."""
        _, header_length = json.JSONDecoder().raw_decode(body.decode("latin-1"))
        self.check_logits(binary_output(body, str(header_length), self.spec.output_name))

    async def _send_prepared(self) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._http.send(self._request)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.body[:300].decode(errors='replace')}")
        logits = binary_output(response.body, response.headers.get(HEADER_LENGTH.lower()), self.spec.output_name)
        return logits, parse_server_timing(response.headers.get(TIMING_HEADER))

    async def _close_prepared(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

"""A JSON API taking base64 JPEGs (`jpeg_base64`): what most teams run first, and what the studies measured (the
5-way study's FastAPI baseline; the TorchServe post's "B64" column). Both sides of the format live here, so every
server that offers it (FastAPI, TorchServe's REST API, the Ray Serve deployment) takes and answers the same bytes:

    POST <url>   Content-Type: application/json   {"images": ["<base64 JPEG>", ...]}
    200          Content-Type: application/json   {"logits": [[...], ...]}   (the outputs, [N, *output dims])

The payload counted per request is the base64 text of the images (4/3 of the JPEG files: what the format costs on
the wire, beside `jpeg`'s binary files).
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import numpy as np

from serving.clients.http1 import HttpResponse
from serving.clients.http_client import HttpInferenceClient
from serving.clients.wire import WireRequest
from serving.workloads.image.corpus import RequestInputs

CONTENT_TYPE = "application/json"
IMAGES_KEY = "images"
OUTPUT_KEY = "logits"


class JsonImagesError(ValueError):
    """A request body that is not `{"images": [base64 strings]}`."""


def encode_images(images: list[bytes], key: str = IMAGES_KEY) -> bytes:
    """The request body for `images` (encoded JPEG files), under `key`."""
    return json.dumps({key: [base64.b64encode(image).decode("ascii") for image in images]}).encode()


def decode_images(body: bytes | dict[str, Any]) -> list[bytes]:
    """The JPEG files of a request body (the bytes, or the JSON a server already parsed); JsonImagesError otherwise."""
    try:
        parsed = json.loads(body) if isinstance(body, bytes | bytearray | str) else body
    except ValueError as exc:
        raise JsonImagesError(f"the body is not JSON: {exc}") from None
    images = parsed.get(IMAGES_KEY) if isinstance(parsed, dict) else None
    if not isinstance(images, list) or not images or not all(isinstance(i, str) for i in images):
        raise JsonImagesError(f'expected {{"{IMAGES_KEY}": ["<base64 JPEG>", ...]}} with at least one image')
    try:
        return [base64.b64decode(image, validate=True) for image in images]
    except ValueError as exc:
        raise JsonImagesError(f"an image is not base64: {exc}") from None


def encode_outputs(outputs: np.ndarray) -> bytes:
    """The response body for the model's outputs [N, ...]."""
    return json.dumps({OUTPUT_KEY: np.asarray(outputs, dtype=np.float32).tolist()}).encode()


def decode_outputs(body: bytes, key: str = OUTPUT_KEY) -> np.ndarray:
    """The outputs of a response body under `key`, float32."""
    try:
        return np.asarray(json.loads(body)[key], dtype=np.float32)
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"not a {{\"{key}\": [...]}} response ({exc}): {body[:200]!r}") from None


class JsonImagesClient(HttpInferenceClient):
    """POSTs the batch's JPEGs as base64 JSON to `spec.url` (the server's endpoint for the format); the bodies are
    built once and sent as pre-built bytes by the project's HTTP/1.1 client, like every HTTP load here."""

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        return self._post(encode_images(list(inputs.images)), {"Content-Type": CONTENT_TYPE})

    def response_outputs(self, response: HttpResponse) -> np.ndarray:
        return decode_outputs(response.body)

    def wire_request(self) -> WireRequest:
        return replace(super().wire_request(), sized=False)  # JSON numbers vary in length

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(decode_outputs(body))

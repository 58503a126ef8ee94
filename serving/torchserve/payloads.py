"""Both sides of what crosses TorchServe for tierbench: how a client lays out a request (keys, content types, the
gRPC method) and how the handler reads one and answers it.

TorchServe hands the handler one dict per request: REST `application/octet-stream` -> `{"body": bytearray}`, REST
`application/json` -> `{"body": <the parsed JSON>}`, REST `multipart/form-data` -> one key per field, gRPC
`PredictionsRequest.input` -> its map, key for key (values bytes; never parsed). So a request says its format by
its keys:

    tensor       REST body (octet-stream) or gRPC input "tensor": float32 C-order [N, C, H, W] bytes
    jpeg         REST multipart fields or gRPC input keys image0..image<N-1>: the JPEG files
    jpeg_base64  REST application/json {"images": [...]} (serving.workloads.image.json_images; REST only)

The answer is the outputs [N, *output dims]: raw float32 bytes (tensor, jpeg), or `{"logits": [...]}` JSON
(jpeg_base64). A request the handler cannot read is answered 400 with a JSON error of TorchServe's own shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from serving.workloads.image import json_images
from serving.workloads.image.formats import InputFormat
from serving.workloads.image.preprocessing import Preprocessing, decode_and_preprocess

BODY_KEY = "body"  # REST: the request body
TENSOR_KEY = "tensor"  # gRPC: the float32 tensor
IMAGE_PREFIX = "image"  # image0..image<N-1>: multipart fields (REST) / input keys (gRPC)
TENSOR_CONTENT_TYPE = "application/octet-stream"
PREDICTIONS = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"  # the gRPC method's full path
_IMAGE_KEY = re.compile(rf"^{IMAGE_PREFIX}(\d+)$")


class BadRequest(ValueError):
    """A request the handler cannot read: answered 400, the rest of its batch goes on."""


def image_key(index: int) -> str:
    return f"{IMAGE_PREFIX}{index}"


def request_format(request: Mapping[str, Any]) -> InputFormat:
    """Which format a request's keys say it carries (BadRequest when they say none)."""
    body = request.get(BODY_KEY)
    if TENSOR_KEY in request or isinstance(body, bytes | bytearray):
        return InputFormat.TENSOR
    if isinstance(body, dict | str):  # JSON TorchServe parsed (a str: JSON text sent with a text/* content type)
        return InputFormat.JPEG_BASE64
    if request and all(_IMAGE_KEY.match(key) for key in request):
        return InputFormat.JPEG
    raise BadRequest(f"expected a body (tensor or JSON), an input {TENSOR_KEY!r}, or JPEGs as "
                     f"{image_key(0)}..{image_key(1)}...; got keys {sorted(request)}")


def jpeg_files(request: Mapping[str, Any]) -> list[bytes]:
    """The JPEGs of image0..image<N-1>, in index order (image10 after image9)."""
    indices = sorted(int(_IMAGE_KEY.match(key)[1]) for key in request)
    if indices != list(range(len(indices))):
        raise BadRequest(f"JPEG keys must be {image_key(0)}..{image_key(len(indices) - 1)}; got {sorted(request)}")
    return [bytes(request[image_key(i)]) for i in indices]


def tensor_images(data: bytes | bytearray, input_shape: tuple[int, ...]) -> np.ndarray:
    """The float32 batch [N, *input_shape] of raw bytes."""
    per_image = 4 * int(np.prod(input_shape))
    if not data or len(data) % per_image:
        raise BadRequest(f"a tensor body of {len(data)} bytes is not N float32 images of {list(input_shape)} "
                         f"({per_image} bytes each)")
    return np.frombuffer(data, dtype=np.float32).reshape(-1, *input_shape)


def decode(request: Mapping[str, Any], input_shape: tuple[int, ...],
           preprocessing: Preprocessing) -> tuple[InputFormat, np.ndarray]:
    """A request's format and its model input [N, *input_shape] (JPEGs decoded and preprocessed)."""
    kind = request_format(request)
    if kind is InputFormat.TENSOR:
        return kind, tensor_images(request.get(TENSOR_KEY, request.get(BODY_KEY)), input_shape)
    try:
        jpegs = (json_images.decode_images(request[BODY_KEY]) if kind is InputFormat.JPEG_BASE64
                 else jpeg_files(request))
        return kind, decode_and_preprocess(jpegs, preprocessing)
    except json_images.JsonImagesError as exc:
        raise BadRequest(str(exc)) from None
    except (OSError, ValueError) as exc:  # PIL: UnidentifiedImageError is an OSError
        raise BadRequest(f"cannot decode an image: {exc}") from None


def encode(outputs: np.ndarray, kind: InputFormat) -> tuple[bytes, str]:
    """A request's answer and its content type: JSON for the JSON format, raw float32 otherwise."""
    if kind is InputFormat.JPEG_BASE64:
        return json_images.encode_outputs(outputs), json_images.CONTENT_TYPE
    return np.ascontiguousarray(outputs, dtype=np.float32).tobytes(), TENSOR_CONTENT_TYPE


def error_body(code: int, message: str) -> bytes:
    """An error in TorchServe's own shape (its frontend answers `{"code", "type", "message"}`)."""
    return json.dumps({"code": code, "type": "BadRequest", "message": message}).encode()


def outputs_of(body: bytes, batch_size: int, output_shape: tuple[int, ...]) -> np.ndarray:
    """The float32 outputs [batch, *output_shape] of a raw answer; an answer of another size is an error (TorchServe's
    gRPC drops the handler's per-request status: a 400 arrives as its JSON error in `prediction`)."""
    expected = 4 * batch_size * int(np.prod(output_shape))
    if len(body) != expected:
        raise RuntimeError(f"expected {expected} bytes of float32 outputs [{batch_size}, "
                           f"{', '.join(map(str, output_shape))}], got {len(body)}: {bytes(body[:300])!r}")
    return np.frombuffer(body, dtype=np.float32).reshape(batch_size, *output_shape)

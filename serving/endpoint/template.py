"""The client of a plain HTTP endpoint (`kind=http`): a team's own API at `<url><path>`, sent requests by a template
of what such APIs take, one per input format:

    tensor       POST, Content-Type: application/octet-stream, the float32 batch [N, *input_shape] in C order
    jpeg         POST, one image: Content-Type: image/jpeg, the JPEG file as the body;
                 several: multipart/form-data, one file part per image, each in the field `input_key`
    jpeg_base64  POST, Content-Type: application/json, {"<input_key>": ["<base64 JPEG>", ...]}

The answer is the outputs [N, *output dims]: JSON, `{"<output_key>": [[...], ...]}` or the bare list, or raw
float32 bytes (anything that does not start like JSON). The request is built once and sent as the same bytes, so
the compiled engine sends it too.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace

import numpy as np

from serving.clients import json_images
from serving.clients.base import ClientSpec, jpeg_batch, tensor_batch
from serving.clients.http1 import HttpResponse, multipart_body
from serving.clients.http_client import HttpInferenceClient
from serving.clients.wire import WireRequest
from serving.protocols import InputFormat

TENSOR_CONTENT_TYPE = "application/octet-stream"
JPEG_CONTENT_TYPE = "image/jpeg"


@dataclass(frozen=True)
class TemplateSpec(ClientSpec):
    """A plain HTTP endpoint's request: `url` is where it is POSTed (the base URL and the path), the keys its JSON
    and form fields use."""

    input_key: str = json_images.IMAGES_KEY
    output_key: str = json_images.OUTPUT_KEY


def template_outputs(body: bytes, spec: TemplateSpec) -> np.ndarray:
    """The float32 outputs of an answer: JSON (under `output_key`, or a bare list) or raw float32 bytes."""
    if body[:1] in (b"{", b"["):
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None  # raw float32 bytes may start like JSON: read them as such below
        if isinstance(parsed, list):
            return np.asarray(parsed, dtype=np.float32)
        if isinstance(parsed, dict):
            return json_images.decode_outputs(body, spec.output_key)
    expected = 4 * spec.batch_size * int(np.prod(spec.output_shape))
    if len(body) != expected:
        raise RuntimeError(f"the answer is neither JSON with {spec.output_key!r} nor {expected} bytes of float32 "
                           f"outputs [{spec.batch_size}, {', '.join(map(str, spec.output_shape))}]: "
                           f"{bytes(body[:200])!r}")
    return np.frombuffer(body, dtype=np.float32).reshape(spec.batch_size, *spec.output_shape)


class TemplateHttpClient(HttpInferenceClient):
    """POSTs the batch, laid out by the template for its input format, to `spec.url`."""

    spec: TemplateSpec

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if not isinstance(spec, TemplateSpec):
            spec = self.spec = TemplateSpec(**{f: getattr(spec, f) for f in spec.__dataclass_fields__})
        if spec.input_format == InputFormat.TENSOR:
            tensor = tensor_batch(spec)
            self._body, self._content_type, self._payload_bytes = tensor.tobytes(), TENSOR_CONTENT_TYPE, tensor.nbytes
            return
        images = jpeg_batch(spec)
        if spec.input_format == InputFormat.JPEG_BASE64:
            self._body = json_images.encode_images(images, spec.input_key)
            self._content_type = json_images.CONTENT_TYPE
            self._payload_bytes = sum(len(base64.b64encode(image)) for image in images)
        elif spec.input_format == InputFormat.JPEG:
            if len(images) == 1:
                self._body, self._content_type = images[0], JPEG_CONTENT_TYPE
            else:
                self._body, self._content_type = multipart_body([(spec.input_key, image) for image in images])
            self._payload_bytes = sum(len(image) for image in images)
        else:
            raise ValueError(f"{type(self).__name__}: no template for input format {spec.input_format!r}")

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    def _request_bytes(self) -> bytes:
        return self._post(self._body, {"Content-Type": self._content_type})

    def response_outputs(self, response: HttpResponse) -> np.ndarray:
        return template_outputs(response.body, self.spec)

    def wire_request(self) -> WireRequest:
        return replace(super().wire_request(), sized=False)  # a JSON answer's numbers vary in length

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(template_outputs(body, self.spec))

"""The client of a plain HTTP endpoint (`kind=http`): a team's own API at `<url><path>`, sent requests by a template
of what such APIs take, one per input format:

    tensor       POST, Content-Type: application/octet-stream, the float32 batch [N, *input_shape] in C order
    jpeg         POST, one image: Content-Type: image/jpeg, the JPEG file as the body;
                 several: multipart/form-data, one file part per image, each in the field `input_key`
    jpeg_base64  POST, Content-Type: application/json, {"<input_key>": ["<base64 JPEG>", ...]}

The answer is the outputs [N, *output dims]: JSON, `{"<output_key>": [[...], ...]}` or the bare list, or raw
float32 bytes (anything that does not start like JSON). The requests of the pool are built once and sent as those
bytes, so the compiled engine sends them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np

from serving.clients.base import ClientSpec
from serving.clients.http1 import HttpResponse, multipart_body
from serving.clients.http_client import HttpInferenceClient
from serving.clients.wire import WireRequest
from serving.workloads.image import json_images
from serving.workloads.image.corpus import RequestInputs
from serving.workloads.image.formats import InputFormat

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
        if spec.input_format not in (InputFormat.TENSOR, InputFormat.JPEG_BASE64, InputFormat.JPEG):
            raise ValueError(f"{type(self).__name__}: no template for input format {spec.input_format!r}")

    def _request_bytes(self, inputs: RequestInputs) -> bytes:
        if self.spec.input_format == InputFormat.TENSOR:
            body, content_type = inputs.tensor.tobytes(), TENSOR_CONTENT_TYPE
        elif self.spec.input_format == InputFormat.JPEG_BASE64:
            body = json_images.encode_images(list(inputs.images), self.spec.input_key)
            content_type = json_images.CONTENT_TYPE
        elif len(inputs.images) == 1:
            body, content_type = inputs.images[0], JPEG_CONTENT_TYPE
        else:
            body, content_type = multipart_body([(self.spec.input_key, image) for image in inputs.images])
        return self._post(body, {"Content-Type": content_type})

    def response_outputs(self, response: HttpResponse) -> np.ndarray:
        return template_outputs(response.body, self.spec)

    def wire_request(self) -> WireRequest:
        return replace(super().wire_request(), sized=False)  # a JSON answer's numbers vary in length

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(template_outputs(body, self.spec))

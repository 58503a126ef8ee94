"""What an image request carries (the trial's `input_format`): a tensor, or encoded images the server decodes."""

from __future__ import annotations

from enum import StrEnum


class InputFormat(StrEnum):
    """What a request carries: a float32 tensor the model takes as it is, the JPEG files the server decodes and
    preprocesses (`serving.workloads.image.preprocessing`) as binary, or the same files as base64 strings in a JSON
    body, as the studies' FastAPI service and TorchServe's REST examples take them
    (`serving.workloads.image.json_images`; JSON APIs only, over HTTP: a server without one skips it, saying why)."""

    TENSOR = "tensor"
    JPEG = "jpeg"
    JPEG_BASE64 = "jpeg_base64"

    @property
    def images(self) -> bool:
        """Whether requests carry encoded images (the server decodes them), not a tensor."""
        return self is not InputFormat.TENSOR

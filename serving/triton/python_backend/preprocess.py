"""Triton Python-backend model: decode JPEGs and preprocess them into the classifier's input tensor.

The first step of the `<model>_jpeg` ensemble (see `serving.triton.ensemble`). The preprocessing is the
project's one definition, `serving/workloads/image/preprocessing.py`, copied next to this file as
`tierbench_images.py` when the repository is rendered: the stub runs Python in isolated mode (PYTHONPATH is
ignored), and a copy guarantees the server runs the very code the Ray Serve path and the reference run. Needs numpy
and Pillow.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def _load_images_module():
    path = Path(__file__).with_name("tierbench_images.py")
    spec = importlib.util.spec_from_file_location("tierbench_images", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        images = _load_images_module()
        # The model's preprocessing (serving.workloads.image.preprocessing.Preprocessing), written into this model's
        # config when rendered.
        self.preprocessing = images.Preprocessing.from_json(config["parameters"]["preprocessing"]["string_value"])
        self.decode_and_preprocess = images.decode_and_preprocess

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            # BYTES input [B, 1]: an object array of encoded images.
            blobs = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy().reshape(-1)
            try:
                batch = self.decode_and_preprocess([bytes(b) for b in blobs], self.preprocessing)
            except Exception as exc:  # noqa: BLE001 - a bad image fails its request, not the model
                error = pb_utils.TritonError(f"cannot decode the request's images: {exc}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            out = pb_utils.Tensor(self.output_name, np.ascontiguousarray(batch, dtype=np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

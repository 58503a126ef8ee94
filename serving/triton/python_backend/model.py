"""Triton Python-backend model: serves an ONNX file with ONNX Runtime.

Used with the `tritonserver` bundled in nvidia-pytriton, which has only the Python backend. The ONNX file,
execution providers and thread count come from the model config's `parameters`, written by
`serving.triton.repository`. Runs inside Triton's stub process: standard library, numpy and onnxruntime only.
"""

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


def _param(model_config: dict, key: str, default: str = "") -> str:
    return model_config.get("parameters", {}).get(key, {}).get("string_value", default)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        options = ort.SessionOptions()
        threads = int(_param(config, "ort_threads", "0") or 0)
        if threads > 0:
            options.intra_op_num_threads = threads
        providers = json.loads(_param(config, "ort_providers", '["CPUExecutionProvider"]'))
        self.session = ort.InferenceSession(_param(config, "onnx_path"), options, providers=providers)
        self.providers = self.session.get_providers()

    def execute(self, requests: list) -> list:
        # With the dynamic batcher on, several requests arrive at once: one ONNX Runtime run for all of them.
        batches = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        merged = batches[0] if len(batches) == 1 else np.concatenate(batches)
        (logits,) = self.session.run([self.output_name], {self.input_name: merged})
        logits = np.ascontiguousarray(logits, dtype=np.float32)
        responses, start = [], 0
        for batch in batches:
            out = pb_utils.Tensor(self.output_name, logits[start:start + len(batch)])
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += len(batch)
        return responses

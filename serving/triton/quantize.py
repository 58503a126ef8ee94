"""Lower precisions of the exported FP32 model for ONNX Runtime, each built once on the server's node beside the
export and reused after:

- INT8: quantised statically into QDQ form (QuantizeLinear / DequantizeLinear pairs, which ONNX Runtime's CPU
  provider fuses into integer kernels and TensorRT reads as explicit INT8), its activation ranges calibrated on the
  sweep's own input corpus preprocessed as the model's config says;
- FP16: its weights and arithmetic converted to float16 by ONNX Runtime's converter, its inputs and outputs kept
  float32 so that clients send the same requests to every precision."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from serving.workloads.image.corpus import InputSource, corpus_tensors
from serving.workloads.image.preprocessing import Preprocessing

log = logging.getLogger(__name__)

CALIBRATION_IMAGES = 64  # corpus images the activation ranges are calibrated on


def _batches(tensors: np.ndarray, input_name: str) -> Iterator[dict[str, np.ndarray]]:
    for index in range(len(tensors)):
        yield {input_name: np.ascontiguousarray(tensors[index:index + 1])}


def _staged(out: Path, build: Callable[[Path], None]) -> Path:
    """`out`, written by `build` into a file of this process's own and renamed: a concurrent builder (two servers on
    one node) never reads a half-written model."""
    staging = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    try:
        build(staging)
        os.replace(staging, out)
    finally:
        staging.unlink(missing_ok=True)
    return out


def fp16_onnx(onnx_path: Path) -> Path:
    """The FP16 model of the FP32 file `onnx_path`: float16 weights and arithmetic, float32 inputs and outputs (one
    cast at each end). ONNX Runtime's CPU provider runs an operator it has no float16 kernel for in float32 between
    casts, so FP16 pays off on a GPU, not on a CPU."""
    out = onnx_path.with_name(f"{onnx_path.stem}.fp16-{hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:12]}.onnx")
    if out.exists():
        return out

    def build(staging: Path) -> None:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(onnx_path)), keep_io_types=True), str(staging))

    log.info("converting %s to FP16 (inputs and outputs kept FP32)", onnx_path.name)
    return _staged(out, build)


def int8_qdq(onnx_path: Path, input_name: str, preprocessing: Preprocessing, calibration: InputSource,
             images: int = CALIBRATION_IMAGES, symmetric: bool = False) -> Path:
    """The INT8 QDQ model of the FP32 file `onnx_path`, calibrated on the first `images` images of `calibration`'s
    corpus (MinMax ranges, per-channel weights, signed 8-bit activations and weights). `symmetric` activations (a zero
    point of 0) are what TensorRT's explicit INT8 accepts; ONNX Runtime's own kernels take either."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    corpus = calibration.corpus()
    key = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:12] + hashlib.sha256(
        f"{corpus.name}/{images}/{preprocessing.to_json()}{'/symmetric' if symmetric else ''}".encode()).hexdigest()[:8]
    out = onnx_path.with_name(f"{onnx_path.stem}.int8-{key}.onnx")
    if out.exists():
        return out
    tensors = corpus_tensors(corpus, preprocessing)[:images]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = _batches(tensors, input_name)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    log.info("quantising %s to INT8 (QDQ%s), calibrated on %d images of corpus %s", onnx_path.name,
             ", symmetric" if symmetric else "", len(tensors), corpus.name)
    prepared = out.with_name(f"{out.name}.{os.getpid()}.pre")

    def build(staging: Path) -> None:
        # ONNX Runtime's own preparation (shape inference, constant folding: the export's convolution biases become
        # initializers, so each convolution quantises whole): on a 2-core AVX-512 VNNI VM, ResNet-18 at batch 8
        # ran 1.18x faster than FP32 with it and 2x slower without (2026-11-27).
        try:
            quant_pre_process(str(onnx_path), str(prepared))
            quantize_static(str(prepared), str(staging), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True})
        finally:
            prepared.unlink(missing_ok=True)

    return _staged(out, build)


def served_onnx(onnx_path: Path, precision: str, tensorrt: bool, input_name: str, preprocessing: Preprocessing,
                calibration: InputSource, images: int = CALIBRATION_IMAGES) -> Path:
    """The file a Triton variant of `precision` serves, and the ceiling times: the INT8 QDQ file (symmetric for
    TensorRT), the FP16 file on ONNX Runtime's own providers (TensorRT builds its FP16 engine from the FP32 file),
    else the export. Each keeps the export's tensor names, inputs and outputs: the same config serves it."""
    if precision == "int8":
        return int8_qdq(onnx_path, input_name, preprocessing, calibration, images, symmetric=tensorrt)
    if precision == "fp16" and not tensorrt:
        return fp16_onnx(onnx_path)
    return onnx_path

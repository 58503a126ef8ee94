"""Export a PyTorch model to ONNX (dynamic batch) into a Triton model repository and check it against PyTorch."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from serving.model_config import ModelConfig, ModelSource
from serving.models import build_model, example_batch

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
OPSET = 17
# Bump when the export procedure changes, so files written by an older one count as stale.
EXPORT_FORMAT_VERSION = 1
# Model config keys the exported file does not depend on (changing them must not rebuild TensorRT engines).
NOT_IN_THE_ONNX_FILE = ("preprocess", "max_file_mb")


@dataclass
class ExportReport:
    onnx_path: str
    fingerprint: str
    max_abs_diff: float
    check_batch_size: int
    exported: bool  # False when an up-to-date file was already there


def onnx_path_for(repository: Path, model_name: str) -> Path:
    return repository / model_name / "1" / "model.onnx"


def export_fingerprint(model_cfg: ModelConfig) -> str:
    """What the exported file depends on: the model config, torch version and export procedure."""
    import torch

    model = model_cfg.to_dict()
    for key in NOT_IN_THE_ONNX_FILE:
        model.pop(key, None)
    payload = {
        "model": model,
        "torch": torch.__version__,
        "opset": OPSET,
        "format": EXPORT_FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _sidecar(onnx_path: Path) -> Path:
    return onnx_path.parent.parent / "export.json"


def is_stale(model_cfg: ModelConfig, onnx_path: Path) -> bool:
    sidecar = _sidecar(onnx_path)
    if not onnx_path.exists() or not sidecar.exists():
        return True
    try:
        recorded = json.loads(sidecar.read_text())["fingerprint"]
    except (ValueError, KeyError):
        return True
    return recorded != export_fingerprint(model_cfg)


def export_onnx(model_cfg: ModelConfig, repository: Path, check_batch_size: int = 2) -> ExportReport:
    """Write `<repository>/<model>/1/model.onnx` and compare ONNX Runtime's output with PyTorch's."""
    import torch

    onnx_path = onnx_path_for(repository, model_cfg.name)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    model = build_model(model_cfg)
    dummy = example_batch(model_cfg, 1)
    tmp_path = onnx_path.with_suffix(".onnx.tmp")
    log.info("exporting %s to %s", model_cfg.name, onnx_path)
    with torch.inference_mode():
        torch.onnx.export(
            model,
            (dummy,),
            str(tmp_path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    tmp_path.replace(onnx_path)
    max_abs_diff = compare_with_pytorch(model_cfg, onnx_path, check_batch_size, model=model)
    report = ExportReport(
        onnx_path=str(onnx_path),
        fingerprint=export_fingerprint(model_cfg),
        max_abs_diff=max_abs_diff,
        check_batch_size=check_batch_size,
        exported=True,
    )
    _sidecar(onnx_path).write_text(json.dumps(asdict(report), indent=2))
    return report


def compare_with_pytorch(model_cfg: ModelConfig, onnx_path: Path, batch_size: int,
                         model: torch.nn.Module | None = None) -> float:
    """Max absolute difference between ONNX Runtime (CPU EP) and PyTorch logits on a fixed batch."""
    import numpy as np
    import onnxruntime as ort
    import torch

    model = model if model is not None else build_model(model_cfg)
    batch = example_batch(model_cfg, batch_size)
    with torch.inference_mode():
        expected = model(batch).numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (actual,) = session.run([OUTPUT_NAME], {INPUT_NAME: batch.numpy()})
    return float(np.max(np.abs(actual - expected)))


def ensure_onnx(model_cfg: ModelConfig, repository: Path) -> ExportReport:
    """Export when the file is missing or was written for another config / torch / export procedure; an ONNX model
    (`model.source=onnx`) is its own file, served as is.

    A file lock serialises concurrent sweeps (several tiers on one machine) exporting the same model.
    """
    import fcntl

    if ModelSource(model_cfg.source) is ModelSource.ONNX:
        return ExportReport(onnx_path=str(model_cfg.path), fingerprint=export_fingerprint(model_cfg),
                            max_abs_diff=0.0, check_batch_size=0, exported=False)

    onnx_path = onnx_path_for(repository, model_cfg.name)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with open(onnx_path.parent.parent / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_stale(model_cfg, onnx_path):
            return export_onnx(model_cfg, repository)
        recorded = json.loads(_sidecar(onnx_path).read_text())
    recorded["exported"] = False
    return ExportReport(**recorded)

"""ONNX export: dynamic batch, matches PyTorch, re-exported only when stale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from experiments.config.compose import load_config
from serving.export import ensure_onnx, export_onnx, is_stale
from serving.models import example_batch


def test_export_matches_pytorch_and_has_a_dynamic_batch(tmp_path: Path) -> None:
    model = load_config(["model=resnet18"]).model
    report = export_onnx(model, tmp_path)
    assert report.max_abs_diff < 1e-3, report
    session = ort.InferenceSession(report.onnx_path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        (out,) = session.run(None, {"input": example_batch(model, batch).numpy()})
        assert out.shape == (batch, 1000) and np.isfinite(out).all()


def test_ensure_onnx_exports_only_when_missing_or_stale(tmp_path: Path) -> None:
    model = load_config(["model=resnet18"]).model
    first = ensure_onnx(model, tmp_path)
    assert first.exported
    assert not ensure_onnx(model, tmp_path).exported
    other_weights = load_config(["model=resnet18", "model.seed=1"]).model
    assert is_stale(other_weights, Path(first.onnx_path))

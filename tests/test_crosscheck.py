"""The cross-check of the backends: the comparison, the verdict and its reason, and that a wrong model is far out."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.config.compose import load_config
from experiments.run.crosscheck import CrosscheckResult, PathCheck, compare, reference_logits
from serving.clients.base import ClientSpec


def test_compare_counts_top1_agreement_and_the_largest_difference() -> None:
    reference = np.array([[0.0, 1.0, 0.5], [2.0, 0.0, 0.0]], dtype=np.float32)
    actual = np.array([[0.0, 1.0, 0.6], [0.0, 0.1, 0.0]], dtype=np.float32)
    agreement, diff = compare(reference, actual)
    assert agreement == 0.5 and diff == pytest.approx(2.0)
    with pytest.raises(ValueError, match="shape"):
        compare(reference, actual[:1])


def test_verdict_uses_the_worst_path_and_names_the_figures() -> None:
    result = CrosscheckResult("fp32", 0.05, 1.0, 8, [PathCheck("http", "tensor", 1.0, 1e-5),
                                                     PathCheck("grpc", "jpeg", 0.25, 4.2)])
    assert not result.passed
    assert result.metrics() == {"crosscheck_top1_agreement": 0.25, "crosscheck_max_abs_diff": 4.2}
    reason = result.reason()
    assert "top-1 agreement 0.250" in reason and "4.2" in reason and "worst path grpc/jpeg" in reason
    assert "fp32 tolerance" in reason
    close = CrosscheckResult("fp16", 0.5, 0.75, 8, [PathCheck("http", "tensor", 0.875, 0.3)])
    assert close.passed


def test_an_output_that_is_not_logits_is_compared_by_max_abs_diff_only() -> None:
    reference = np.zeros((2, 5, 16), dtype=np.float32)
    actual = reference.copy()
    actual[1, 4, 15] = 0.25
    assert compare(reference, actual, classifier=False) == (None, pytest.approx(0.25))
    close = CrosscheckResult("fp32", 0.5, 1.0, 2, [PathCheck("http", "tensor", None, 0.25)])
    assert close.passed and close.metrics() == {"crosscheck_max_abs_diff": 0.25}
    assert close.summary().startswith("max abs diff only")
    far = CrosscheckResult("fp32", 0.05, 1.0, 2, [PathCheck("http", "jpeg", None, 0.25)])
    assert not far.passed
    assert "top-1" not in far.reason() and "max |output diff| 0.25 (allowed 0.05)" in far.reason()


def test_a_model_with_other_weights_is_far_outside_every_tolerance() -> None:
    cfg = load_config()
    spec = ClientSpec(target="", url="", model_name="resnet18", input_format="jpeg", batch_size=4,
                      input_shape=tuple(cfg.model.input_shape), output_shape=(cfg.model.num_classes,))
    same = reference_logits(cfg.model, spec)
    other = reference_logits(load_config(["model.seed=1"]).model, spec)
    agreement, diff = compare(same, other)
    loosest = cfg.crosscheck.tolerances["fp16"]
    assert diff > 4 * loosest.max_abs_diff and agreement < loosest.min_top1_agreement
    assert compare(same, reference_logits(cfg.model, spec)) == (1.0, 0.0)

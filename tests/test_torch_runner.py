"""The PyTorch side of the Ray Serve deployment on the CPU: warm-up per batch size, the compile path, and
half precision refused where it cannot run."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.config.compose import load_config
from serving.models import build_model, example_batch
from serving.pytorch.runner import TorchOptions, TorchRunner


def test_runner_matches_the_model_and_times_its_warmup() -> None:
    cfg = load_config().model
    runner = TorchRunner(cfg, "cpu", TorchOptions())
    runner.warm_up((2, 1, 2))
    assert runner.info["dtype"] == "float32" and runner.info["torch_compile"] is False
    assert runner.info["warmup_s"] >= runner.info["warmup_first_call_s"] > 0
    assert "torch_compile_s" not in runner.info
    batch = example_batch(cfg, 2)
    expected = build_model(cfg)(batch).detach().numpy()
    np.testing.assert_allclose(runner.infer(batch.numpy()), expected, rtol=1e-4, atol=1e-4)


def test_compiled_runner_compiles_during_warmup_and_gives_the_same_logits() -> None:
    # The `eager` backend runs TorchDynamo's graph capture without code generation: the real compile path at a
    # fraction of inductor's cost (inductor takes minutes on 2 cores; it runs on GPU nodes in tests/test_gpu.py).
    cfg = load_config().model
    runner = TorchRunner(cfg, "cpu", TorchOptions(compile=True, compile_backend="eager"))
    runner.warm_up((1,))
    assert runner.info["torch_compile"] is True and runner.info["torch_compile_s"] > 0
    batch = example_batch(cfg, 1)
    np.testing.assert_allclose(runner.infer(batch.numpy()), build_model(cfg)(batch).detach().numpy(),
                               rtol=1e-4, atol=1e-4)


def test_half_precision_on_the_cpu_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        TorchRunner(load_config().model, "cpu", TorchOptions(half=True))

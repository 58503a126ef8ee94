"""Build the benchmark's image classifiers: torchvision architectures with deterministic random weights.

Nothing is downloaded: the weights come from a fixed seed, so every node (and the ONNX export) builds the
same function and outputs can be compared across backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hydra.utils import get_method

if TYPE_CHECKING:
    import torch


def build_model(model_cfg: Any) -> torch.nn.Module:
    """Instantiate `model_cfg.factory` with weights drawn from `model_cfg.seed`, in eval mode."""
    import torch

    factory = get_method(model_cfg.factory)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(int(model_cfg.seed))
        model = factory(weights=None, num_classes=int(model_cfg.num_classes))
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def example_batch(model_cfg: Any, batch_size: int, seed: int = 1) -> torch.Tensor:
    """A reproducible float32 batch in the model's input shape (normalised-image-like values)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn((batch_size, *model_cfg.input_shape), generator=generator, dtype=torch.float32)


def tiny_cnn(weights: None = None, num_classes: int = 1000) -> torch.nn.Module:
    """A ~1 ms convnet with the ResNet input/output contract: for tests and for measuring the client and the
    transport, where a real model's compute would hide their costs."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, stride=4, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, num_classes),
    )

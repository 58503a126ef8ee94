"""Build the model a sweep serves, from `model.source` (`ModelSource`): a factory with seeded random weights (the
reproducible default: nothing downloaded, every node builds the same function) or the user's own weights, a
TorchScript or torch.export program, or an ONNX file that only Triton serves.

Files named by the config (`model.weights`, `model.path`) are read where this runs: on a tier node that is the
copy staged there (`serving.model_files`), never the driver's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from hydra.utils import get_method

from serving.model_config import ModelConfig, ModelSource
from serving.workloads.image.preprocessing import Preprocessing

if TYPE_CHECKING:
    import torch

TIMM_PREFIX = "timm:"


def model_file(model_cfg: ModelConfig) -> str | None:
    """The file the model is read from, or None (a factory with seeded weights)."""
    return getattr(model_cfg, ModelSource(model_cfg.source).file_key) or None


def output_dims(model_cfg: ModelConfig) -> tuple[int, ...]:
    """The model's output per image: `model.output_shape`, or a classifier's [num_classes]."""
    shape = model_cfg.output_shape
    return tuple(int(d) for d in shape) if shape else (int(model_cfg.num_classes),)


def is_classifier(model_cfg: ModelConfig) -> bool:
    """Whether the output is a classifier's logits (top-1 agreement means something), not another tensor."""
    return not model_cfg.output_shape


def build_model(model_cfg: ModelConfig) -> torch.nn.Module:
    """The model as a float32 CPU `torch.nn.Module` in eval mode (ValueError for an ONNX-only model)."""
    import torch

    source = ModelSource(model_cfg.source)
    if source is ModelSource.FACTORY:
        return _from_factory(model_cfg).eval()
    if source is ModelSource.TORCHSCRIPT:
        return torch.jit.load(model_cfg.path, map_location="cpu").eval()
    if source is ModelSource.TORCH_EXPORT:
        module = torch.export.load(model_cfg.path).module()
        # An exported program's module is already in inference form and refuses train()/eval(); the legacy ONNX
        # exporter calls train(False), which must then be a no-op.
        module.train = lambda mode=True: module
        return module
    raise ValueError(f"model {model_cfg.name} is an ONNX file (model.source=onnx): PyTorch cannot run it")


def _from_factory(model_cfg: ModelConfig) -> torch.nn.Module:
    import torch

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(int(model_cfg.seed))
        if str(model_cfg.factory).startswith(TIMM_PREFIX):
            import timm

            model = timm.create_model(model_cfg.factory.removeprefix(TIMM_PREFIX), pretrained=False,
                                      num_classes=int(model_cfg.num_classes))
        else:
            model = get_method(model_cfg.factory)(weights=None, num_classes=int(model_cfg.num_classes))
    finally:
        torch.random.set_rng_state(generator_state)
    if model_cfg.weights:
        state = torch.load(model_cfg.weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
    return model


def reference_runner(model_cfg: ModelConfig) -> Any:
    """A callable float32 NCHW batch -> float32 outputs on the CPU: the cross-check's reference (PyTorch, or ONNX
    Runtime's CPU provider for an ONNX-only model)."""
    if ModelSource(model_cfg.source).pytorch:
        import torch

        model = build_model(model_cfg)

        def run_torch(batch: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return model(torch.from_numpy(batch)).float().numpy()

        return run_torch
    import onnxruntime as ort

    session = ort.InferenceSession(model_cfg.path, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run_onnx(batch: np.ndarray) -> np.ndarray:
        return session.run(None, {input_name: batch})[0]

    return run_onnx


def reference_name(model_cfg: ModelConfig) -> str:
    return "PyTorch" if ModelSource(model_cfg.source).pytorch else "ONNX Runtime (CPU)"


def preprocessing(model_cfg: ModelConfig) -> Preprocessing:
    """`model.preprocess` for the model's input size: what every JPEG path runs."""
    p = model_cfg.preprocess
    _, height, width = (int(d) for d in model_cfg.input_shape)
    return Preprocessing(height=height, width=width, resize_shorter_to=p.resize_shorter_to,
                         mean=tuple(float(v) for v in p.mean), std=tuple(float(v) for v in p.std),
                         channel_order=str(p.channel_order), interpolation=str(p.interpolation))


def example_batch(model_cfg: ModelConfig, batch_size: int, seed: int = 1) -> torch.Tensor:
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
